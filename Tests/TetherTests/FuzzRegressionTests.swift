import Foundation
import Testing
@_spi(Fuzzing) @testable import Tether

/// One committed fuzz input: a crash reproducer from Fuzz/Regressions/<profile>/ or a seed
/// from Fuzz/Corpus/<profile>/.
struct FuzzInputFile: Sendable, CustomTestStringConvertible {
    var profile: String
    /// Relative to the repository root, for messages.
    var path: String
    var url: URL

    var testDescription: String { path }

    /// The repository root, found from this file's path.
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The profile folders under `Fuzz/<folder>/` and their input files, skipping dot files
    /// and READMEs. A folder no built-in profile is named after is returned too, so the test
    /// can fail on it rather than skip its inputs; `json` holds the JSON target's inputs,
    /// `websocket` the WebSocket frame reader's.
    static func inputs(in folder: String) -> [FuzzInputFile] {
        let base = root.appendingPathComponent("Fuzz").appendingPathComponent(folder)
        let files = FileManager.default
        let profiles = ((try? files.contentsOfDirectory(atPath: base.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        return profiles.flatMap { profile -> [FuzzInputFile] in
            let directory = base.appendingPathComponent(profile)
            var isDirectory: ObjCBool = false
            guard files.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else { return [] }
            let names = ((try? files.contentsOfDirectory(atPath: directory.path)) ?? [])
                .filter { !$0.hasPrefix(".") && !$0.uppercased().hasPrefix("README") }
                .sorted()
            return names.map { name in
                FuzzInputFile(
                    profile: profile,
                    path: "Fuzz/\(folder)/\(profile)/\(name)",
                    url: directory.appendingPathComponent(name)
                )
            }
        }
    }

    static var regressions: [FuzzInputFile] { inputs(in: "Regressions") }
    static var corpus: [FuzzInputFile] { inputs(in: "Corpus") }

    /// Runs the file through the fuzz harness, recording a broken invariant as a test failure.
    func run(sourceLocation: SourceLocation = #_sourceLocation) throws -> FuzzOutcome? {
        if self.profile == "json" {
            // The JSON parser's and writer's inputs: text, not frames.
            do {
                try FuzzHarness.runJSON(Array(try Data(contentsOf: url)))
            } catch {
                Issue.record("\(path): \(error)", sourceLocation: sourceLocation)
            }
            return nil
        }
        if self.profile == "websocket" {
            // The WebSocket frame reader's inputs, as the fuzz target runs them.
            if let violation = WebSocketFuzzing.check(Array(try Data(contentsOf: url))) {
                Issue.record("\(path): \(violation)", sourceLocation: sourceLocation)
            }
            return nil
        }
        let profile = try #require(Profile.named(self.profile), "no built-in profile is named \(self.profile) (\(path))")
        let input = Array(try Data(contentsOf: url))
        do {
            return try FuzzHarness.run(input, profile: profile)
        } catch {
            Issue.record("\(path): \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }
}

/// Every committed fuzz input, run through the same harness as the libFuzzer target
/// (Fuzz/Sources/FuzzHarness/Harness.swift, compiled here through a symlink): decoded in
/// chunks and all at once, with every invariant checked.
@Suite("Fuzz regressions")
struct FuzzRegressionTests {
    @Test("crash reproducers keep every codec invariant", arguments: FuzzInputFile.regressions)
    func regression(_ file: FuzzInputFile) throws {
        _ = try file.run()
    }

    @Test("seed corpus inputs keep every codec invariant", arguments: FuzzInputFile.corpus)
    func corpusInput(_ file: FuzzInputFile) throws {
        _ = try file.run()
    }

    @Test("the seed profile's corpus decodes to frames, and declares an oversize length")
    func seedCorpus() throws {
        let files = FuzzInputFile.corpus.filter { $0.profile == "seed" }
        #expect(files.count >= 6)
        var frames = 0
        var tooLarge = 0
        var truncated = 0
        for file in files {
            guard let outcome = try file.run() else { continue }
            frames += outcome.frames.count
            if outcome.error?.code == .frameTooLarge { tooLarge += 1 }
            if outcome.error?.code == .truncatedFrame { truncated += 1 }
        }
        #expect(frames >= files.count)
        #expect(tooLarge >= 1)
        #expect(truncated >= 1)
    }

    // MARK: The harness itself

    /// A seed codec with one deliberate flaw, for checking that the harness reports it.
    struct FlawedCodec: FrameCodec {
        enum Flaw: Sendable { case consumesOnNil, dependsOnChunking, encodesWrongSerial }
        var flaw: Flaw
        var inner = SeedCodec(maximumPayloadLength: FuzzHarness.maximumPayloadLength)

        mutating func decode(_ buffer: inout FrameBuffer) throws(TetherError) -> Frame? {
            switch flaw {
            case .consumesOnNil:
                if buffer.readableBytes < SeedCodec.headerLength, buffer.readableBytes > 1 {
                    buffer.moveReaderIndex(forwardBy: 1)
                    return nil
                }
            case .dependsOnChunking:
                // Refuses a frame it sees whole in one buffer with bytes to spare.
                if buffer.readableBytes > 40 {
                    throw TetherError(code: .protocolError, message: "too many bytes at once")
                }
            case .encodesWrongSerial:
                break
            }
            return try inner.decode(&buffer)
        }

        func encode(_ frame: Frame, into buffer: inout FrameBuffer) throws(TetherError) {
            var frame = frame
            if flaw == .encodesWrongSerial { frame.serial &+= 1 }
            try inner.encode(frame, into: &buffer)
        }
    }

    static func flawed(_ flaw: FlawedCodec.Flaw) -> Profile {
        Profile(
            name: "flawed",
            heartbeatType: 0x1,
            makeCodec: { _ in FlawedCodec(flaw: flaw) },
            classify: Profile.seed.classify
        )
    }

    /// A seed stream of three frames, after a seed byte that feeds it one byte at a time.
    static let threeFrames: [UInt8] = {
        var buffer = FrameBuffer()
        let codec = SeedCodec()
        for serial: UInt32 in 1...3 {
            try! codec.encode(Frame(type: 0x402, serial: serial, payload: Array("payload".utf8)), into: &buffer)
        }
        return [0] + Array(buffer.readableBytesView)
    }()

    @Test("the harness passes the seed codec and returns what it decoded")
    func passesSeed() throws {
        let outcome = try FuzzHarness.run(Self.threeFrames, profile: .seed)
        #expect(outcome.frames.map(\.serial) == [1, 2, 3])
        #expect(outcome.error == nil)
        let cut = try FuzzHarness.run(Array(Self.threeFrames.dropLast()), profile: .seed)
        #expect(cut.frames.count == 2)
        #expect(cut.error?.code == .truncatedFrame)
        #expect(try FuzzHarness.run([], profile: .seed) == FuzzOutcome(frames: [], error: nil))
    }

    @Test("the harness reports a decode that returns nil after consuming bytes")
    func reportsConsumingNil() {
        let violation = #expect(throws: FuzzViolation.self) {
            try FuzzHarness.run(Self.threeFrames, profile: Self.flawed(.consumesOnNil))
        }
        #expect(violation?.message.contains("decode returned nil but consumed 1 of 2 bytes") == true, "\(violation.map(String.init(describing:)) ?? "no violation")")
    }

    @Test("the harness reports a stream that decodes differently in chunks")
    func reportsChunkDependence() {
        let violation = #expect(throws: FuzzViolation.self) {
            try FuzzHarness.run(Self.threeFrames, profile: Self.flawed(.dependsOnChunking))
        }
        #expect(violation?.message.contains("fed at once to 0") == true, "\(violation.map(String.init(describing:)) ?? "no violation")")
    }

    @Test("the harness reports a frame that does not survive re-encoding")
    func reportsRoundTrip() {
        let violation = #expect(throws: FuzzViolation.self) {
            try FuzzHarness.run(Self.threeFrames, profile: Self.flawed(.encodesWrongSerial))
        }
        #expect(violation?.message.contains("encodes to 19 bytes") == true, "\(violation.map(String.init(describing:)) ?? "no violation")")
    }
}
