import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import NIOSSL
import Testing

/// A certificate problem the test server can be given, and the reason a client must report.
enum CertificateCase: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case expired
    case notYetValid
    case selfSigned
    case wrongHost
    case untrustedCA

    var testDescription: String { self.rawValue }

    /// The reason the AsyncHTTPClient transport must report.
    var reason: TLSFailureReason {
        switch self {
        case .expired: return .expired
        case .notYetValid: return .notYetValid
        case .selfSigned, .untrustedCA: return .untrustedIssuer
        case .wrongHost: return .hostnameMismatch
        }
    }

    /// The server's certificates, and the CA (PEM) the client trusts.
    func certificates() throws -> (server: TestCertificates, trusted: TestCertificates) {
        switch self {
        case .expired:
            let certificates = try TestCertificates.generate(leafFlaw: .expired)
            return (certificates, certificates)
        case .notYetValid:
            let certificates = try TestCertificates.generate(leafFlaw: .notYetValid)
            return (certificates, certificates)
        case .selfSigned:
            let certificates = try TestCertificates.generate(leafFlaw: .selfSigned)
            return (certificates, certificates)
        case .wrongHost:
            let certificates = try TestCertificates.generate(dnsNames: ["wrong.example"], ipv4Addresses: [])
            return (certificates, certificates)
        case .untrustedCA:
            return (Certificates.shared, try TestCertificates.generate(commonName: "Some Other CA"))
        }
    }
}

@Suite("TLS failures say why")
struct TLSFailureTests {
    @Test(arguments: CertificateCase.allCases)
    func asyncHTTPClientReportsTheExactReason(_ problem: CertificateCase) async throws {
        let (served, trusted) = try problem.certificates()
        let server = try await TestServer.start(.tls(served), handler: Routes.standard)
        try await withClient(
            .asyncHTTPClient, server: server, transportConfiguration: { try? $0.trust(pemCertificates: trusted.caPEMBytes) }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls)
            #expect(error?.tlsReason == problem.reason, "\(error?.message ?? "")")
            #expect(error?.message.contains(problem.reason.description) == true)
            // The platform's own text is kept.
            #expect(error?.message.contains(problem == .wrongHost ? "failedToValidateHostname" : "CERTIFICATE_VERIFY_FAILED") == true)
            #expect(server.requests.isEmpty)
        }
    }

    @Test
    func aPeerThatDoesNotSpeakTLSIsAHandshakeFailure() async throws {
        let server = try await http1Server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "https://127.0.0.1:\(server.port)/json"))
            }
            #expect(error?.kind == .tls)
            #expect(error?.tlsReason == .handshakeFailure)
        }
    }

    @Test
    func pinMismatchesCarryThePinMismatchReason() async throws {
        let server = try await tlsServer()
        let otherKey = TLSPin.publicKeyPinText(spkiDER: try TestCertificates.generate(commonName: "Other").leafSPKIDER)
        try await withClient(
            .asyncHTTPClient, server: server, transportConfiguration: { $0.pinning.pin("localhost", to: [try! .publicKey(otherKey)]) }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(error?.tlsReason == .pinMismatch)
        }
        let second = try await tlsServer()
        let stranger = try TestCertificates.generate(commonName: "Stranger CA")
        try await withClient(
            .asyncHTTPClient, server: second,
            transportConfiguration: { $0.pinning.pin("localhost", to: [.certificateAuthority(pem: stranger.caPEM)]) }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(error?.tlsReason == .pinMismatch)
        }
    }

    /// With certificate verification turned off, a certificate's names prove nothing: a man in
    /// the middle presents one for another name, for which no pin applies. A key pin then holds
    /// for every connection (the leaf must carry a pinned key), and an authority pin still checks
    /// the chain. AsyncHTTPClient only: on Linux `URLSessionTransport(pinning:)` throws
    /// (FoundationNetworking has no server-trust challenge to check pins in).
    @Test(arguments: ["publicKey", "authority"])
    func pinsHoldWithCertificateVerificationOff(_ pin: String) async throws {
        let (served, _) = try CertificateCase.wrongHost.certificates()
        let stranger = try TestCertificates.generate(commonName: "Stranger")
        let unchecked: (inout AsyncHTTPClientTransport.Configuration) -> Void = {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.certificateVerification = .none
            $0.tlsConfiguration = tls
        }
        let attacker = try await TestServer.start(.tls(served), handler: Routes.standard)
        let wrongPin: TLSPin =
            pin == "publicKey"
            ? try .publicKey(TLSPin.publicKeyPinText(spkiDER: stranger.leafSPKIDER)) : .certificateAuthority(pem: stranger.caPEM)
        try await withClient(
            .asyncHTTPClient, server: attacker,
            transportConfiguration: {
                unchecked(&$0)
                $0.pinning.pin("localhost", to: [wrongPin])
            }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch, "\(error?.message ?? "")")
            #expect(attacker.requests.isEmpty)
        }
        // Pinned to what the server presents, the same server is reached (names still unchecked).
        let server = try await TestServer.start(.tls(served), handler: Routes.standard)
        let rightPin: TLSPin =
            pin == "publicKey"
            ? try .publicKey(TLSPin.publicKeyPinText(spkiDER: served.leafSPKIDER)) : .certificateAuthority(pem: served.caPEM)
        try await withClient(
            .asyncHTTPClient, server: server,
            transportConfiguration: {
                unchecked(&$0)
                $0.pinning.pin("localhost", to: [rightPin])
            }
        ) { client in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(!article.title.isEmpty)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: [CertificateCase.expired, .notYetValid, .wrongHost], ["publicKey", "authority"])
    func aPinnedHostsOtherCertificateProblemsKeepTheirReason(_ problem: CertificateCase, _ pin: String) async throws {
        // A pin says which key or authority may be presented; it does not make an expired
        // certificate, or one for another host, a pin mismatch. Public-key pin on the server's
        // own key, or its own CA pinned: the reason is the certificate's.
        let (served, trusted) = try problem.certificates()
        let server = try await TestServer.start(.tls(served), handler: Routes.standard)
        let pins: [TLSPin] =
            pin == "publicKey"
            ? [try .publicKey(TLSPin.publicKeyPinText(spkiDER: served.leafSPKIDER))]
            : [.certificateAuthority(pem: trusted.caPEM)]
        try await withClient(
            .asyncHTTPClient, server: server,
            transportConfiguration: {
                try? $0.trust(pemCertificates: trusted.caPEMBytes)
                $0.pinning.pin("localhost", to: pins)
            }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls, "\(error?.message ?? "")")
            #expect(error?.tlsReason == problem.reason, "\(error?.message ?? "")")
            #expect(server.requests.isEmpty)
        }
        // Pinned to another authority, the same server is a pin mismatch (an untrusted issuer is the pins' doing).
        if pin == "authority" {
            let stranger = try TestCertificates.generate(commonName: "Stranger CA")
            let again = try await TestServer.start(.tls(served), handler: Routes.standard)
            try await withClient(
                .asyncHTTPClient, server: again,
                transportConfiguration: { $0.pinning.pin("localhost", to: [.certificateAuthority(pem: stranger.caPEM)]) }
            ) { client in
                let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
                #expect(error?.kind == .pinMismatch)
            }
        }
    }

    /// URLSession never fails a certificate with kind `transport`. On Linux (FoundationNetworking
    /// over libcurl, which passes these on as NSURLErrorUnknown with libcurl's text) the system
    /// trust store never holds the test CA, and URLSession has no per-session trust setting, so
    /// libcurl stops at the issuer ("unable to get local issuer certificate", "self-signed
    /// certificate") for every case: the platform gives no reason for expired, notYetValid and
    /// wrongHost here, and they come back as `untrustedIssuer`.
    @Test(arguments: CertificateCase.allCases)
    func urlSessionReportsKindTLS(_ problem: CertificateCase) async throws {
        let (served, _) = try problem.certificates()
        let server = try await TestServer.start(.tls(served), handler: Routes.standard)
        try await withClient(.urlSession, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls, "\(error?.message ?? "")")
            #if canImport(Darwin)
            // Apple platforms check the issuer first as well: the test CA is not in the keychain.
            #expect(error?.tlsReason == nil || error?.tlsReason == .untrustedIssuer || error?.tlsReason == problem.reason)
            #else
            #expect(error?.tlsReason == .untrustedIssuer, "\(error?.message ?? "")")
            #endif
            #expect(server.requests.isEmpty)
        }
    }

    @Test
    func urlSessionReportsAPeerThatDoesNotSpeakTLSAsKindTLS() async throws {
        let server = try await http1Server()
        try await withClient(.urlSession, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "https://127.0.0.1:\(server.port)/json"))
            }
            #expect(error?.kind == .tls, "\(error?.message ?? "")")
            #expect(error?.tlsReason == .handshakeFailure, "\(error?.message ?? "")")
        }
    }

    @Test
    func theCommandLinePrintsTheReasonInItsOneErrorLine() async throws {
        let certificates = try TestCertificates.generate(leafFlaw: .expired)
        let server = try await TestServer.start(.tls(certificates), handler: Routes.standard)
        let ca = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-expired-\(UUID().uuidString).pem")
        try Data(certificates.caPEM.utf8).write(to: ca)
        defer { try? FileManager.default.removeItem(at: ca) }
        let result = try await runCourier(["request", server.baseURL.absoluteString + "/json", "--cacert", ca.path])
        #expect(result.status == 7)
        #expect(result.stderr.hasPrefix("courier: TLS failure (expired): the TLS handshake failed: the certificate has expired"))
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(server.requests.isEmpty)
        try await server.stop()
    }
}
