// Checks that the documentation's Swift code is code that compiles: every fenced ```swift
// block of the given Markdown files must appear in one of the Swift files under the given
// directories, which the build compiles (Tests/DocumentationTests, Examples/).
//
//   swift scripts/check-doc-code.swift [--root DIR] --markdown FILE... --swift DIR...
//
// Matching: each line is trimmed of leading and trailing whitespace and blank lines are
// dropped, in the block and in every Swift file; the block's lines must then occur as a
// contiguous run of some file's lines. So a block may sit indented inside a function, and
// blank lines may differ, but nothing may come between two of its lines.
//
// A block whose first line is exactly `// Package.swift` is a manifest fragment and is
// exempt. Directories whose names start with `.` (a package's .build, .swiftpm) are not
// searched.
//
// Prints `file:line: …` (the line of the opening fence) for each block not found, then a
// summary line. Exits 1 when a block was not found, 2 on a usage error.

import Foundation

struct Block {
    var file: String
    var line: Int
    var lines: [String]
}

func normalized(_ text: String) -> [String] {
    text.split(separator: "\n", omittingEmptySubsequences: false)
        .map { $0.trimmingCharacters(in: .whitespaces) }
        .filter { !$0.isEmpty }
}

/// The fenced blocks of a Markdown file whose info string names Swift.
func swiftBlocks(in file: String, displayName: String) throws -> [Block] {
    let text = try String(contentsOfFile: file, encoding: .utf8)
    var blocks: [Block] = []
    var open: (fence: String, isSwift: Bool, line: Int, lines: [String])?
    for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        let line = rawLine.trimmingCharacters(in: .whitespaces)
        if var current = open {
            if line.hasPrefix(current.fence), line.allSatisfy({ $0 == current.fence.first }) {
                if current.isSwift {
                    blocks.append(Block(file: displayName, line: current.line,
                                        lines: normalized(current.lines.joined(separator: "\n"))))
                }
                open = nil
            } else {
                current.lines.append(String(rawLine))
                open = current
            }
            continue
        }
        for marker in ["`", "~"] {
            let fence = String(line.prefix { String($0) == marker })
            guard fence.count >= 3 else { continue }
            let info = line.dropFirst(fence.count).trimmingCharacters(in: .whitespaces)
            let language = info.split(separator: " ").first.map(String.init) ?? ""
            open = (fence, language.lowercased() == "swift", index + 1, [])
        }
    }
    return blocks
}

/// Every `.swift` file under `directory`, skipping hidden directories.
func swiftFiles(under directory: String) -> [String] {
    guard let enumerator = FileManager.default.enumerator(
        at: URL(fileURLWithPath: directory),
        includingPropertiesForKeys: [.isDirectoryKey],
        options: [.skipsHiddenFiles]
    ) else { return [] }
    var files: [String] = []
    for case let url as URL in enumerator where url.pathExtension == "swift" {
        files.append(url.path)
    }
    return files.sorted()
}

/// Whether `needle` occurs as a contiguous run in `haystack`.
func contains(_ haystack: [String], run needle: [String]) -> Bool {
    guard !needle.isEmpty else { return true }
    guard needle.count <= haystack.count else { return false }
    for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
        if Array(haystack[start..<start + needle.count]) == needle { return true }
    }
    return false
}

func usage() -> Never {
    FileHandle.standardError.write(Data(
        "usage: check-doc-code.swift [--root DIR] --markdown FILE... --swift DIR...\n".utf8))
    exit(2)
}

// MARK: - Main

var root = FileManager.default.currentDirectoryPath
var markdownFiles: [String] = []
var swiftDirectories: [String] = []
var list: String?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--root":
        guard let value = arguments.popFirst() else { usage() }
        root = value
    case "--markdown", "--swift":
        list = argument
    default:
        if list == "--markdown" {
            markdownFiles.append(argument)
        } else if list == "--swift" {
            swiftDirectories.append(argument)
        } else {
            usage()
        }
    }
}
guard !markdownFiles.isEmpty else { usage() }

func display(_ path: String) -> String {
    let prefix = root.hasSuffix("/") ? root : root + "/"
    return path.hasPrefix(prefix) ? String(path.dropFirst(prefix.count)) : path
}

var sources: [[String]] = []
for directory in swiftDirectories {
    for file in swiftFiles(under: directory) {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
        sources.append(normalized(text))
    }
}

var checked = 0
var exempt = 0
var missing: [Block] = []
for file in markdownFiles {
    let blocks: [Block]
    do {
        blocks = try swiftBlocks(in: file, displayName: display(file))
    } catch {
        FileHandle.standardError.write(Data("check-doc-code: cannot read \(file): \(error)\n".utf8))
        exit(2)
    }
    for block in blocks {
        if block.lines.first == "// Package.swift" {
            exempt += 1
            continue
        }
        checked += 1
        if !sources.contains(where: { contains($0, run: block.lines) }) {
            missing.append(block)
        }
    }
}

let searched = swiftDirectories.map(display).joined(separator: ", ")
for block in missing {
    print("\(block.file):\(block.line): swift block (\(block.lines.count) lines, from `\(block.lines.first ?? "")`) is in no Swift file under \(searched)")
}
print("code blocks: \(checked) swift blocks checked in \(markdownFiles.count) files, \(exempt) manifest fragments exempt; \(missing.count) not found in compiled code")
exit(missing.isEmpty ? 0 : 1)
