#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

/// The subcommands, in the order the help lists them.
let commands: [any Command.Type] = [
    DemoCommand.self,
    ServeCommand.self,
    RequestCommand.self,
    ListenCommand.self,
    PushCommand.self,
    SubscribeCommand.self,
    PublishCommand.self,
    PresenceCommand.self,
    PingCommand.self,
    BenchCommand.self,
    PinCommand.self,
    ProfilesCommand.self,
    PathCommand.self,
    UDPCommand.self,
]

func topLevelHelp() -> String {
    let width = commands.map { $0.name.count }.max() ?? 0
    let lines = commands.map { command in
        "  " + command.name + String(repeating: " ", count: width - command.name.count + 2) + command.summary
    }
    return """
        usage: tether <command> [options]

        Try a Tether server by hand, or watch the SDK work end to end with `tether demo`.

        commands:
        \(lines.joined(separator: "\n"))

        Run `tether <command> --help` for the common options of one command, and
        `tether <command> --help-all` for all of them.
        Frame types are decimal (1026) or hex (0x402); durations are seconds (0.5).

        Wire formats: serve, request, listen, ping and bench speak the seed profile unless
        given --profile NAME, one of \(ProfileOption.names);
        `tether profiles` describes them.

        TLS: `serve --tls-cert FILE --tls-key FILE` serves TLS only (add --tls-client-ca
        FILE to require client certificates); request, listen, ping and bench connect with
        TLS given --tls, or any of --ca FILE, --server-name NAME, --cert FILE --key FILE
        and --pin PIN (see `tether pin`).

        Clusters: every `serve --postgres URL` on one PostgreSQL database is a node of one
        service; `push --postgres URL --client-id ID` pushes to a client on any node, or
        keeps the push for it while it is offline.
        """
}

func usageFailure(_ message: String, command: (any Command.Type)?) -> ExitStatus {
    Console.fail(message)
    if let command {
        Console.err(HelpText.usage(of: command))
        Console.err("Run `tether \(command.name) --help` for more.")
    } else {
        Console.err("usage: tether <command> [options]")
        Console.err("Run `tether --help` for the list of commands.")
    }
    return .usage
}

func runTether(_ argv: [String]) async -> ExitStatus {
    guard let word = argv.first else {
        return usageFailure("missing command", command: nil)
    }
    if word == "-h" || word == "--help" || word == "help" {
        if word == "help", let name = argv.dropFirst().first {
            guard let command = commands.first(where: { $0.name == name }) else {
                return usageFailure("unknown command '\(name)'", command: nil)
            }
            let rest = argv.dropFirst(2)
            guard rest.allSatisfy({ $0 == "--all" }) else {
                return usageFailure("`tether help \(name)` takes --all and nothing else", command: nil)
            }
            Console.out(HelpText.text(of: command, all: !rest.isEmpty))
        } else {
            Console.out(topLevelHelp())
        }
        return .success
    }
    guard let command = commands.first(where: { $0.name == word }) else {
        return usageFailure("unknown command '\(word)'", command: nil)
    }
    var arguments = Arguments(argv.dropFirst())
    if arguments.wantsAllHelp {
        Console.out(HelpText.text(of: command, all: true))
        return .success
    }
    if arguments.wantsHelp {
        Console.out(HelpText.text(of: command, all: false))
        return .success
    }
    let parsed: any Command
    do {
        parsed = try command.init(parsing: &arguments)
        try arguments.finish()
    } catch {
        return usageFailure(error.message, command: command)
    }
    do {
        return try await parsed.run()
    } catch let error as TetherError {
        Console.fail(error.message)
        return .failure
    } catch {
        Console.fail(String(describing: error))
        return .failure
    }
}

let status = await runTether(Array(CommandLine.arguments.dropFirst()))
exit(status.code)
