import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

/// Resource limits under load: many requests at once, and what is left afterwards.
///
/// | scenario | transport | expected | bound |
/// |---|---|---|---|
/// | 10,000 concurrent sends, HTTP/1.1 | both | all succeed with their own value; queue and slots empty after; server connections ≤ the per-host limit (AHC), all closed after shutdown | the test's own time |
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
    static func sendMany(_ client: Client, count: Int) async throws -> Int {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<count {
                group.addTask {
                    let article = try await client.send(Endpoint<Article>(path: "/item", query: ["i": "\(index)"]))
                    return article.id == index
                }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func tenThousandConcurrentRequestsCompleteAndLeaveNothingBehind(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.item)
        try await withClient(kind, server: server) { client in
            let correct = try await Self.sendMany(client, count: 10_000)
            #expect(correct == 10_000)
            #expect(server.requests.count == 10_000)
            #expect(client.traffic.queued == 0)
            #expect(client.traffic.inFlight == 0)
            if kind == .asyncHTTPClient {
                // FoundationNetworking reopens HTTP/1.1 connections on its own schedule; the
                // pool of AsyncHTTPClient is bounded by the scheduler's per-host limit.
                #expect(server.openConnectionCount <= SchedulerConfiguration.default.maxRequestsPerHost)
            }
        }
        if kind == .asyncHTTPClient {
            // The transport is shut down: every socket it opened is closed.
            #expect(await eventually { server.openConnectionCount == 0 })
        }
    }

    @Test
    func tenThousandConcurrentRequestsOverOneHTTP2Connection() async throws {
        // AsyncHTTPClient only: an HTTPS origin (URLSession on Linux cannot trust the test CA).
        let server = try await tlsServer(Self.item)
        try await withClient(.asyncHTTPClient, server: server) { client in
            _ = try await client.send(Endpoint<Article>(path: "/item", query: ["i": "0"]))
            let correct = try await Self.sendMany(client, count: 10_000)
            #expect(correct == 10_000)
            #expect(client.traffic.queued == 0)
            #expect(client.traffic.inFlight == 0)
            #expect(server.connectionCount == 1)
        }
        #expect(await eventually { server.openConnectionCount == 0 })
    }
}
