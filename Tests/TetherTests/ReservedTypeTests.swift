import Foundation
import Testing
import TetherTesting
@testable import Tether

/// Frame types that cannot carry a request: the profile's heartbeat, push and invalid types,
/// and, with sessions, the hello and the acknowledgement. A request of such a type would never
/// be answered, and a handler for one would never run.
@Suite("Reserved frame types", .timeLimit(.guarded))
struct ReservedTypeTests {
    @Test("a request of a push, heartbeat or invalid type fails at once with the reason, and nothing is written", arguments: [
        (UInt32(0x300), "push"), (0x400, "push"), (0x1, "heartbeat"), (0, "invalid"),
    ])
    func requestOfNonRequestType(type: UInt32, kind: String) async throws {
        try await withServer(handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            // Unlimited: a request that is not refused at once waits here until the guard.
            let error = await #expect(throws: TetherError.self) {
                try await connection.request(Request(type: type, text: "never answered"), timeout: .unlimited)
            }
            #expect(error?.code == .invalidArgument)
            #expect(error?.message.contains("0x\(String(type, radix: 16))") == true)
            #expect(error?.message.contains(kind) == true)
            #expect(error?.message.contains("profile seed") == true)
            let results = await connection.pipeline([Request(type: type), Request(type: 0x402, json: [:])])
            #expect((results[0].failure as? TetherError)?.code == .invalidArgument)
            #expect(try results[1].get().json == ["echo": [:]])
            #expect(await connection.metrics.framesOut == 1)
            await connection.close()
        }
    }

    @Test("with a session, a request of the hello's or the acknowledgement's type fails at once and names the session")
    func requestOfSessionType() async throws {
        try await withServer(configure: { $0.mailboxes = .inMemory }, handlers: echoHandlers) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: sessionConfiguration("alice"))
            for type: UInt32 in [0x401, 0x400] {
                let error = await #expect(throws: TetherError.self) {
                    try await connection.request(Request(type: type, json: [:]), timeout: .unlimited)
                }
                #expect(error?.code == .invalidArgument)
                #expect(error?.message.contains("session") == true)
            }
            #expect(try await connection.request(Request(type: 0x402, json: [:])).json == ["echo": [:]])
            await connection.close()
        }
    }

    @Test("without a session, 0x401 is an ordinary request type")
    func helloTypeWithoutSession() async throws {
        try await withServer(handlers: { server in
            server.handle(type: 0x401) { _, _ in Response(text: "plain") }
        }) { _, endpoint in
            let connection = try await Connection.connect(to: endpoint, configuration: testConfiguration())
            #expect(try await connection.request(Request(type: 0x401)).text == "plain")
            await connection.close()
        }
    }

    @Test("a handler for a push type stops the server at registration, and says which type and why")
    func handlerForPushType() async throws {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            Server(configuration: .init(port: 0)).handle(type: 0x300) { _, _ in Response(text: "never") }
        }
        let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(text.contains("0x300"), "\(text)")
        #expect(text.contains("push"), "\(text)")
    }

    @Test("with mailboxes, a handler for the hello's type stops the server at registration, and says so")
    func handlerForHelloType() async throws {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var configuration = ServerConfiguration(port: 0)
            configuration.mailboxes = .inMemory
            Server(configuration: configuration).handle(type: 0x401) { _, _ in Response(text: "never") }
        }
        let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(text.contains("0x401"), "\(text)")
        #expect(text.contains("session hello"), "\(text)")
    }
}

extension Result {
    /// The error, when this is a failure.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
