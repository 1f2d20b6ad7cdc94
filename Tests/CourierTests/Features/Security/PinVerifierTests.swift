import Courier
import CourierTestServer
import Crypto
import Foundation
import NIOSSL
import Testing

@testable import CourierAsyncHTTPClient

/// The AsyncHTTPClient transport's pin check on a new connection, which does not know the host the
/// connection is for: every pinned host the certificate is valid for has its own pins enforced
/// (RFC 7469 §2.6: a known pinned host's connection must carry one of its pinned keys).
@Suite("Pins: each host a certificate names is checked on its own")
struct PinVerifierTests {
    private static func pin(_ spki: Data) -> TLSPin { .publicKey(spkiSHA256: Data(SHA256.hash(data: spki))) }

    private static func verifier(_ policy: PinningPolicy) -> PinVerifier {
        PinVerifier(policy: policy, requiresSubjectAlternativeName: true, hostnameVerified: true)
    }

    @Test
    func aSiblingHostsAuthorityPinDoesNotSwitchOffThisHostsKeyPin() throws {
        // A certificate from a CA the system trusts, for `api.example.com` (pinned to a key under
        // its wildcard) that also names `login.example.com` (pinned to an authority only, which
        // this transport enforces as trust roots on requests to that host alone). Ranked
        // together, the exact sibling outranked the wildcard, and any key passed.
        let attacker = try TestCertificates.generate(dnsNames: ["api.example.com", "login.example.com"])
        let leaf = try NIOSSLCertificate(bytes: Array(attacker.leafPEM.utf8), format: .pem)
        let corporate = try TestCertificates.generate(commonName: "Corporate CA")
        let rightKey = try TestCertificates.generate(commonName: "Right").leafSPKIDER

        var policy = PinningPolicy()
        policy.pin("*.example.com", to: [Self.pin(rightKey)])
        policy.pin("login.example.com", to: [.certificateAuthority(pem: corporate.caPEM)])
        #expect(
            policy.keysToEnforce(forCertificateNames: ["api.example.com", "login.example.com"], port: 443) == [
                "*.example.com", "login.example.com",
            ])
        #expect(throws: PinMismatch.self) { try Self.verifier(policy).check(leaf, port: 443) }

        // The certificate with a pinned key passes: the wildcard's key, and the sibling's
        // authority (checked by the TLS library on that host's own connections).
        var honest = PinningPolicy()
        honest.pin("*.example.com", to: [Self.pin(attacker.leafSPKIDER)])
        honest.pin("login.example.com", to: [.certificateAuthority(pem: corporate.caPEM)])
        try Self.verifier(honest).check(leaf, port: 443)
    }

    @Test
    func aPinForThisPortOrAnExactHostStillTakesThePlaceOfTheWiderPinForThatHost() throws {
        let certificates = try TestCertificates.generate(dnsNames: ["api.example.com"])
        let leaf = try NIOSSLCertificate(bytes: Array(certificates.leafPEM.utf8), format: .pem)
        let otherKey = try TestCertificates.generate(commonName: "Other").leafSPKIDER

        var policy = PinningPolicy()
        policy.pin("*.example.com", to: [Self.pin(otherKey)])
        policy.pin("api.example.com", to: [Self.pin(otherKey)])
        policy.pin("api.example.com:8443", to: [Self.pin(certificates.leafSPKIDER)])
        // On 8443 the port's pin alone applies, and the key is pinned there.
        #expect(policy.keysToEnforce(forCertificateNames: ["api.example.com"], port: 8443) == ["api.example.com:8443"])
        try Self.verifier(policy).check(leaf, port: 8443)
        // On 443 the exact host's pin applies (not the wildcard's as well), and the key is not in it.
        #expect(policy.keysToEnforce(forCertificateNames: ["api.example.com"], port: 443) == ["api.example.com"])
        #expect(throws: PinMismatch.self) { try Self.verifier(policy).check(leaf, port: 443) }
    }

    @Test
    func aWildcardCertificateIsCheckedForEveryPinnedHostItCovers() throws {
        let certificates = try TestCertificates.generate(dnsNames: ["*.example.com"])
        let leaf = try NIOSSLCertificate(bytes: Array(certificates.leafPEM.utf8), format: .pem)
        let otherKey = try TestCertificates.generate(commonName: "Other").leafSPKIDER

        // `api.example.com` is pinned to another key: the certificate could serve it, so it fails.
        var policy = PinningPolicy()
        policy.pin("api.example.com", to: [Self.pin(otherKey)])
        #expect(policy.keysToEnforce(forCertificateNames: ["*.example.com"], port: 443) == ["api.example.com"])
        #expect(throws: PinMismatch.self) { try Self.verifier(policy).check(leaf, port: 443) }
        // A host two labels down is not covered by the certificate: nothing to enforce.
        var deeper = PinningPolicy()
        deeper.pin("a.api.example.com", to: [Self.pin(otherKey)])
        #expect(deeper.keysToEnforce(forCertificateNames: ["*.example.com"], port: 443).isEmpty)
        try Self.verifier(deeper).check(leaf, port: 443)
        // As for a request, an exact host's pin takes the place of the wildcard pin: a key
        // rotation that pins the new key for `api.example.com` before the wildcard.
        var rotating = PinningPolicy()
        rotating.pin("api.example.com", to: [Self.pin(certificates.leafSPKIDER), Self.pin(otherKey)])
        rotating.pin("*.example.com", to: [Self.pin(otherKey)])
        #expect(rotating.keysToEnforce(forCertificateNames: ["*.example.com"], port: 443) == ["api.example.com"])
        try Self.verifier(rotating).check(leaf, port: 443)
        // An exact host pinned to an authority only checks no key: it takes the place of no
        // wildcard pin, which the certificate's key must still meet.
        let corporate = try TestCertificates.generate(commonName: "Corporate CA")
        var sibling = PinningPolicy()
        sibling.pin("*.example.com", to: [Self.pin(otherKey)])
        sibling.pin("login.example.com", to: [.certificateAuthority(pem: corporate.caPEM)])
        #expect(
            sibling.keysToEnforce(forCertificateNames: ["*.example.com"], port: 443) == ["*.example.com", "login.example.com"])
        #expect(throws: PinMismatch.self) { try Self.verifier(sibling).check(leaf, port: 443) }
        // A wildcard pin covers the certificate's wildcard.
        var wildcard = PinningPolicy()
        wildcard.pin("*.example.com", to: [Self.pin(certificates.leafSPKIDER)])
        #expect(wildcard.keysToEnforce(forCertificateNames: ["*.example.com"], port: 443) == ["*.example.com"])
        try Self.verifier(wildcard).check(leaf, port: 443)
    }
}
