import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A certificate authority and a leaf certificate for `localhost` / `127.0.0.1`, made fresh at run time.
///
/// Nothing is read from disk and nothing expires between runs: every test run makes its own.
public struct TestCertificates: Sendable {
    /// The CA certificate, PEM.
    public let caPEM: String
    /// The leaf certificate, PEM, signed by the CA.
    public let leafPEM: String
    /// The leaf's private key, PEM (PKCS#8).
    public let leafKeyPEM: String
    /// The leaf's SubjectPublicKeyInfo, DER.
    public let leafSPKIDER: Data

    /// A flaw built into the leaf, to see how clients reject it.
    public enum LeafFlaw: Sendable, Hashable {
        /// Valid until a day ago.
        case expired
        /// Valid from tomorrow.
        case notYetValid
        /// Signed by its own key, not by the CA (which is still made, and may be trusted).
        case selfSigned
        /// No subjectAltName extension: the host is named only in the subject's Common Name.
        case noSubjectAlternativeName
    }

    /// Makes a new CA and a leaf certificate for the given DNS names and IPv4 and IPv6 addresses
    /// (4 and 16 bytes); the leaf
    /// has `leafFlaw` when one is given (for a leaf for the wrong host, pass other `dnsNames`).
    /// With `criticalPolicies`, the leaf carries a critical certificatePolicies extension
    /// (anyPolicy), as some enterprise and government PKIs issue.
    public static func generate(
        commonName: String = "Courier Test CA",
        dnsNames: [String] = ["localhost"],
        ipv4Addresses: [[UInt8]] = [[127, 0, 0, 1]],
        ipv6Addresses: [[UInt8]] = [],
        leafFlaw: LeafFlaw? = nil,
        criticalPolicies: Bool = false
    ) throws -> TestCertificates {
        let now = Date()
        let caKey = P256.Signing.PrivateKey()
        // A name of its own for each CA: a verifier that holds several test CAs (one trust store
        // for the whole run, as URLSession's on Linux) finds a leaf's issuer by name, and with
        // one name for all would try the wrong CA's key ("certificate signature failure").
        let caName = try DistinguishedName {
            CommonName(commonName)
            OrganizationalUnitName(UUID().uuidString)
        }
        let ca = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(caKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(86400 * 30),
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(caKey)
        )
        let leafKey = P256.Signing.PrivateKey()
        var names: [GeneralName] = dnsNames.map { .dnsName($0) }
        names += (ipv4Addresses + ipv6Addresses).map { .ipAddress(ASN1OctetString(contentBytes: ArraySlice($0))) }
        let leafName = try DistinguishedName { CommonName(dnsNames.first ?? "localhost") }
        let validity: (from: TimeInterval, until: TimeInterval) =
            switch leafFlaw {
            case .expired: (-86400 * 30, -86400)
            case .notYetValid: (86400, 86400 * 30)
            default: (-3600, 86400 * 30)
            }
        let leaf = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(leafKey.publicKey),
            notValidBefore: now.addingTimeInterval(validity.from),
            notValidAfter: now.addingTimeInterval(validity.until),
            issuer: leafFlaw == .selfSigned ? leafName : caName,
            subject: leafName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                if leafFlaw != .noSubjectAlternativeName {
                    SubjectAlternativeNames(names)
                }
                if criticalPolicies {
                    // certificatePolicies (2.5.29.32): SEQUENCE { SEQUENCE { anyPolicy (2.5.29.32.0) } }.
                    Certificate.Extension(
                        oid: [2, 5, 29, 32], critical: true, value: [0x30, 0x08, 0x30, 0x06, 0x06, 0x04, 0x55, 0x1D, 0x20, 0x00])
                }
            },
            issuerPrivateKey: leafFlaw == .selfSigned ? .init(leafKey) : .init(caKey)
        )
        var serializer = DER.Serializer()
        try serializer.serialize(leaf.publicKey)
        return TestCertificates(
            caPEM: try ca.serializeAsPEM().pemString,
            leafPEM: try leaf.serializeAsPEM().pemString,
            leafKeyPEM: leafKey.pemRepresentation,
            leafSPKIDER: Data(serializer.serializedBytes)
        )
    }

    /// The CA certificate as PEM bytes, for a client's trust roots.
    public var caPEMBytes: [UInt8] { Array(self.caPEM.utf8) }

    func serverTLSConfiguration() throws -> TLSConfiguration {
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(self.leafPEM.utf8)).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(bytes: Array(self.leafKeyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        configuration.applicationProtocols = ["h2", "http/1.1"]
        return configuration
    }
}
