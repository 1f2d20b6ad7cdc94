import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// Per-service stacks: middleware, header fields, timeout, retry and cache policies declared once
/// per service, on both transports, with environments still switching.
@Suite("Per-service defaults")
struct ServiceDefaultsTests {
    struct Stamp: Middleware, Hashable {
        let name: String
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            var request = request
            request.head.headerFields.append(HTTPField(name: HTTPField.Name("X-Stamp")!, value: self.name))
            return try await next(request)
        }
    }

    /// Two services on two servers; each server echoes the path, X-Api and X-Stamp it got, and
    /// `/flaky` fails once with 503, `/slow` answers after 20 s.
    static func handler(_ label: String) -> TestServer.Handler {
        let failed = Locked(false)
        return { request in
            let firstFlaky =
                request.path == "/flaky"
                && failed.withLock { done in
                    defer { done = true }
                    return !done
                }
            if firstFlaky { return .text("busy", status: 503) }
            let response = ScriptedResponse.text(
                "\(label) \(request.path) api=\(request.header("X-Api") ?? "-") stamp=\(request.headers.filter { $0.0.lowercased() == "x-stamp" }.map(\.1).joined(separator: ","))"
            )
            return request.path == "/slow" ? response.with(.stall(.seconds(20))) : response
        }
    }

    @Test(arguments: TransportKind.allCases)
    func eachServiceGetsItsOwnStackAndTheEndpointsSettingsWin(_ kind: TransportKind) async throws {
        let news = try await http1Server(Self.handler("news"))
        let payments = try await http1Server(Self.handler("payments"))
        let paymentsTest = try await http1Server(Self.handler("payments-test"))
        let servers = ServerDirectory(
            urls: [
                "news": [.develop: news.baseURL], "reports": [.develop: news.baseURL],
                "payments": [.develop: payments.baseURL, .test: paymentsTest.baseURL],
            ],
            buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore()
        )
        try await withClient(
            kind, server: news,
            configure: {
                $0.servers = servers
                $0.middleware = [Stamp(name: "client")]
                $0.retry = .never
                $0.serviceDefaults["payments"] = ServiceDefaults(
                    middleware: [Stamp(name: "payments")], headers: [HTTPField.Name("X-Api")!: "2"],
                    retry: RetryPolicy(maxAttempts: 2, baseDelay: .milliseconds(1))
                )
                // Only the service whose calls should be short gets a short timeout (a loaded machine
                // must not make the other calls time out).
                $0.serviceDefaults["reports"] = ServiceDefaults(timeout: .seconds(1))
                $0.serviceDefaults["news"] = ServiceDefaults(headers: [HTTPField.Name("X-Api")!: "1"])
            }
        ) { client in
            func call(_ service: ServiceID, _ path: String, headers: HTTPFields = [:]) -> Endpoint<String> {
                Endpoint<String>(path: path, headers: headers, decoding: .string).service(service)
            }
            // Middleware: the client's, then the service's; header fields from the service.
            #expect(try await client.send(call("payments", "/charge")) == "payments /charge api=2 stamp=client,payments")
            #expect(try await client.send(call("news", "/list")) == "news /list api=1 stamp=client")
            // The endpoint's own field replaces the service's.
            #expect(
                try await client.send(call("payments", "/charge", headers: [HTTPField.Name("X-Api")!: "3"]))
                    == "payments /charge api=3 stamp=client,payments")
            // The service's retry policy: one 503, then the answer.
            #expect(try await client.send(call("payments", "/flaky")) == "payments /flaky api=2 stamp=client,payments")
            // The reports service's 1 s timeout ends a 20 s answer (the client's default is 60 s).
            let timedOut = await expectCourierError { _ = try await client.send(call("reports", "/slow")) }
            #expect(timedOut?.kind == .timeout)
            // Environments keep switching under the defaults.
            try servers.switchEnvironment(to: .test)
            #expect(try await client.send(call("payments", "/charge")) == "payments-test /charge api=2 stamp=client,payments")
            // makeRequest shows the same logical request the pipeline builds.
            #expect(try client.makeRequest(for: call("payments", "/charge")).head.headerFields[HTTPField.Name("X-Api")!] == "2")
        }
        try await payments.stop()
        try await paymentsTest.stop()
    }
    @Test(arguments: TransportKind.allCases)
    func cacheThenNetworkFindsWhatAServicesRequestsStored(_ kind: TransportKind) async throws {
        // `updates()` looked the stored answer up without the service's header fields: an answer
        // that varies on one (RFC 9111 §4.1) was never found, and the cached half never came.
        let server = try await http1Server { request in
            .text("v \(request.header("x-api") ?? "none")", headers: [("Cache-Control", "max-age=60"), ("Vary", "X-Api")])
        }
        let servers = ServerDirectory(
            urls: ["api": [.develop: server.baseURL]], buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore())
        try await withClient(
            kind, server: server,
            configure: {
                $0.servers = servers
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
                $0.serviceDefaults["api"] = ServiceDefaults(headers: [HTTPField.Name("X-Api")!: "2"])
            }
        ) { client in
            let endpoint = Endpoint<String>(path: "/v", decoding: .string).service("api")
            var first: [ResponseSource] = []
            for try await response in client.updates(endpoint) { first.append(response.source) }
            #expect(first == [.network])
            var second: [Response<String>] = []
            for try await response in client.updates(endpoint) { second.append(response) }
            #expect(second.map(\.source) == [.cache, .network])
            #expect(second.first?.value == "v 2")
        }
    }
}
