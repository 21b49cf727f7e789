import COpenSSL
import Tether

/// The calling thread's OpenSSL error queue. Every TLS call site empties it before returning,
/// so no error is left to confuse the next call made on that thread.
enum OpenSSLErrors {
    /// One queued error.
    struct Entry {
        var library: Int32
        var reason: Int32
        var text: String
    }

    /// Takes every error queued on this thread, oldest first.
    static func take() -> [Entry] {
        var entries: [Entry] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            let text: String
            if let reason = ERR_reason_error_string(code) {
                text = String(cString: reason)
            } else {
                var buffer = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &buffer, buffer.count)
                text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
            entries.append(Entry(library: tether_ERR_GET_LIB(code), reason: tether_ERR_GET_REASON(code), text: text))
        }
        return entries
    }

    /// The reasons queued on this thread as one phrase, such as `wrong version number`;
    /// empties the queue.
    static func takeMessage(fallback: String = "unknown OpenSSL error") -> String {
        phrase(take(), fallback: fallback)
    }

    /// The distinct reasons of `entries`, oldest first, joined by `: `; `fallback` for none.
    static func phrase(_ entries: [Entry], fallback: String = "unknown OpenSSL error") -> String {
        guard !entries.isEmpty else { return fallback }
        var seen: [String] = []
        for entry in entries where !seen.contains(entry.text) { seen.append(entry.text) }
        return seen.joined(separator: ": ")
    }

    /// Empties the queue.
    static func clear() {
        ERR_clear_error()
    }
}
