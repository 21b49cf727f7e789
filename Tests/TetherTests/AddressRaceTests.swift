import Testing
@testable import Tether

@Suite("Racing the addresses of a host (Happy Eyeballs)", .timeLimit(.guarded))
struct AddressRaceTests {
    private func address(_ text: String) -> TetherSocketAddress {
        TetherSocketAddress(ipAddress: text, port: 9000)!
    }

    @Test("addresses are tried with the families interleaved, starting with the system's first, each family in the system's order")
    func interleaving() {
        let v6 = ["::1", "::2", "::3"].map(address)
        let v4 = ["10.0.0.1", "10.0.0.2"].map(address)
        #expect(AddressRace.interleaved(v6 + v4) == [v6[0], v4[0], v6[1], v4[1], v6[2]])
        #expect(AddressRace.interleaved([v4[0], v6[0], v6[1], v4[1]]) == [v4[0], v6[0], v4[1], v6[1]])
        #expect(AddressRace.interleaved(v4) == v4)
        #expect(AddressRace.interleaved([]) == [])
        #expect(ConnectionConfiguration().connectionAttemptDelay == .milliseconds(250))
    }

    @Test("a host resolving to a black-holed ::1 first and an answering 127.0.0.1: connected over IPv4 long before the connect timeout of 10 s, which the first address alone would have used up")
    func blackHoledFirstAddress() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            // [::1]:PORT listens with a full accept queue and never accepts: the kernel drops
            // the SYNs, so a connect to it hangs.
            let (listener, blackHole) = try RawSocket.listen(host: "::1", port: endpoint.port, backlog: 0)
            defer { listener.close() }
            var fillers: [RawSocket] = []
            defer { fillers.forEach { $0.close() } }
            for _ in 0..<8 {
                guard let filler = try? RawSocket.connect(to: blackHole, timeout: .milliseconds(200)) else { break }
                fillers.append(filler)
            }
            let port = endpoint.port
            var configuration = testConfiguration()
            configuration.connectTimeout = .seconds(10)
            configuration.resolver = .list { _ in
                [TetherSocketAddress(ipAddress: "::1", port: port)!, TetherSocketAddress(ipAddress: "127.0.0.1", port: port)!]
            }
            let connection = try await Connection.connect(to: Endpoint(host: "dual-stack.test", port: port), configuration: configuration)
            // The ::1 attempt never completes: connecting at all, within the connect timeout,
            // means the IPv4 attempt ran beside it rather than after it. The report below
            // says so without a stopwatch: ::1 abandoned, still pending, when IPv4 won.
            // How long it took depends on the machine's load, not on the race.
            #expect(await connection.remoteAddress == TetherSocketAddress(ipAddress: "127.0.0.1", port: port))
            // The report says so: ::1 first, still pending when IPv4 won after the attempt
            // delay.
            let report = try #require(await connection.connectReport)
            #expect(report.address == TetherSocketAddress(ipAddress: "127.0.0.1", port: port))
            #expect(report.family == "IPv4")
            #expect(report.endpoint == Endpoint(host: "dual-stack.test", port: port))
            #expect(report.attempts.map(\.address) == [TetherSocketAddress(ipAddress: "::1", port: port)!, TetherSocketAddress(ipAddress: "127.0.0.1", port: port)!])
            #expect(report.attempts.map(\.outcome) == [.abandoned, .connected])
            #expect(report.attempts[1].startedAfter >= configuration.connectionAttemptDelay, "\(report)")
            #expect(report.attempts[0].duration == nil)
            #expect(report.connectTime >= report.attempts[1].startedAfter)
            #expect(try await connection.request(Request(type: 0x402)).type == 0x402)
            await connection.close()
        }
    }

    @Test("a refused first address: the next starts at once, without the attempt delay, and the report lists both")
    func refusedFirstAddress() async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let (closed, closedEndpoint) = try RawSocket.listen()
            closed.close()
            let refused = TetherSocketAddress(ipAddress: "127.0.0.1", port: closedEndpoint.port)!
            let answering = TetherSocketAddress(ipAddress: "127.0.0.1", port: endpoint.port)!
            var configuration = testConfiguration()
            // Far longer than the test's bound: a next attempt that waited for it would fail it.
            configuration.connectionAttemptDelay = .seconds(120)
            configuration.resolver = .list { _ in [refused, answering] }
            let connection = try await Connection.connect(to: Endpoint(host: "half-closed.test", port: 1), configuration: configuration)
            let report = try #require(await connection.connectReport)
            #expect(report.address == answering)
            #expect(report.attempts.map(\.address) == [refused, answering])
            guard case .failed(let error) = report.attempts[0].outcome else {
                Issue.record("the first attempt: \(report.attempts[0].outcome)")
                return
            }
            #expect(error.code == .connectionRefused)
            #expect(report.attempts[1].outcome == .connected)
            #expect(report.attempts[1].startedAfter < .seconds(60), "\(report)")
            #expect(report.description.hasPrefix("connected to \(answering) (IPv4) in "), "\(report)")
            await connection.close()
        }
    }

    @Test("every address failing: the connect fails with each address's failure, in the order they were tried")
    func everyAddressFails() async throws {
        let (first, firstEndpoint) = try RawSocket.listen()
        first.close()
        let (second, secondEndpoint) = try RawSocket.listen()
        second.close()
        var configuration = testConfiguration()
        configuration.resolver = .list { _ in
            [TetherSocketAddress(ipAddress: "127.0.0.1", port: firstEndpoint.port)!, TetherSocketAddress(ipAddress: "127.0.0.1", port: secondEndpoint.port)!]
        }
        let error = await #expect(throws: TetherError.self) {
            _ = try await Connection.connect(to: Endpoint(host: "closed.test", port: 1), configuration: configuration)
        }
        #expect(error?.code == .connectionRefused)
        #expect(error?.message == "cannot connect to closed.test:1: connection refused by 127.0.0.1:\(firstEndpoint.port); connection refused by 127.0.0.1:\(secondEndpoint.port)")
    }
}
