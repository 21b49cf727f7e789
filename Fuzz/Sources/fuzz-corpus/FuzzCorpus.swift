// Regenerates the seed corpora in Fuzz/Corpus: for every profile in Profile.builtIn, a
// handful of representative frames encoded with that profile's codec, alone, together,
// truncated, and a frame declaring a payload over the fuzz target's limit. Each file starts
// with the chunking seed byte the harness expects. Frames a profile cannot encode are left out.
//
//   swift run --package-path Fuzz fuzz-corpus [DIRECTORY]
//
// DIRECTORY defaults to this package's Corpus folder, which is emptied first: the corpus is
// generated, never edited by hand (crash reproducers go in Fuzz/Regressions/<profile>/).
// In a DIRECTORY given here only the built-in profiles' folders are replaced.
import FuzzHarness
import Foundation
@_spi(Fuzzing) import Tether

struct Entry {
    var name: String
    var frames: [Frame]
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// The frames the corpus is made of.
enum Samples {
    static let heartbeat = Frame(type: 0x1, serial: 1)
    static let notification = Frame(type: 0x2, serial: 0, payload: bytes(#"{"event":"tick","count":3}"#))
    static let emptyNotification = Frame(type: 0x2, serial: 0)
    static let request = Frame(type: 0x401, serial: 7, payload: bytes(#"{"method":"echo","params":{"text":"hello"}}"#))
    static let response = Frame(type: 0x402, serial: 7, payload: bytes(#"{"result":{"text":"hello"}}"#))
    static let emptyRequest = Frame(type: 0x401, serial: 0xFFFF_FFFF)
    static let large = Frame(type: 0x402, serial: 3, payload: (0..<300).map { UInt8($0 % 251) })
    static let binary = Frame(type: 0x402, serial: 9, payload: [0x00, 0x0A, 0x0D, 0x7F, 0x80, 0xFF, 0x0A])
    /// One byte over the fuzz target's payload limit.
    static let oversize = Frame(type: 0x402, serial: 1, payload: Array(repeating: 0x61, count: FuzzHarness.maximumPayloadLength + 1))

    static let entries: [Entry] = [
        Entry(name: "heartbeat", frames: [heartbeat]),
        Entry(name: "notification", frames: [notification]),
        Entry(name: "notification-empty", frames: [emptyNotification]),
        Entry(name: "request-json", frames: [request]),
        Entry(name: "response-json", frames: [response]),
        Entry(name: "request-empty-max-serial", frames: [emptyRequest]),
        Entry(name: "response-300-bytes", frames: [large]),
        Entry(name: "response-binary", frames: [binary]),
        Entry(name: "two-frames", frames: [heartbeat, request]),
        Entry(name: "conversation", frames: [request, notification, response, heartbeat, emptyNotification]),
    ]
}

/// Encodes `frames` with a fresh codec, or `nil` when the profile cannot encode one of them.
func encode(_ frames: [Frame], profile: Profile, limit: Int = FuzzHarness.maximumPayloadLength) -> [UInt8]? {
    let codec = profile.makeCodec(limit)
    var buffer = FrameBuffer()
    for frame in frames {
        do { try codec.encode(frame, into: &buffer) } catch { return nil }
    }
    return Array(buffer.readableBytesView)
}

/// The files for one profile, by name, without their seed byte.
func corpus(for profile: Profile) -> [(name: String, stream: [UInt8])] {
    var files: [(name: String, stream: [UInt8])] = []
    for entry in Samples.entries {
        if let stream = encode(entry.frames, profile: profile) { files.append((entry.name, stream)) }
    }
    // A frame cut short, and one cut inside its first bytes (a partial header).
    if let stream = encode([Samples.request], profile: profile), stream.count > 1 {
        files.append(("truncated-request", Array(stream.dropLast())))
        files.append(("truncated-header", Array(stream.prefix(max(1, min(6, stream.count / 2))))))
    }
    // The start of a frame whose payload is one byte over the fuzz target's limit, encoded
    // by a codec with a larger one: a declared length the decoder must refuse up front.
    if let stream = encode([Samples.oversize], profile: profile, limit: 2 * FuzzHarness.maximumPayloadLength) {
        files.append(("oversize-length", Array(stream.prefix(64))))
    }
    return files
}

@main
struct FuzzCorpus {
    /// Seeds for the JSON parser and writer.
    static let jsonSeeds = [
        #"{"a":[1,2.5,-3e4,true,false,null],"b":{"c":"d\u00e9\n"}}"#,
        "[[[[[]]]]]",
        #""\ud83d\ude00\/\"\\ \b\f\r\t""#,
        "-0.000001",
        #"{"":{"":[{"x":1}]}}"#,
        "123456789012345678901234",
    ]

    static func main() {
        let fuzzDirectory = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let output = CommandLine.arguments.count > 1
            ? URL(fileURLWithPath: CommandLine.arguments[1])
            : fuzzDirectory.appendingPathComponent("Corpus")

        let files = FileManager.default
        do {
            // Folders of profiles no longer built in go too, but only in this package's own
            // Corpus folder: a directory given on the command line may hold anything.
            if CommandLine.arguments.count == 1, files.fileExists(atPath: output.path) {
                try files.removeItem(at: output)
            }
            for profile in Profile.builtIn {
                let directory = output.appendingPathComponent(profile.name)
                if files.fileExists(atPath: directory.path) { try files.removeItem(at: directory) }
                try files.createDirectory(at: directory, withIntermediateDirectories: true)
                let generated = corpus(for: profile)
                for (index, file) in generated.enumerated() {
                    // Seeds whose low three bits differ, so the corpus covers every chunk size limit.
                    let seed = UInt8(truncatingIfNeeded: index &* 0x25)
                    let number = String(index + 1)
                    let name = String(repeating: "0", count: max(0, 2 - number.count)) + number + "-" + file.name
                    try Data([seed] + file.stream).write(to: directory.appendingPathComponent(name))
                }
                print("\(profile.name): \(generated.count) files in \(directory.path)")
            }
            // The JSON target's seeds: text that exercises every kind of value and escape.
            let json = output.appendingPathComponent("json")
            if files.fileExists(atPath: json.path) { try files.removeItem(at: json) }
            try files.createDirectory(at: json, withIntermediateDirectories: true)
            for (index, text) in jsonSeeds.enumerated() {
                try Data(text.utf8).write(to: json.appendingPathComponent("0\(index + 1)-seed.json"))
            }
            print("json: \(jsonSeeds.count) files in \(json.path)")
            // The WebSocket frame reader's seeds: each kind of frame, both roles' masking.
            let webSocket = output.appendingPathComponent("websocket")
            if files.fileExists(atPath: webSocket.path) { try files.removeItem(at: webSocket) }
            try files.createDirectory(at: webSocket, withIntermediateDirectories: true)
            let webSocketSeeds = WebSocketFuzzing.seeds()
            for (index, seed) in webSocketSeeds.enumerated() {
                let number = String(index + 1)
                let name = String(repeating: "0", count: max(0, 2 - number.count)) + number + "-" + seed.name
                try Data(seed.bytes).write(to: webSocket.appendingPathComponent(name))
            }
            print("websocket: \(webSocketSeeds.count) files in \(webSocket.path)")
        } catch {
            FileHandle.standardError.write(Data("fuzz-corpus: \(error)\n".utf8))
            exit(1)
        }
    }
}
