/// What `--help`, `--help-all` and a usage error print for a command.
enum HelpText {
    /// The widest line of a usage synopsis.
    static let usageWidth = 100

    /// `usage: tether …`: each form of the command's synopsis (one a line in
    /// ``Command/synopsis``) wrapped at ``usageWidth``, between groups in brackets or
    /// parentheses where it can; the lines that continue a form are indented past
    /// `tether NAME`.
    static func usage(of command: any Command.Type) -> String {
        var lines: [String] = []
        for (index, form) in command.synopsis.split(separator: "\n").enumerated() {
            let lead = index == 0 ? "usage: " : String(repeating: " ", count: "usage: ".count)
            let indent = lead.count + "tether \(command.name) ".count
            lines += wrapSynopsis(String(form), lead: lead, indent: indent)
        }
        return lines.joined(separator: "\n")
    }

    /// The text of `tether NAME --help` (`all: false`) or `tether NAME --help-all` (`all: true`).
    static func text(of command: any Command.Type, all: Bool) -> String {
        guard !all, let brief = command.briefHelp else {
            return "\(usage(of: command))\n\n\(command.help)"
        }
        return "\(usage(of: command))\n\n\(brief)\n\nRun `tether \(command.name) --help-all` for every option, with the details."
    }

    /// `form` in lines of at most ``usageWidth`` characters: the first starts with `lead`,
    /// the others with `indent` spaces.
    static func wrapSynopsis(_ form: String, lead: String, indent: Int) -> [String] {
        let margin = String(repeating: " ", count: indent)
        var lines: [String] = []
        var line = lead
        var lineHasWord = false
        func place(_ word: String) {
            if lineHasWord, line.count + 1 + word.count > usageWidth {
                lines.append(line)
                line = margin
                lineHasWord = false
            }
            line += (lineHasWord ? " " : "") + word
            lineHasWord = true
        }
        for group in groups(of: form) {
            // A group too long for any line is broken between its own words.
            if margin.count + group.count > usageWidth {
                for word in group.split(separator: " ") { place(String(word)) }
            } else {
                place(group)
            }
        }
        if lineHasWord { lines.append(line) }
        return lines
    }

    /// The words of `form`, a bracketed or parenthesized group kept as one.
    private static func groups(of form: String) -> [String] {
        var groups: [String] = []
        var current = ""
        var depth = 0
        for character in form {
            switch character {
            case "[", "(": depth += 1
            case "]", ")": depth = max(0, depth - 1)
            default: break
            }
            if character == " ", depth == 0 {
                if !current.isEmpty { groups.append(current) }
                current = ""
            } else {
                current.append(character)
            }
        }
        if !current.isEmpty { groups.append(current) }
        return groups
    }
}
