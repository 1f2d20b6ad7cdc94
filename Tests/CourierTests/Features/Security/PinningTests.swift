import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

@Suite("TLS pinning is enforced on every connection, before anything is sent")
struct PinningTests {
    static let rightPin = TLSPin.publicKeyPinText(spkiDER: Certificates.shared.leafSPKIDER)
    static let otherPin = TLSPin.publicKeyPinText(spkiDER: try! TestCertificates.generate(commonName: "Other").leafSPKIDER)

    func pinned(_ pins: [TLSPin], http1: Bool = false) -> (inout AsyncHTTPClientTransport.Configuration) -> Void {
        { configuration in
            configuration.pinning.pin("localhost", to: pins)
            if http1 { configuration.httpVersion = .http1Only }
        }
    }

    @Test(arguments: [false, true])
    func wrongPublicKeyFailsWithPinMismatchAndTheServerSeesNoRequest(http1: Bool) async throws {
        let server = try await tlsServer()
        try await withClient(
            .asyncHTTPClient, server: server, transportConfiguration: self.pinned([try .publicKey(Self.otherPin)], http1: http1)
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(error?.message.contains(Self.rightPin) == true)
            #expect(server.connectionCount >= 1)
            #expect(server.requests.isEmpty)
        }
    }

    /// A host pinned to an empty list (`compactMap { try? .publicKey($0) }` over pins that all
    /// failed to parse) accepted every certificate: it now accepts none, and nothing is sent.
    @Test(arguments: [false, true])
    func aHostPinnedToNoKeyAcceptsNoCertificate(http1: Bool) async throws {
        let server = try await tlsServer()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: self.pinned([], http1: http1)) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(server.requests.isEmpty)
        }
        // The verdict the Apple-platform transport uses says the same of a readable certificate
        // (one it would accept with its own key pinned).
        let base64 = Certificates.shared.leafPEM.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        let leaf = try #require(Data(base64Encoded: base64))
        #expect(ServerTrustPinning.verdict(pins: [], host: "localhost", leafCertificate: leaf)?.kind == .pinMismatch)
        #expect(ServerTrustPinning.verdict(pins: [try .publicKey(Self.rightPin)], host: "localhost", leafCertificate: leaf) == nil)
    }

    @Test(arguments: [false, true])
    func matchingPinOrBackupPinPasses(http1: Bool) async throws {
        let server = try await tlsServer()
        try await withClient(
            .asyncHTTPClient, server: server,
            transportConfiguration: self.pinned([try .publicKey(Self.otherPin), try .publicKey(Self.rightPin)], http1: http1)
        ) { client in
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.value.id == 1)
            #expect(response.version == (http1 ? .http1_1 : .http2))
        }
    }

    @Test
    func certificateAuthorityPinTrustsOnlyThatAnchor() async throws {
        let server = try await tlsServer()
        let stranger = try TestCertificates.generate(commonName: "Stranger CA")
        try await withClient(
            .asyncHTTPClient, server: server, transportConfiguration: self.pinned([.certificateAuthority(pem: stranger.caPEM)])
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(server.requests.isEmpty)
        }
        // Pinned to the right CA, with no other trust configured at all: it passes.
        let second = try await tlsServer()
        let transport = try AsyncHTTPClientTransport(
            validating: .init { $0.pinning.pin("localhost", to: [.certificateAuthority(pem: Certificates.shared.caPEM)]) })
        let client = Client(configuration: .init(transport: transport, baseURL: second.baseURL))
        let article = try await client.send(Endpoint<Article>(path: "/json"))
        #expect(article.id == 1)
        try await transport.shutdown()
        try await second.stop()
    }

    @Test
    func unpinnedHostsAreUnaffected() async throws {
        let server = try await tlsServer()
        try await withClient(
            .asyncHTTPClient, server: server,
            transportConfiguration: { $0.pinning.pin("api.example.com", to: [try! .publicKey(Self.otherPin)]) }
        ) { client in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    @Test
    func pinnedHostOverPlainHTTPIsRefused() async throws {
        let server = try await http1Server()
        let transport = AsyncHTTPClientTransport(configuration: .init { $0.pinning.pin("127.0.0.1", to: [try! .publicKey(Self.rightPin)]) })
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
        #expect(error?.kind == .invalidRequest)
        #expect(server.requests.isEmpty)
        try await transport.shutdown()
        try await server.stop()
    }

    @Test
    func transportsThatCannotPinRefuseToBeConfiguredWithPins() throws {
        var pinning = PinningPolicy()
        pinning.pin("localhost", to: [try .publicKey(Self.rightPin)])
        #expect(throws: CourierError.self) { _ = try URLSessionTransport(pinning: pinning) }
        #expect(throws: CourierError.self) { _ = try TLSPin.publicKey("sha256/not-base64!") }
        #expect(throws: CourierError.self) {
            _ = try AsyncHTTPClientTransport(validating: .init { $0.pinning.pin("x", to: [.certificateAuthority(pem: "garbage")]) })
        }
    }
}
