import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import InMemoryLogging
import Logging
import Testing

@testable import Courier

/// The public surface: what `import Courier` gives, and configuration closures that may throw.
@Suite("Public surface")
struct PublicSurfaceTests {
    @Test
    func trustCanBeCalledInsideTheConfigurationClosure() async throws {
        let server = try await tlsServer()
        let configuration = try AsyncHTTPClientTransport.Configuration {
            try $0.trust(pemCertificates: Certificates.shared.caPEMBytes)
        }
        let transport = AsyncHTTPClientTransport(configuration: configuration)
        let client = try Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.timeout = .seconds(30)
                try $0.trust(check: true)
            })
        let article = try await client.send(Endpoint<Article>(path: "/json"))
        #expect(article.id == 1)
        // A closure that throws makes the initialiser throw, with the closure's error.
        #expect(throws: (any Error).self) {
            _ = try AsyncHTTPClientTransport.Configuration { try $0.trust(pemCertificates: Array("not a certificate".utf8)) }
        }
        try await transport.shutdown()
        try await server.stop()
    }
}

extension Client.Configuration {
    /// A throwing step inside a configuration closure, as an app's own setup might have.
    fileprivate mutating func trust(check: Bool) throws {
        guard check else { throw CourierError(.invalidRequest, "not trusted") }
    }
}
