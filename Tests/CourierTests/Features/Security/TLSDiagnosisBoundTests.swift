import Crypto
import Foundation
import SwiftASN1
import Testing
import X509

@testable import CourierAsyncHTTPClient

/// The AsyncHTTPClient transport's diagnosis of a rejected certificate judges the chain the server
/// presented; a hostile server chooses that chain, so what the diagnosis searches is bounded.
@Suite("TLS diagnosis: a hostile chain is judged within a bound")
struct TLSDiagnosisBoundTests {
    private static let now = Date()

    private static func certificate(
        subject: DistinguishedName, key: P256.Signing.PublicKey, issuer: DistinguishedName, signer: P256.Signing.PrivateKey,
        authority: Bool
    ) throws -> Certificate {
        try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(key),
            notValidBefore: Self.now.addingTimeInterval(-3600),
            notValidAfter: Self.now.addingTimeInterval(86400),
            issuer: issuer,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                if authority {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                } else {
                    Critical(BasicConstraints.notCertificateAuthority)
                }
            },
            issuerPrivateKey: .init(signer))
    }

    @Test
    func intermediatesThatAllSignEachOtherAreJudgedWithinABound() async throws {
        // Nine keys under one name, each certifying every other (72 certificates): a path may hold
        // each key once (swift-certificates skips a certificate whose subject and key the path
        // holds), so an unbounded search tries about 9! orders, with a signature check at each step.
        let keys = (0..<9).map { _ in P256.Signing.PrivateKey() }
        let loop = try DistinguishedName { CommonName("Loop CA") }
        var intermediates: [Certificate] = []
        for signer in keys.indices {
            for subject in keys.indices where subject != signer {
                intermediates.append(
                    try Self.certificate(subject: loop, key: keys[subject].publicKey, issuer: loop, signer: keys[signer], authority: true))
            }
        }
        let leafKey = P256.Signing.PrivateKey()
        let leaf = try Self.certificate(
            subject: try DistinguishedName { CommonName("localhost") }, key: leafKey.publicKey, issuer: loop, signer: keys[0],
            authority: false)
        // Some presented twice over, too.
        let presented = [leaf] + intermediates + intermediates.prefix(3)

        let bounded = TLSDiagnosis.bounded(presented)
        #expect(bounded.count == 1 + TLSDiagnosis.maxIntermediates)
        #expect(bounded == [leaf] + intermediates.prefix(TLSDiagnosis.maxIntermediates))

        // No path to a root: untrusted, judged over the bounded chain (the unbounded search would
        // not end within the test run).
        let reason = await TLSDiagnosis.classify(chain: presented, roots: CertificateStore([]), now: Self.now)
        #expect(reason == .untrustedIssuer)
    }

    @Test
    func aRealChainPresentedWithARepeatedCertificateStillFindsItsRoot() async throws {
        let rootKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName { CommonName("Root") }
        let root = try Self.certificate(subject: rootName, key: rootKey.publicKey, issuer: rootName, signer: rootKey, authority: true)
        let intermediateKey = P256.Signing.PrivateKey()
        let intermediateName = try DistinguishedName { CommonName("Intermediate") }
        let intermediate = try Self.certificate(
            subject: intermediateName, key: intermediateKey.publicKey, issuer: rootName, signer: rootKey, authority: true)
        let leafKey = P256.Signing.PrivateKey()
        let leaf = try Self.certificate(
            subject: try DistinguishedName { CommonName("localhost") }, key: leafKey.publicKey, issuer: intermediateName,
            signer: intermediateKey, authority: false)

        let presented = [leaf, intermediate, intermediate]
        #expect(TLSDiagnosis.bounded(presented) == [leaf, intermediate])
        // Trusted: the diagnosis reports no reason.
        #expect(await TLSDiagnosis.classify(chain: presented, roots: CertificateStore([root]), now: Self.now) == nil)
        // Without the root: untrusted.
        #expect(await TLSDiagnosis.classify(chain: presented, roots: CertificateStore([]), now: Self.now) == .untrustedIssuer)
    }
}
