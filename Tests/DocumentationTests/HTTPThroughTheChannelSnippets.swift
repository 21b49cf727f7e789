import Tether
import TetherHTTP
import Testing

// The code of the "HTTP Through the Channel" article.

private struct User: Decodable {
    var name: String
}

private func httpOverview(connection: Connection) async throws {
    let request = HTTPRequest.get("https://api.example.com/users/42")
    let response = try await connection.http(request)
    print(response.status)                        // 200
    print(response.headers["Content-Type"] ?? "") // application/json
    print(response.text)                          // {"id":42,"name":"Ada"}
}

private func httpSending(connection: Connection, token: String) async throws {
    let users = "https://api.example.com/users"
    let created = try await connection.http(.post(users, json: ["name": "Ada"]))

    var update = HTTPRequest(method: .put, url: users + "/42")
    update.headers["Authorization"] = "Bearer \(token)"
    update.headers["Content-Type"] = "application/json"
    update.body = Array(#"{"name":"Ada Lovelace"}"#.utf8)
    update.timeout = .seconds(5)   // the server's limit for this exchange
    let updated = try await connection.http(update)
    if updated.isSuccess, let user = try? updated.decode(User.self) {
        print(user.name)
    }
    _ = created
}

private func httpForwarding() throws -> Server {
    let server = Server(configuration: ServerConfiguration(host: "0.0.0.0", port: 9000))
    let allowed = ["api.example.com", "127.0.0.1:8080", "*.internal.example"]
    var forwarding = try HTTPForwardingConfiguration(allowing: allowed)
    forwarding.timeout = .seconds(10)                  // default 30 s
    forwarding.maximumResponseBodySize = 4 << 20       // default 8 MiB
    server.forwardHTTP(forwarding) { record in
        print(record.peer, record.request?.url ?? "?", record.duration)
    }
    return server
}

private func httpFailure(connection: Connection) async throws {
    do {
        _ = try await connection.http(.get("http://169.254.169.254/latest/meta-data/"))
    } catch let error as TetherError where error.code == .httpFailed {
        let reason = (error.underlying as? HTTPForwardingError)?.reason
        print(reason ?? "?", error.message)
        // hostNotAllowed HTTP GET http://169.254.169.254/latest/meta-data/ refused:
        //   169.254.169.254:80 is not on this server's allow-list
    }
}

@Suite("HTTP Through the Channel article")
struct HTTPThroughTheChannelSnippetTests {
    @Test("the article's refusal: a metadata address is not on the allow-list, and no request leaves")
    func refusal() async throws {
        let server = try httpForwarding()
        _ = server
        let forwarder = HTTPForwarder(configuration: try HTTPForwardingConfiguration(allowing: ["api.example.com", "127.0.0.1:8080", "*.internal.example"]))
        do {
            _ = try await forwarder.perform(.get("http://169.254.169.254/latest/meta-data/"))
            Issue.record("the metadata address was not refused")
        } catch {
            #expect(error.reason == .hostNotAllowed)
            #expect(error.message == "HTTP GET http://169.254.169.254/latest/meta-data/ refused: 169.254.169.254:80 is not on this server's allow-list")
        }
    }
}
