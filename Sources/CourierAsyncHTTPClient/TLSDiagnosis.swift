import Courier
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import SwiftASN1
import X509

/// Finds out why a server's certificate failed verification.
///
/// BoringSSL reports every rejected chain as `CERTIFICATE_VERIFY_FAILED`, and neither NIOSSL nor
/// AsyncHTTPClient passes on the X.509 verify result. So, after such a failure, the transport
/// connects once more with a verification callback that records the chain the server presents
/// and rejects it (the handshake never completes, nothing is sent), then judges the chain against
/// the same trust roots: no path to a root is `untrustedIssuer` (a self-signed leaf included);
/// a path with a certificate out of its validity period is `expired` or `notYetValid`.
enum TLSDiagnosis {
    /// Whether the error is BoringSSL's rejection of the peer's certificate chain.
    static func isCertificateVerifyFailure(_ error: any Error) -> Bool {
        guard let error = error as? NIOSSLError, case .handshakeFailed(let inner) = error else { return false }
        switch inner {
        case .sslError(let stack), .unknownError(let stack):
            return stack.contains { $0.description.contains("CERTIFICATE_VERIFY_FAILED") }
        default:
            return false
        }
    }

    /// The reason the chain served at `host:port` fails verification under `configuration`, or
    /// `nil` when it cannot be told (the second connection failed, or the chain now verifies).
    static func reason(
        host: String, address: String? = nil, port: Int, configuration: TLSConfiguration, group: any EventLoopGroup, timeout: TimeAmount
    ) async -> TLSFailureReason? {
        guard
            let chain = await self.presentedChain(
                host: host, address: address, port: port, configuration: configuration, group: group, timeout: timeout),
            !chain.isEmpty
        else { return nil }
        return await self.classify(chain: chain, roots: self.roots(of: configuration), now: Date())
    }

    /// Why `chain` (leaf first) is not trusted by `roots` at `now`; `nil` when it is.
    static func classify(chain presented: [Certificate], roots: CertificateStore, now: Date) async -> TLSFailureReason? {
        let chain = Self.bounded(presented)
        guard let leaf = chain.first else { return nil }
        var verifier = Verifier(rootCertificates: roots) { ChainOnlyPolicy(chain: chain) }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(chain.dropFirst()))
        guard case .validCertificate(let validated) = result else { return .untrustedIssuer }
        if validated.contains(where: { $0.notValidAfter < now }) { return .expired }
        if validated.contains(where: { $0.notValidBefore > now }) { return .notYetValid }
        return nil
    }

    /// The most intermediate certificates the diagnosis searches for a path through.
    static let maxIntermediates = 6

    /// The presented chain as the diagnosis judges it: each certificate once, and at most
    /// ``maxIntermediates`` after the leaf, in the server's order.
    ///
    /// swift-certificates' path search tries every order of intermediates that sign each other
    /// (a path holds each subject and key once), without a limit, and is never cancelled: a
    /// hostile server presenting a dozen keys that certify each other under one name (a
    /// certificate for each pair) would keep a core busy for hours.
    /// Six allow for a leaf's real chains (one to three intermediates, a cross-signed one or two
    /// besides) and bound the search to under 2,000 paths.
    static func bounded(_ chain: [Certificate]) -> [Certificate] {
        var seen = Set<Certificate>()
        var kept: [Certificate] = []
        for certificate in chain where kept.count <= Self.maxIntermediates {
            if seen.insert(certificate).inserted { kept.append(certificate) }
        }
        return kept
    }

    /// The trust roots `configuration` gives BoringSSL, as swift-certificates values.
    static func roots(of configuration: TLSConfiguration) -> CertificateStore {
        var store: CertificateStore
        switch configuration.trustRoots {
        case .certificates(let certificates):
            store = CertificateStore(certificates.compactMap(Self.certificate))
        case .file(let path):
            store = CertificateStore(((try? NIOSSLCertificate.fromPEMFile(path)) ?? []).compactMap(Self.certificate))
        case .default, nil:
            store = CertificateStore.systemTrustRoots
        }
        for additional in configuration.additionalTrustRoots {
            switch additional {
            case .certificates(let certificates):
                store.append(contentsOf: certificates.compactMap(Self.certificate))
            case .file(let path):
                store.append(contentsOf: ((try? NIOSSLCertificate.fromPEMFile(path)) ?? []).compactMap(Self.certificate))
            }
        }
        return store
    }

    private static func certificate(_ certificate: NIOSSLCertificate) -> Certificate? {
        try? Certificate(derEncoded: certificate.toDERBytes())
    }

    /// Connects to `host:port` (at `address` when the transport routes the host there with
    /// `resolvedHosts`, so the diagnosis asks the server that failed) and returns the
    /// certificates the server presents, rejecting them.
    private static func presentedChain(
        host: String, address: String?, port: Int, configuration: TLSConfiguration, group: any EventLoopGroup, timeout: TimeAmount
    ) async -> [Certificate]? {
        guard let bootstrap = ClientBootstrap(validatingGroup: group) else { return nil }
        var probe = configuration
        if probe.certificateVerification == .none { return nil }
        probe.certificateVerification = .fullVerification
        guard let context = try? NIOSSLContext(configuration: probe) else { return nil }
        let captured = Locked<[Certificate]?>(nil)
        // SNI carries host names only (RFC 6066 §3).
        let serverName = Self.isIPAddress(host) ? nil : host
        let connecting =
            bootstrap
            .connectTimeout(timeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = try NIOSSLClientHandler(
                        context: context, serverHostname: serverName,
                        customVerificationCallback: { certificates, promise in
                            captured.withLock { $0 = certificates.compactMap(Self.certificate) }
                            promise.succeed(.failed)
                        })
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: address ?? host, port: port)
        guard let channel = try? await connecting.get() else { return nil }
        // The rejected handshake closes the channel; a server that never answers is cut off.
        let cutOff = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        try? await channel.closeFuture.get()
        cutOff.cancel()
        return captured.current
    }

    private static func isIPAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}

/// A policy that asks only for a signature path to a root: every critical extension a server
/// certificate commonly carries, and every one the presented chain carries, counts as handled, and
/// no other check is made (the validity periods are judged separately, so the path is found
/// whatever the dates are). swift-certificates refuses a certificate with a critical extension no
/// policy handles: a chain with, say, a critical certificatePolicies extension (some enterprise
/// PKIs) found no path, and an expired leaf read as `untrustedIssuer` (under pins, `pinMismatch`).
private struct ChainOnlyPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier]

    init(chain: [Certificate]) {
        var handled: [ASN1ObjectIdentifier] = [
            .X509ExtensionID.basicConstraints, .X509ExtensionID.keyUsage, .X509ExtensionID.extendedKeyUsage,
            .X509ExtensionID.subjectAlternativeName, .X509ExtensionID.nameConstraints,
            .X509ExtensionID.authorityKeyIdentifier, .X509ExtensionID.subjectKeyIdentifier,
        ]
        for certificate in chain {
            for `extension` in certificate.extensions where `extension`.critical && !handled.contains(`extension`.oid) {
                handled.append(`extension`.oid)
            }
        }
        self.verifyingCriticalExtensions = handled
    }

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        .meetsPolicy
    }
}
