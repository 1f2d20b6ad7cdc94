import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// URLSessionTransport over TLS: the success path, HTTP/2, and each certificate problem with its
/// reason. On Linux URLSession trusts only the system's CA bundle and has no per-session trust
/// setting, so these run where the test CA can be added to that bundle: `scripts/test-urlsession-tls.sh`
/// runs them in a private mount namespace (`.ci/run` does, and fails if they are skipped). A plain
/// `swift test` skips them, by this suite's name and the reason below. The same behaviours on
/// AsyncHTTPClient are in `HTTP2Tests` and `TLSFailureTests`.
@Suite(
    "URLSession over TLS: success, HTTP/2 and certificate failures",
    // One at a time: a CA added to the bundle while another test's connection reads it could be
    // read half-written.
    .serialized,
    .enabled(
        if: PrivateTrust.isAvailable,
        "URLSession on Linux trusts only the system CA bundle: run scripts/test-urlsession-tls.sh (root, a private mount namespace)")
)
struct URLSessionTLSTests {
    init() throws {
        try PrivateTrust.trust(Certificates.shared)
    }

    /// The HTTPS success path: the head, the body and the decoded value. ALPN gives HTTP/2 (the
    /// server says so); FoundationNetworking does not tell the client which version it spoke, so
    /// the response says ``HTTPVersion/unknown`` (the "Platforms and transports" caveats).
    @Test
    func anHTTPSRequestSucceedsOverHTTP2() async throws {
        let server = try await tlsServer()
        try await withClient(.urlSession, server: server) { client in
            let response = try await client.response(Endpoint<Echo>(path: "/echo", headers: [HTTPField.Name("X-Probe")!: "tls"]))
            #expect(response.status == .ok)
            #expect(response.value.version == "HTTP/2")
            #expect(response.value.headers["x-probe"] == "tls")
            #expect(response.version == .unknown)
            #expect(server.requests.count == 1)
            #expect(server.requests.first?.httpVersion == "HTTP/2")
        }
    }

    /// RFC 9113 §9.1: concurrent requests to one origin share one HTTP/2 connection.
    @Test
    func concurrentRequestsShareOneHTTP2Connection() async throws {
        let server = try await tlsServer()
        try await withClient(.urlSession, server: server) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let titles = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<20 {
                    group.addTask { try await client.send(Endpoint<Article>(path: "/json").deduplication(.disabled)).title }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }
            }
            #expect(titles.count == 20)
            #expect(server.requests.count == 21)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
            #expect(Set(server.requests.map(\.connectionID)).count == server.connectionCount)
            #expect(server.connectionCount == 1)
        }
    }

    /// Cancelling the only caller of an in-flight HTTP/2 request reaches the server (its stream
    /// is reset: the server sees the exchange abandoned), and the connection carries the next
    /// request. Against this server (swift-nio-http2) the reset arrives at once; against nginx,
    /// which sends nothing while it waits for its upstream, it waits for the connection's next
    /// traffic (`NginxInteropTests`; why the two differ was not traced).
    @Test
    func cancellingAnHTTP2RequestReachesTheServer() async throws {
        let server = try await tlsServer()
        try await withClient(.urlSession, server: server) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let stalled = client.start(Endpoint<Article>(path: "/stall").retry(.never))
            #expect(await eventually { server.requests.count == 2 })
            stalled.cancel()
            let error = await expectCourierError { _ = try await stalled.value }
            #expect(error?.kind == .cancelled)
            #expect(await eventually { server.abandonedCount == 1 })
            let received = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(received.id == 1)
            #expect(server.connectionCount == 1)
        }
    }

    /// Each certificate problem fails with kind `tls` and the same reason as on AsyncHTTPClient,
    /// with the issuing CA trusted (so the issuer is not what fails); for `untrustedCA` the
    /// server's CA is one never added to the bundle.
    @Test(arguments: CertificateCase.allCases)
    func certificateProblemsSayWhy(_ problem: CertificateCase) async throws {
        let served: TestCertificates
        if problem == .untrustedCA {
            served = try TestCertificates.generate(commonName: "Never Trusted CA")
        } else {
            let (server, trusted) = try problem.certificates()
            try PrivateTrust.trust(trusted)
            served = server
        }
        let server = try await TestServer.start(.tls(served), handler: Routes.standard)
        try await withClient(.urlSession, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls, "\(error.map { "\($0.message) / \(String(describing: $0.underlying))" } ?? "")")
            #expect(error?.tlsReason == problem.reason, "\(error?.message ?? "")")
            #expect(server.requests.isEmpty)
        }
    }
}
