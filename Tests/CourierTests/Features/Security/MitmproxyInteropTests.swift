import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

/// mitmproxy (PyPI) as a man in the middle in reverse-proxy mode with its own CA, which the
/// client trusts: without pins requests pass through it; with the real server's key pinned they
/// fail, and the real server never sees them.
@Suite("Interop: mitmproxy as a man in the middle", .serialized, .enabled(if: ExternalServer.mitmproxyEnabled))
struct MitmproxyInteropTests {
    @Test(arguments: [false, true])
    func pinnedRequestsThroughTheProxyFailAndDirectOnesPass(http1: Bool) async throws {
        let real = try await tlsServer()
        let confdir = FileManager.default.temporaryDirectory.appendingPathComponent("courier-mitm-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: confdir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: confdir) }
        let proxy = try await ExternalServer.start(
            executable: ExternalServer.mitmdump,
            arguments: [
                "--mode", "reverse:https://localhost:\(real.port)", "--listen-host", "127.0.0.1", "--listen-port", "{port}",
                "--ssl-insecure", "--set", "confdir=\(confdir.path)", "--set", "http2=true", "-q",
            ]
        )
        let mitmCA = try String(contentsOf: confdir.appendingPathComponent("mitmproxy-ca-cert.pem"), encoding: .utf8)
        let proxied = URL(string: "https://localhost:\(proxy.port)")!
        let rightPin = TLSPin.publicKeyPinText(spkiDER: Certificates.shared.leafSPKIDER)

        func transport(pinned: Bool) throws -> AsyncHTTPClientTransport {
            try AsyncHTTPClientTransport(
                validating: .init {
                    try? $0.trust(pemCertificates: Array((mitmCA + "\n" + Certificates.shared.caPEM).utf8))
                    if http1 { $0.httpVersion = .http1Only }
                    if pinned { $0.pinning.pin("localhost", to: [try! .publicKey(rightPin)]) }
                })
        }

        // Unpinned, the proxy is trusted and relays the request: the man in the middle works.
        let open = try transport(pinned: false)
        let relayed = try await Client(configuration: .init(transport: open, baseURL: proxied)).send(Endpoint<Article>(path: "/json"))
        #expect(relayed.id == 1)
        #expect(real.requests.count == 1)
        try await open.shutdown()

        // Pinned to the real server's key: through the proxy it fails before any request is sent.
        let pinned = try transport(pinned: true)
        let error = await expectCourierError {
            _ = try await Client(configuration: .init(transport: pinned, baseURL: proxied)).send(Endpoint<Article>(path: "/json?pinned=1"))
        }
        #expect(error?.kind == .pinMismatch)
        #expect(real.requests.count == 1)
        // The same pinned transport reaches the real server directly.
        let direct = try await Client(configuration: .init(transport: pinned, baseURL: real.baseURL)).send(
            Endpoint<Article>(path: "/json?direct=1"))
        #expect(direct.id == 1)
        #expect(real.requests.last?.uri == "/json?direct=1")
        try await pinned.shutdown()
        await proxy.stop()
        try await real.stop()
    }
}
