import Tether

/// `tether listen`: print pushes as JSON lines.
struct ListenCommand: Command {
    static let name = "listen"
    static let summary = "print the server's pushes as JSON lines"
    static let synopsis = "tether listen HOST:PORT [--type TYPE] [--count N]"
    static let help = """
        Connects and prints each notification (push) as one JSON line:

          {"type":2,"serial":7,"content":{"seq":7,"time":"…"}}

        The content is embedded as JSON when it parses, as a string otherwise, and is null
        when empty. Runs until N pushes arrived, or until the connection closes (exit 1).

        arguments:
          HOST:PORT      the server: 127.0.0.1:9000, [::1]:9000
          --type TYPE    only pushes of this type (0x2…0x400)
          --count N      stop after N pushes
          -h, --help     show this help
        """

    var endpoint: Endpoint
    var type: UInt32?
    var count: Int?

    init(parsing arguments: inout Arguments) throws(ArgumentError) {
        if let type = try arguments.option("--type") {
            let value = try Parse.frameType(type, option: "--type")
            guard Profile.seed.classify(value) == .notification else {
                throw ArgumentError("--type \(hex(value)) is not a notification type (0x2…0x400)")
            }
            self.type = value
        }
        if let count = try arguments.option("--count") {
            self.count = try Parse.count(count, option: "--count")
        }
        endpoint = try Parse.endpoint(try arguments.positional("HOST:PORT"))
    }

    func run() async throws -> ExitStatus {
        let connection = try await Connection.connect(to: endpoint)
        let pushes = type.map { connection.notifications(ofType: $0) } ?? connection.notifications
        var received = 0
        for await push in pushes {
            Console.out(#"{"type":\#(push.type),"serial":\#(push.serial),"content":\#(embeddedJSON(push.payload))}"#)
            received += 1
            if let count, received >= count {
                await connection.close()
                return .success
            }
        }
        let state = await connection.currentState
        throw state.reason ?? TetherError(code: .peerClosed, message: "connection to \(endpoint) ended")
    }
}
