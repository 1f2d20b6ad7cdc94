import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import NIOPosix
import Testing

/// Resource limits under load: many requests at once, and what is left afterwards.
///
/// | scenario | transport | expected | bound |
/// |---|---|---|---|
/// | 10,000 concurrent sends, HTTP/1.1 | both | all succeed with their own value; queue and slots empty after; server connections open ≤ the per-host limit, all closed after the transport's shutdown | the test's own time |
/// | 10,000 concurrent sends, HTTP/2 over TLS | AsyncHTTPClient | as above, one connection | the test's own time |
///
/// Peak memory and bytes per request are reported by `CourierBenchmarks many` (a benchmark, as
/// timings and sizes are not pass/fail here).
@Suite("Faults: resource limits")
struct ResourceLimitTests {
    static func item(_ request: RecordedRequest) async -> ScriptedResponse {
        .json(#"{"id":\#(request.query["i"] ?? "0"),"title":"item"}"#)
    }

    /// Sends `count` requests at once, each for its own item, and checks every value.
    ///
    /// Each request's deadline is ten minutes, not the default minute: the last of 10,000 waits
    /// in the queue for the 9,999 before it, which in a debug build beside other suites can take
    /// longer than a minute (the bound here is that all complete, not how fast).
    static func sendMany(_ client: Client, count: Int) async throws -> Int {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<count {
                group.addTask {
                    let article = try await client.send(
                        Endpoint<Article>(path: "/item", query: ["i": "\(index)"], timeout: .seconds(600)))
                    return article.id == index
                }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
    }

    /// Runs `body` against a server, and (for AsyncHTTPClient) a client, on an event loop of
    /// their own: 10,000 requests must not queue behind, or in front of, other suites' events on
    /// the shared loops.
    static func withOwnLoop(_ kind: TransportKind, tls: Bool, _ body: (Client, TestServer) async throws -> Void) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await TestServer.start(tls ? .tls(Certificates.shared) : .http1, group: group, handler: Self.item)
        let transport: any Transport
        var ahc: AsyncHTTPClientTransport?
        var session: URLSessionTransport?
        switch kind {
        case .asyncHTTPClient:
            var configuration = AsyncHTTPClientTransport.Configuration()
            configuration.eventLoopGroup = group
            if tls { try configuration.trust(pemCertificates: Certificates.shared.caPEMBytes) }
            ahc = AsyncHTTPClientTransport(configuration: configuration)
            transport = ahc!
        case .urlSession:
            if tls { try PrivateTrust.trust(Certificates.shared) }
            session = URLSessionTransport()
            transport = session!
        }
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        do {
            try await body(client, server)
        } catch {
            try? await ahc?.shutdown()
            session?.shutdown()
            try? await server.stop()
            try? await group.shutdownGracefully()
            throw error
        }
        try await ahc?.shutdown()
        session?.shutdown()
        // The transport is shut down: every socket it opened is closed, on both transports.
        #expect(await eventually { server.openConnectionCount == 0 })
        try await server.stop()
        try await group.shutdownGracefully()
    }

    @Test(arguments: TransportKind.allCases)
    func tenThousandConcurrentRequestsCompleteAndLeaveNothingBehind(_ kind: TransportKind) async throws {
        try await Self.withOwnLoop(kind, tls: false) { client, server in
            let correct = try await Self.sendMany(client, count: 10_000)
            #expect(correct == 10_000)
            #expect(server.requests.count == 10_000)
            #expect(client.traffic.queued == 0)
            #expect(client.traffic.inFlight == 0)
            // Both transports stay within the scheduler's per-host limit of open connections
            // (FoundationNetworking also closes and reopens HTTP/1.1 connections on its own
            // schedule: hundreds in all for 10,000 requests, never more than the limit at once).
            #expect(server.openConnectionCount <= SchedulerConfiguration.default.maxRequestsPerHost)
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func tenThousandConcurrentRequestsOverOneHTTP2Connection(_ kind: TransportKind) async throws {
        try await Self.withOwnLoop(kind, tls: true) { client, server in
            _ = try await client.send(Endpoint<Article>(path: "/item", query: ["i": "0"]))
            let correct = try await Self.sendMany(client, count: 10_000)
            #expect(correct == 10_000)
            #expect(client.traffic.queued == 0)
            #expect(client.traffic.inFlight == 0)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
            if kind == .asyncHTTPClient {
                #expect(server.connectionCount == 1)
            } else {
                // libcurl puts at most 100 streams on a connection (its default) and opens another
                // beyond that: multiplexed all the same, hundreds of requests per connection.
                #expect(server.requests.count / max(server.connectionCount, 1) >= 100)
            }
        }
    }
}
