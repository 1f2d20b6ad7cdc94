import Courier
import CourierTestServer
import Crypto
import Foundation
import NIOSSL
import Testing
import X509
import _CryptoExtras

/// The pure half of pinning in the server-trust challenge (`URLSessionTransport` on Apple
/// platforms, whose Security-framework half is not compiled here): reading the
/// SubjectPublicKeyInfo out of a DER certificate, the certificates out of PEM, and the verdict of
/// a host's pins. BoringSSL (through NIOSSL) is the independent oracle for the SPKI bytes.
@Suite("Server-trust pinning: SPKI from DER, PEM, verdicts")
struct ServerTrustPinningTests {
    enum KeyKind: String, CaseIterable, CustomTestStringConvertible {
        case p256, p384, p521, rsa2048
        var testDescription: String { self.rawValue }
    }

    /// A self-signed certificate with a key of `kind`, as PEM.
    static func certificate(_ kind: KeyKind) throws -> String {
        let name = try DistinguishedName { CommonName("pin-\(kind.rawValue).example") }
        let now = Date()
        func make(_ key: Certificate.PrivateKey, _ algorithm: Certificate.SignatureAlgorithm) throws -> String {
            let certificate = try Certificate(
                version: .v3, serialNumber: .init(), publicKey: key.publicKey,
                notValidBefore: now.addingTimeInterval(-60), notValidAfter: now.addingTimeInterval(3600),
                issuer: name, subject: name, signatureAlgorithm: algorithm,
                extensions: try Certificate.Extensions { SubjectAlternativeNames([.dnsName("pin.example")]) },
                issuerPrivateKey: key
            )
            return try certificate.serializeAsPEM().pemString
        }
        switch kind {
        case .p256: return try make(.init(P256.Signing.PrivateKey()), .ecdsaWithSHA256)
        case .p384: return try make(.init(P384.Signing.PrivateKey()), .ecdsaWithSHA384)
        case .p521: return try make(.init(P521.Signing.PrivateKey()), .ecdsaWithSHA512)
        case .rsa2048: return try make(.init(try _RSA.Signing.PrivateKey(keySize: .bits2048)), .sha256WithRSAEncryption)
        }
    }

    static func der(_ pem: String) throws -> Data {
        Data(try NIOSSLCertificate(bytes: Array(pem.utf8), format: .pem).toDERBytes())
    }

    static func boringSSLSPKI(_ pem: String) throws -> Data {
        Data(try NIOSSLCertificate(bytes: Array(pem.utf8), format: .pem).extractPublicKey().toSPKIBytes())
    }

    @Test(arguments: KeyKind.allCases)
    func theSPKIReadFromTheDERIsTheOneBoringSSLReads(_ kind: KeyKind) throws {
        let pem = try Self.certificate(kind)
        let spki = try #require(ServerTrustPinning.subjectPublicKeyInfo(ofCertificate: try Self.der(pem)))
        #expect(spki == (try Self.boringSSLSPKI(pem)))
    }

    @Test
    func theTestServersLeafAndCAReadAsTheTransportPinsThem() throws {
        // The leaf the test servers present: its SPKI is the one the AsyncHTTPClient transport's
        // pins are checked against, so one pin means the same on both transports.
        let certificates = Certificates.shared
        let leaf = try #require(ServerTrustPinning.subjectPublicKeyInfo(ofCertificate: try Self.der(certificates.leafPEM)))
        #expect(leaf == certificates.leafSPKIDER)
        let ca = try #require(ServerTrustPinning.subjectPublicKeyInfo(ofCertificate: try Self.der(certificates.caPEM)))
        #expect(ca == (try Self.boringSSLSPKI(certificates.caPEM)))
        #expect(ca != leaf)
    }

    @Test
    func everyCutOfACertificateAndHostileLengthsAreRefusedNotTrapped() throws {
        // A careless or hostile peer: every prefix of a real certificate, lengths that claim more
        // than there is, five-byte and indefinite lengths, an empty input.
        let der = try Self.der(try Self.certificate(.p256))
        for cut in 0..<der.count {
            #expect(
                ServerTrustPinning.subjectPublicKeyInfo(ofCertificate: der.prefix(cut)) == nil,
                "a certificate cut at \(cut) of \(der.count) bytes")
        }
        #expect(ServerTrustPinning.subjectPublicKeyInfo(ofCertificate: der + Data([0])) == nil)
        let hostile: [[UInt8]] = [
            [], [0x30], [0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF], [0x30, 0x85, 1, 0, 0, 0, 0],
            [0x30, 0x80, 0x30, 0x00, 0x00, 0x00], [0x30, 0x02, 0x30, 0x7F], [0x1F, 0x01, 0x00],
            [0x30, 0x04, 0x30, 0x02, 0xA0, 0x00],
        ]
        for bytes in hostile {
            #expect(ServerTrustPinning.subjectPublicKeyInfo(ofCertificate: Data(bytes)) == nil, "\(bytes)")
        }
    }

    @Test
    func aPEMBundleYieldsEachCertificateInOrderAndGarbageNone() throws {
        let first = try Self.certificate(.p256)
        let second = try Self.certificate(.p384)
        let bundle = "a comment\n" + first + "\n" + second.replacingOccurrences(of: "\n", with: "\r\n")
        #expect(ServerTrustPinning.certificates(inPEM: bundle) == [try Self.der(first), try Self.der(second)])
        #expect(ServerTrustPinning.certificates(inPEM: "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----").isEmpty)
        #expect(ServerTrustPinning.certificates(inPEM: "").isEmpty)
        #expect(ServerTrustPinning.certificates(inPEM: "-----BEGIN CERTIFICATE-----\nAAAA").isEmpty)
    }

    @Test
    func theVerdictPassesThePinOrItsBackupAndNamesTheKeyOtherwise() throws {
        let pem = try Self.certificate(.p256)
        let leaf = try Self.der(pem)
        let right = TLSPin.publicKey(spkiSHA256: Data(SHA256.hash(data: try Self.boringSSLSPKI(pem))))
        let other = TLSPin.publicKey(spkiSHA256: Data(SHA256.hash(data: try Self.boringSSLSPKI(try Self.certificate(.p256)))))
        #expect(ServerTrustPinning.verdict(pins: [right], host: "pin.example", leafCertificate: leaf) == nil)
        // A backup pin is another pin: either key passes.
        #expect(ServerTrustPinning.verdict(pins: [other, right], host: "pin.example", leafCertificate: leaf) == nil)
        let refused = try #require(ServerTrustPinning.verdict(pins: [other], host: "pin.example", leafCertificate: leaf))
        #expect(refused.kind == .pinMismatch)
        #expect(refused.tlsReason == .pinMismatch)
        #expect(refused.message.contains(TLSPin.publicKeyPinText(spkiDER: try Self.boringSSLSPKI(pem))))
        // A leaf that cannot be read never passes a key pin; authority pins alone leave the
        // verdict to the chain's evaluation.
        #expect(ServerTrustPinning.verdict(pins: [right], host: "pin.example", leafCertificate: nil)?.kind == .pinMismatch)
        #expect(ServerTrustPinning.verdict(pins: [right], host: "pin.example", leafCertificate: Data([0x30, 0x00]))?.kind == .pinMismatch)
        #expect(ServerTrustPinning.verdict(pins: [.certificateAuthority(pem: pem)], host: "pin.example", leafCertificate: nil) == nil)
        let anchor = ServerTrustPinning.anchorMismatch(host: "pin.example", detail: "not trusted")
        #expect(anchor.kind == .pinMismatch && anchor.tlsReason == .pinMismatch)
    }
}
