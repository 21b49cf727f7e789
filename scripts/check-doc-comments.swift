// Checks the doc comments of every public symbol in a set of symbol graphs, the ones the
// compiler writes with -emit-symbol-graph (scripts/docs.sh builds them).
//
//   swift scripts/check-doc-comments.swift [--root DIR] GRAPH-DIR-OR-FILE...
//
// Every `*.symbols.json` in the given directories is read: a module's own graph and the
// graphs of its extensions to other modules (`TetherTLS@Tether.symbols.json`). A symbol that
// appears in more than one graph is checked once. Paths are printed relative to --root
// (default: the current directory).
//
// What is checked, for each public or open symbol:
//
// - It has a `///` comment of its own: a doc comment written in the same file as the
//   declaration.
// - A function, method, operator, initializer or subscript documents each of its parameters
//   by its internal name (the name the body uses; its argument label is accepted too), with
//   `- Parameter name:` or as an item of a `- Parameters:` list.
// - One that throws or rethrows has a `- Throws:` section.
// - A function, method or operator whose result is not `Void` (nor `Never`) has a
//   `- Returns:` section. Initializers and subscripts need none.
//
// What is skipped:
//
// - Symbols without a source location: the compiler-synthesized ones (an `Equatable` `==`, a
//   `RawRepresentable` initializer, `hash(into:)` of a `Hashable` enum) and the members a
//   type gets from a protocol extension in another module (`Actor.assumeIsolated`). The
//   graph marks these with no location (and `::SYNTHESIZED::` in their identifier); they
//   have nothing in this repository to document.
// - Symbols whose comment the graph says was inherited from another file or module (a
//   protocol requirement's documentation, which DocC shows for the implementation). The
//   compiler attaches such comments only to synthesized members today, but if it attaches
//   one to a written declaration, DocC renders that text, so it counts as documented.
//   A written declaration with no comment at all is flagged even when it implements a
//   standard-library requirement (`description`, `init(from:)`, `hash(into:)`): DocC would
//   show an empty page for it.
//
// Each offender is printed as `file:line: symbol: what is missing`. The last line says how
// many symbols were checked. Exits 1 when any symbol falls short, 2 on a usage error.

import Foundation

struct SymbolGraph: Decodable {
    struct Module: Decodable {
        var name: String
    }

    struct Fragment: Decodable {
        var kind: String
        var spelling: String
    }

    struct Symbol: Decodable {
        struct Kind: Decodable {
            var identifier: String
        }

        struct Identifier: Decodable {
            var precise: String
        }

        struct Location: Decodable {
            struct Position: Decodable {
                var line: Int
            }

            var uri: String
            var position: Position
        }

        struct DocComment: Decodable {
            struct Line: Decodable {
                var text: String
            }

            var uri: String?
            var module: String?
            var lines: [Line]
        }

        struct FunctionSignature: Decodable {
            struct Parameter: Decodable {
                var name: String
                var internalName: String?
            }

            var parameters: [Parameter]?
            var returns: [Fragment]?
        }

        var kind: Kind
        var identifier: Identifier
        var pathComponents: [String]
        var accessLevel: String
        var location: Location?
        var docComment: DocComment?
        var functionSignature: FunctionSignature?
        var declarationFragments: [Fragment]?
    }

    var module: Module
    var symbols: [Symbol]
}

struct Offender {
    var file: String
    var line: Int
    var symbol: String
    var missing: [String]
}

/// Symbol kinds whose parameters must be documented.
let kindsWithParameters: Set<String> = [
    "swift.func", "swift.func.op", "swift.method", "swift.type.method", "swift.init",
    "swift.subscript", "swift.type.subscript",
]

/// Symbol kinds whose non-Void result must be documented.
let kindsWithResults: Set<String> = [
    "swift.func", "swift.func.op", "swift.method", "swift.type.method",
]

/// What a doc comment documents: the parameter names it lists and whether it has a
/// `- Throws:` and a `- Returns:` section. Lines inside code fences are ignored.
struct Sections {
    var parameters: Set<String> = []
    var throwsSection = false
    var returnsSection = false

    init(_ lines: [String]) {
        var inFence = false
        var parametersIndent: Int?
        for line in lines {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
                inFence.toggle()
                continue
            }
            if inFence { continue }
            let indent = line.prefix { $0 == " " || $0 == "\t" }.count
            guard let item = Sections.bulletItem(trimmed) else {
                continue
            }
            if let outer = parametersIndent {
                if indent > outer {
                    if let name = Sections.label(of: item) { parameters.insert(name) }
                    continue
                }
                parametersIndent = nil
            }
            let lowered = item.lowercased()
            if lowered.hasPrefix("parameters:") {
                parametersIndent = indent
            } else if lowered.hasPrefix("parameter ") {
                if let name = Sections.label(of: String(item.dropFirst("parameter ".count))) {
                    parameters.insert(name)
                }
            } else if Sections.label(of: item)?.lowercased() == "throws" {
                throwsSection = true
            } else if Sections.label(of: item)?.lowercased() == "returns" {
                returnsSection = true
            }
        }
    }

    /// The text of a Markdown bullet item (`- x`, `* x`, `+ x`), or nil.
    static func bulletItem(_ trimmed: String) -> String? {
        guard let first = trimmed.first, "-*+".contains(first) else { return nil }
        let rest = trimmed.dropFirst()
        guard rest.first == " " else { return nil }
        return rest.trimmingCharacters(in: .whitespaces)
    }

    /// `name` in `name: text`, or nil when the item does not start with a word and a colon.
    static func label(of item: String) -> String? {
        guard let colon = item.firstIndex(of: ":") else { return nil }
        let name = item[..<colon].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty, !name.contains(" ") else { return nil }
        return name
    }
}

/// Whether a declaration throws or rethrows itself, as opposed to taking or returning a
/// closure that throws: looks for the keyword after the parameter clause and before `->`.
func declarationThrows(_ fragments: [SymbolGraph.Fragment]) -> Bool {
    var depth = 0
    var parameterClauseClosed = false
    for fragment in fragments {
        if fragment.kind == "keyword", depth == 0, parameterClauseClosed,
           fragment.spelling == "throws" || fragment.spelling == "rethrows" {
            return true
        }
        guard fragment.kind == "text" else { continue }
        for character in fragment.spelling {
            switch character {
            case "(":
                depth += 1
            case ")":
                depth -= 1
                if depth == 0 { parameterClauseClosed = true }
            default:
                break
            }
        }
        if depth == 0, parameterClauseClosed, fragment.spelling.contains("->") {
            return false
        }
    }
    return false
}

func isVoid(_ returns: [SymbolGraph.Fragment]?) -> Bool {
    let spelled = (returns ?? []).map(\.spelling).joined()
        .trimmingCharacters(in: .whitespaces)
    return ["", "()", "Void", "Never"].contains(spelled)
}

func relativePath(_ uri: String, root: String) -> String {
    var path = uri
    if path.hasPrefix("file://") { path = String(path.dropFirst("file://".count)) }
    path = path.removingPercentEncoding ?? path
    let prefix = root.hasSuffix("/") ? root : root + "/"
    return path.hasPrefix(prefix) ? String(path.dropFirst(prefix.count)) : path
}

// MARK: - Main

var arguments = Array(CommandLine.arguments.dropFirst())
var root = FileManager.default.currentDirectoryPath
if let index = arguments.firstIndex(of: "--root") {
    guard index + 1 < arguments.count else {
        FileHandle.standardError.write(Data("usage: check-doc-comments.swift [--root DIR] GRAPH-DIR-OR-FILE...\n".utf8))
        exit(2)
    }
    root = URL(fileURLWithPath: arguments[index + 1]).standardizedFileURL.path
    arguments.removeSubrange(index...index + 1)
}
guard !arguments.isEmpty else {
    FileHandle.standardError.write(Data("usage: check-doc-comments.swift [--root DIR] GRAPH-DIR-OR-FILE...\n".utf8))
    exit(2)
}

var graphFiles: [String] = []
for argument in arguments {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory) else {
        FileHandle.standardError.write(Data("check-doc-comments: no such file or directory: \(argument)\n".utf8))
        exit(2)
    }
    if isDirectory.boolValue {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: argument)) ?? []
        graphFiles += names.filter { $0.hasSuffix(".symbols.json") }.sorted()
            .map { (argument as NSString).appendingPathComponent($0) }
    } else {
        graphFiles.append(argument)
    }
}
guard !graphFiles.isEmpty else {
    FileHandle.standardError.write(Data("check-doc-comments: no *.symbols.json in \(arguments.joined(separator: " "))\n".utf8))
    exit(2)
}

var seen: Set<String> = []
var modules: Set<String> = []
var checked = 0
var offenders: [Offender] = []

for file in graphFiles {
    let graph: SymbolGraph
    do {
        graph = try JSONDecoder().decode(SymbolGraph.self, from: Data(contentsOf: URL(fileURLWithPath: file)))
    } catch {
        FileHandle.standardError.write(Data("check-doc-comments: cannot read \(file): \(error)\n".utf8))
        exit(2)
    }
    modules.insert(graph.module.name)
    for symbol in graph.symbols {
        guard symbol.accessLevel == "public" || symbol.accessLevel == "open" else { continue }
        guard let location = symbol.location,
              !symbol.identifier.precise.contains("::SYNTHESIZED::") else { continue }
        guard seen.insert(symbol.identifier.precise).inserted else { continue }
        checked += 1

        let name = symbol.pathComponents.joined(separator: ".")
        let path = relativePath(location.uri, root: root)
        let line = location.position.line + 1
        let lines = symbol.docComment?.lines.map(\.text) ?? []

        guard lines.contains(where: { !$0.trimmingCharacters(in: .whitespaces).isEmpty }) else {
            offenders.append(Offender(file: path, line: line, symbol: name, missing: ["no doc comment"]))
            continue
        }
        if let commentURI = symbol.docComment?.uri, commentURI != location.uri {
            continue  // inherited from a requirement elsewhere: DocC shows that text
        }

        let kind = symbol.kind.identifier
        let sections = Sections(lines)
        var missing: [String] = []
        if kindsWithParameters.contains(kind) {
            for parameter in symbol.functionSignature?.parameters ?? [] {
                let internalName = parameter.internalName ?? parameter.name
                if internalName == "_" { continue }
                if !sections.parameters.contains(internalName) && !sections.parameters.contains(parameter.name) {
                    missing.append("- Parameter \(internalName):")
                }
            }
            if declarationThrows(symbol.declarationFragments ?? []) && !sections.throwsSection {
                missing.append("- Throws:")
            }
        }
        if kindsWithResults.contains(kind), !isVoid(symbol.functionSignature?.returns),
           !sections.returnsSection {
            missing.append("- Returns:")
        }
        if !missing.isEmpty {
            offenders.append(Offender(file: path, line: line, symbol: name,
                                      missing: ["missing " + missing.joined(separator: ", ")]))
        }
    }
}

offenders.sort { ($0.file, $0.line, $0.symbol) < ($1.file, $1.line, $1.symbol) }
for offender in offenders {
    print("\(offender.file):\(offender.line): \(offender.symbol): \(offender.missing.joined(separator: "; "))")
}
let moduleList = modules.sorted().joined(separator: ", ")
print("doc comments: \(checked) public symbols checked in \(moduleList); \(offenders.count) incomplete")
exit(offenders.isEmpty ? 0 : 1)
