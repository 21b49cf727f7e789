import Foundation
import Testing

/// The folders of the `Tether` module are layers: code in one may use the types of the
/// layers below it and of its own, never those of a layer above. The Architecture article
/// draws them; this test keeps the drawing true.
@Suite("Layering of the Tether module")
struct LayeringTests {
    /// Bottom first. Every folder of Sources/Tether must be listed.
    static let layers = [
        "Core",  // frames, requests, errors, JSON, subscriptions
        "Framing",  // codecs, profiles, layouts, checksums, compression: pure values
        "Platform",  // POSIX calls, threads, addresses, readiness selectors
        "EventLoop",  // the loops, their timers and clocks, the executors
        "Transport",  // byte transports and the seam that makes them: TCP and its address race, TLS layer, in-memory network
        "Unix",  // Unix domain sockets: a connector and a listener over a socket file
        "WebSocket",  // RFC 6455: the frame reader and writer, the handshakes, the layer over TCP
        "Channel",  // the framed channel both sides use
        "Mailboxes",  // where session pushes wait: the store protocol and its callers
        "Sessions",  // the session wire and the client's session state
        "Client",  // Connection
        "Server",  // Server, Peer, the mailbox hub
    ]

    static let sources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/Tether")

    @Test("every folder is a known layer, and none uses a type of a layer above it")
    func noUpwardReferences() throws {
        let files = try Self.swiftFiles()
        let folders = Set(files.map(\.folder))
        #expect(folders.subtracting(Self.layers).isEmpty, "folders missing from the layer list: \(folders.subtracting(Self.layers).sorted())")
        // Which layer declares each top-level type.
        var declaredIn: [String: Int] = [:]
        for file in files {
            guard let rank = Self.layers.firstIndex(of: file.folder) else { continue }
            for name in Self.topLevelDeclarations(in: file.text) {
                declaredIn[name] = min(declaredIn[name] ?? rank, rank)
            }
        }
        var violations: [String] = []
        for file in files {
            guard let rank = Self.layers.firstIndex(of: file.folder) else { continue }
            for (number, line) in Self.codeLines(of: file.text) {
                for word in Self.identifiers(in: line) {
                    guard let owner = declaredIn[word], owner > rank else { continue }
                    violations.append("\(file.folder)/\(file.name):\(number) uses \(word) of \(Self.layers[owner])")
                }
            }
        }
        #expect(violations.isEmpty, "upward references:\n\(violations.joined(separator: "\n"))")
    }

    /// What each module of `Sources` may import besides the system's modules: the
    /// dependencies `Package.swift` gives it, and nothing more. The library modules build
    /// on `Tether` and never on each other; only the command-line tool puts them together,
    /// and nothing ships code that imports `TetherTesting`.
    static let moduleImports: [String: Set<String>] = [
        "Tether": ["CTetherShims", "CZlib"],
        "TetherTLS": ["Tether", "COpenSSL"],
        "TetherSQLite": ["Tether", "CSQLite"],
        "TetherPostgres": ["Tether", "CPostgres"],
        "TetherRedis": ["Tether"],
        "TetherHTTP": ["Tether"],
        "TetherUDP": ["Tether"],
        "TetherTesting": ["Tether"],
        "tether": ["Tether", "TetherTLS", "TetherSQLite", "TetherHTTP", "TetherPostgres", "TetherRedis", "TetherUDP"],
    ]

    /// Modules of the platform every module may import.
    static let systemModules: Set<String> = ["Glibc", "Musl", "Darwin", "Dispatch", "Foundation", "FoundationNetworking", "Synchronization", "Network"]

    static let allSources = sources.deletingLastPathComponent()

    /// Every Swift file of every Swift module of `Sources`, by module.
    static func moduleFiles() throws -> [(module: String, name: String, text: String)] {
        let manager = FileManager.default
        var files: [(module: String, name: String, text: String)] = []
        for module in try manager.contentsOfDirectory(atPath: allSources.path).sorted() {
            let directory = allSources.appendingPathComponent(module)
            guard let enumerator = manager.enumerator(at: directory, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in enumerator where url.pathExtension == "swift" {
                files.append((module, String(url.path.dropFirst(allSources.path.count + 1)), try String(contentsOf: url, encoding: .utf8)))
            }
        }
        return files
    }

    @Test("every module imports only what Package.swift gives it: the libraries build on Tether alone, only the tool combines them, and nothing in Sources imports TetherTesting but itself")
    func moduleImportsFollowThePackage() throws {
        let files = try Self.moduleFiles()
        #expect(Set(files.map(\.module)) == Set(Self.moduleImports.keys), "modules with Swift code: \(Set(files.map(\.module)).sorted())")
        var violations: [String] = []
        for file in files {
            let allowed = (Self.moduleImports[file.module] ?? []).union(Self.systemModules)
            for (number, line) in Self.codeLines(of: file.text) {
                let words = line.split(separator: " ").map(String.init)
                guard let position = words.firstIndex(of: "import"), position + 1 < words.count else { continue }
                // Only modifiers and attributes may come before `import`.
                guard words[..<position].allSatisfy({ $0.hasPrefix("@") || ["public", "package", "internal", "private", "fileprivate"].contains($0) }) else { continue }
                let module = words[position + 1].split(separator: ".").first.map(String.init) ?? ""
                if !allowed.contains(module) { violations.append("\(file.name):\(number) imports \(module)") }
                if words.contains("@testable") { violations.append("\(file.name):\(number) is a @testable import") }
            }
        }
        #expect(violations.isEmpty, "imports beyond the package's dependencies:\n\(violations.joined(separator: "\n"))")
    }

    @Test("every file descriptor is owned: no module closes a raw descriptor outside Platform/ and the Socket value; the rest hold a Socket or a Descriptor")
    func descriptorsAreOwned() throws {
        let allowed: Set<String> = ["Tether/Platform", "Tether/Transport/Socket.swift"]
        var violations: [String] = []
        for file in try Self.moduleFiles() where !allowed.contains(where: { file.name.hasPrefix($0) }) {
            // The C library's `close(2)` is in reach only of a file that imports it.
            let importsLibC = ["import Glibc", "import Darwin", "import Musl"].contains { file.text.contains($0) }
            for (number, line) in Self.codeLines(of: file.text) {
                let calls = ["closeDescriptor(", "Glibc.close(", "Darwin.close(", "Musl.close("]
                // A call of `close` with one unlabeled argument, not a method or a case.
                var bare = false
                if importsLibC, let range = line.range(of: "close(") {
                    let before = line[..<range.lowerBound].last
                    let argument = line[range.upperBound...].prefix { $0 != ")" }
                    bare = !(before?.isLetter ?? false) && before != "." && before != "_" && !argument.isEmpty
                        && !argument.contains(":") && !line.contains("case close(") && !line.contains("func close(") && !line.contains("await close(")
                }
                if bare || calls.contains(where: { line.contains($0) }) {
                    violations.append("\(file.name):\(number): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(violations.isEmpty, "raw descriptors closed outside Platform/ and Socket:\n\(violations.joined(separator: "\n"))")
    }

    @Test("the in-memory network and the manual clock are test seams: no module but Tether, which declares them, and TetherTesting names them")
    func testSeamsStayInTesting() throws {
        let seams: Set<String> = ["MemoryNetwork", "MemoryLink", "InMemoryTransport", "ManualClock"]
        var violations: [String] = []
        for file in try Self.moduleFiles() where file.module != "Tether" && file.module != "TetherTesting" {
            for (number, line) in Self.codeLines(of: file.text) {
                for word in Self.identifiers(in: line) where seams.contains(word) {
                    violations.append("\(file.name):\(number) uses \(word)")
                }
            }
        }
        #expect(violations.isEmpty, "test seams used outside the testing module:\n\(violations.joined(separator: "\n"))")
    }

    struct SourceFile {
        var folder: String
        var name: String
        var text: String
    }

    static func swiftFiles() throws -> [SourceFile] {
        let manager = FileManager.default
        let enumerator = try #require(manager.enumerator(at: sources, includingPropertiesForKeys: nil))
        var files: [SourceFile] = []
        for case let url as URL in enumerator where url.pathExtension == "swift" {
            let relative = url.path.dropFirst(sources.path.count + 1)
            let parts = relative.split(separator: "/")
            guard parts.count >= 2 else {
                Issue.record("\(relative) is not in a layer folder")
                continue
            }
            files.append(SourceFile(folder: String(parts[0]), name: parts.dropFirst().joined(separator: "/"), text: try String(contentsOf: url, encoding: .utf8)))
        }
        return files
    }

    /// Names of types, protocols and type aliases declared at the top level of a file.
    static func topLevelDeclarations(in text: String) -> [String] {
        let kinds: Set<Substring> = ["class", "struct", "enum", "protocol", "actor", "typealias"]
        let modifiers: Set<Substring> = ["public", "package", "internal", "private", "fileprivate", "final", "indirect", "nonisolated"]
        var names: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) where !(line.first?.isWhitespace ?? true) {
            var words = line.split(whereSeparator: { $0 == " " || $0 == ":" || $0 == "<" || $0 == "{" || $0 == "=" })[...]
            while let first = words.first, first.hasPrefix("@") || modifiers.contains(first) { words = words.dropFirst() }
            guard let kind = words.first, kinds.contains(kind), words.count > 1 else { continue }
            names.append(String(words[words.startIndex + 1]))
        }
        return names
    }

    /// The lines of code, numbered from 1, with comments and the text of string literals
    /// removed; the code inside string interpolations stays.
    static func codeLines(of text: String) -> [(Int, String)] {
        enum Context {
            case code(parentheses: Int)
            case string(multiline: Bool)
        }
        // The innermost context last: code, a string in it, an interpolation in that, …
        var stack: [Context] = [.code(parentheses: 0)]
        var blockComments = 0
        var result: [(Int, String)] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let characters = Array(line)
            var code = ""
            var position = 0
            scanning: while position < characters.count {
                let character = characters[position]
                let next: Character? = position + 1 < characters.count ? characters[position + 1] : nil
                if blockComments > 0 {
                    if character == "*" && next == "/" { blockComments -= 1; position += 1 }
                    else if character == "/" && next == "*" { blockComments += 1; position += 1 }
                    position += 1
                    continue
                }
                switch stack[stack.count - 1] {
                case .code(let parentheses):
                    if character == "/" && next == "/" { break scanning }
                    if character == "/" && next == "*" {
                        blockComments += 1
                        position += 2
                        continue
                    }
                    if character == "\"" {
                        let multiline = position + 2 < characters.count && characters[position + 1] == "\"" && characters[position + 2] == "\""
                        stack.append(.string(multiline: multiline))
                        position += multiline ? 3 : 1
                        code.append(" ")
                        continue
                    }
                    if character == "(" { stack[stack.count - 1] = .code(parentheses: parentheses + 1) }
                    if character == ")" {
                        if parentheses == 0 && stack.count > 1 {
                            stack.removeLast()  // the end of an interpolation
                            position += 1
                            code.append(" ")
                            continue
                        }
                        stack[stack.count - 1] = .code(parentheses: parentheses - 1)
                    }
                    code.append(character)
                    position += 1
                case .string(let multiline):
                    if character == "\\" {
                        if next == "(" {
                            stack.append(.code(parentheses: 0))
                            code.append(" ")
                        }
                        position += 2
                        continue
                    }
                    if character == "\"" {
                        if !multiline {
                            stack.removeLast()
                        } else if position + 2 < characters.count && characters[position + 1] == "\"" && characters[position + 2] == "\"" {
                            stack.removeLast()
                            position += 2
                        }
                    }
                    position += 1
                }
            }
            // A single-line string cannot go on to the next line.
            while case .string(multiline: false) = stack[stack.count - 1] { stack.removeLast() }
            result.append((index + 1, code))
        }
        return result
    }

    static func identifiers(in line: String) -> [String] {
        line.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") })
            .filter { $0.first?.isUppercase ?? false }
            .map(String.init)
    }
}
