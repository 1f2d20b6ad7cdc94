import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import InMemoryLogging
import Logging
import Testing

@Suite("Logging and cURL output show requests without secrets")
struct LoggingTests {
    @Test(arguments: TransportKind.allCases)
    func oneLineAtStartAndOneAtEndWithTheDetails(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .debug
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            _ = try await client.send(Endpoint<Article>(name: "news.article", path: "/json", query: ["access_token": "s3cr3t", "page": "1"]))
            let lines = handler.entries.map { "\($0.message)" }
            #expect(lines.count == 2)
            #expect(lines.first?.hasPrefix("→ ") == true)
            #expect(lines.first?.contains("news.article GET") == true)
            let end = lines.last ?? ""
            #expect(end.hasPrefix("← "))
            #expect(end.contains("news.article GET"))
            #expect(end.contains(" 200 "))
            #expect(end.contains("24B"))
            #expect(end.contains("HTTP/1.1"))
            #expect(end.hasSuffix("success"))
            #expect(end.contains("ms "))
            #expect(end.contains("access_token=REDACTED"))
            #expect(!lines.joined().contains("s3cr3t"))
            let startID = lines.first?.split(separator: " ")[1]
            let endID = end.split(separator: " ")[1]
            #expect(startID == endID)
            #expect(endID.count == 8)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func failuresAreLoggedWithTheirKind(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let handler = InMemoryLogHandler()
        let logger = Logger(label: "test") { _ in handler }
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            _ = try? await client.send(Endpoint<Article>(path: "/status/500"))
            // Both lines are at `.info`: the start and the end.
            #expect(handler.entries.count == 2)
            #expect(handler.entries.allSatisfy { $0.level == .info })
            let last = handler.entries.last.map { "\($0.message)" } ?? ""
            #expect(last.hasSuffix("failure(http_status_500)"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func nothingIsLoggedByDefault(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            #expect(client.configuration.logger == nil)
            _ = try await client.send(Endpoint<Article>(path: "/json"))
        }
    }

    @Test
    func cURLRenderingRedactsAuthorizationCookiesAndTokens() throws {
        let client = Client(configuration: .init(transport: URLSessionTransport(), baseURL: URL(string: "https://api.example.com/v1")!))
        let endpoint = Endpoint<Article>(
            method: .post, path: "/login", query: ["api_key": "k-123", "lang": "en"],
            headers: [.authorization: "Bearer abc.def", .cookie: "sid=42", HTTPField.Name("X-Request")!: "r1"],
            body: .json(["user": "ada", "password": "hunter2"])
        )
        let curl = try client.makeRequest(for: endpoint).cURLDescription()
        #expect(curl.hasPrefix("curl -X POST 'https://api.example.com/v1/login?api_key=REDACTED&lang=en'"))
        #expect(curl.contains("-H 'Authorization: REDACTED'"))
        #expect(curl.contains("-H 'Cookie: REDACTED'"))
        #expect(curl.contains("-H 'X-Request: r1'"))
        #expect(curl.contains("\"user\":\"ada\""))
        for secret in ["abc.def", "sid=42", "k-123", "hunter2"] {
            #expect(!curl.contains(secret), "cURL output leaks \(secret)")
        }
    }

    @Test
    func errorDescriptionsDoNotLeakTokensFromBodies() {
        var error = CourierError(.httpStatus, "the server answered 401")
        error.body = Data(#"{"error":"bad","access_token":"leaky","hint":"Bearer abc123"}"#.utf8)
        #expect(!error.description.contains("leaky"))
        #expect(!error.description.contains("abc123"))
        #expect(error.description.contains("\"error\":\"bad\""))
    }
}
