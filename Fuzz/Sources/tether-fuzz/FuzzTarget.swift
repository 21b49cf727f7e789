// The libFuzzer entry points. libFuzzer supplies `main`, so this module has no top-level
// code (SwiftPM compiles executables with -parse-as-library under --sanitize=fuzzer).
//
// TETHER_FUZZ_PROFILE names the profile to fuzz, one of Profile.builtIn, `json` for the
// JSON parser and writer, or `websocket` for the WebSocket frame reader; `list` prints the
// names, one a line, and exits.
import FuzzHarness
@_spi(Fuzzing) import Tether

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The profile under test, chosen once from the environment; `nil` to fuzz JSON or WebSocket.
let fuzzedProfile: Profile? = chooseProfile()
/// Whether the WebSocket frame reader is under test.
let fuzzesWebSocket = getenv("TETHER_FUZZ_PROFILE").map { String(cString: $0) } == "websocket"

private func chooseProfile() -> Profile? {
    let name = getenv("TETHER_FUZZ_PROFILE").map { String(cString: $0) }
    let names = Profile.builtIn.map(\.name) + ["json", "websocket"]
    if name == "list" {
        print(names.joined(separator: "\n"))
        exit(0)
    }
    if name == "json" || name == "websocket" { return nil }
    if let name, let profile = Profile.named(name) { return profile }
    let problem = name.map { "unknown profile \"\($0)\"" } ?? "TETHER_FUZZ_PROFILE is not set"
    writeError(
        "tether-fuzz: \(problem); set TETHER_FUZZ_PROFILE to one of: \(names.joined(separator: " ")) (or to list)\n"
    )
    exit(2)
}

private func writeError(_ text: String) {
    var text = text
    text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
    // Resolve the profile before libFuzzer reads the corpus, so a bad name fails at once.
    _ = fuzzedProfile
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    if fuzzesWebSocket {
        if let violation = WebSocketFuzzing.check(input) { fatalError("broken WebSocket reader invariant: \(violation)") }
        return 0
    }
    guard let profile = fuzzedProfile else {
        do {
            try FuzzHarness.runJSON(input)
        } catch {
            fatalError("broken JSON invariant: \(error)")
        }
        return 0
    }
    do {
        try FuzzHarness.run(input, profile: profile)
    } catch {
        fatalError("broken codec invariant: \(error)")
    }
    return 0
}
