import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Security)
import Security
#endif

#if canImport(Security) && canImport(Darwin)
/// The Security-framework side of pinning on Apple platforms (not compiled or tested on Linux):
/// the system evaluates the chain — against only the pinned authorities when a host has some —
/// and the shared ``ServerTrustPinning`` code checks the leaf's public key.
///
/// As the AsyncHTTPClient transport's verifier does, a connection is checked against every
/// pinned host its certificate is valid for, not only the host the challenge names: the system
/// may carry another host's requests over it (HTTP/2 connection coalescing) without a new
/// challenge.
enum ApplePinning {
    enum Outcome {
        /// No pinned host is concerned: the system's default handling decides.
        case unpinned
        case passed
        case refused(CourierError)
    }

    static func check(_ trust: SecTrust, host: String, port: Int, policy: PinningPolicy) -> Outcome {
        let chain = (SecTrustCopyCertificateChain(trust) as? [SecCertificate]) ?? []
        // For each host the certificate is valid for (the challenged host, and every pinned host
        // the system finds it valid for), the pins the transport would pick for a request to it
        // (host and this port, host, wildcard and this port, wildcard), each host on its own: a
        // sibling host's pin takes the place of no other host's own (below: only of a wildcard
        // pin, for a wildcard certificate, and only when it pins keys). The name each key is
        // evaluated for, by key. Unlike the AsyncHTTPClient transport's verifier, which reads the
        // certificate's names, a wildcard pin is found here only through a name under it that no
        // pin names (a wildcard certificate), or through the challenged host.
        let challenged = policy.matchingKey(for: host, port: port)
        var concerned: [String: String] = [:]
        if let challenged { concerned[challenged] = host }
        var probedWildcards: [String: Substring] = [:]
        for key in policy.pins.keys {
            let (pattern, keyPort) = PinningPolicy.split(key)
            guard keyPort == nil || keyPort == port else { continue }
            // A wildcard pin concerns the certificate if it is valid for a name the wildcard covers.
            let name = pattern.hasPrefix("*.") ? "courier-pin-probe" + pattern.dropFirst(1) : pattern
            guard let picked = policy.matchingKey(for: name, port: port), concerned[picked] == nil else { continue }
            if Self.evaluate(chain, for: name, anchors: nil) == nil {
                concerned[picked] = name
                if pattern.hasPrefix("*."), picked != challenged { probedWildcards[picked] = pattern.dropFirst(1) }
            }
        }
        // As for a request, a pinned exact host under a wildcard whose keys are pinned takes the
        // place of the wildcard pin (unless the challenged host is the wildcard's own); one
        // pinned to an authority only checks no key, and takes the place of nothing.
        for (key, suffix) in probedWildcards
        where concerned.keys.contains(where: { other in
            let (otherHost, _) = PinningPolicy.split(other)
            return !otherHost.hasPrefix("*.") && otherHost.hasSuffix(suffix) && !otherHost.dropLast(suffix.count).contains(".")
                && PinningPolicy.checksKeys(policy.pins[other] ?? [])
        }) {
            concerned[key] = nil
        }
        guard !concerned.isEmpty else { return .unpinned }
        for (key, name) in concerned.sorted(by: { $0.key < $1.key }) {
            let pins = policy.pins[key] ?? []
            let anchorTexts = PinningPolicy.anchors(in: pins)
            let anchors =
                anchorTexts.isEmpty
                ? nil
                : anchorTexts.flatMap(ServerTrustPinning.certificates(inPEM:)).compactMap {
                    SecCertificateCreateWithData(nil, $0 as CFData)
                }
            if let failure = Self.evaluate(chain, for: name, anchors: anchors) {
                if anchors != nil { return .refused(ServerTrustPinning.anchorMismatch(host: name, detail: failure)) }
                var error = CourierError(.tls, "the TLS handshake failed: \(failure)")
                error.tlsReason = .untrustedIssuer
                return .refused(error)
            }
            let leaf = chain.first.map { SecCertificateCopyData($0) as Data }
            if let refusal = ServerTrustPinning.verdict(pins: pins, host: name, leafCertificate: leaf) { return .refused(refusal) }
        }
        // The host the challenge names must pass the system's own evaluation too.
        if policy.pins(for: host, port: port) == nil, let failure = Self.evaluate(chain, for: host, anchors: nil) {
            var error = CourierError(.tls, "the TLS handshake failed: \(failure)")
            error.tlsReason = .untrustedIssuer
            return .refused(error)
        }
        return .passed
    }

    /// Evaluates `chain` for `host` in a trust object of its own (with only `anchors` as roots
    /// when given): `nil` when trusted, else why not. Any call that fails is a refusal, so a
    /// pinned authority can never fall back to the system's roots.
    static func evaluate(_ chain: [SecCertificate], for host: String, anchors: [SecCertificate]?) -> String? {
        guard !chain.isEmpty else { return "the server presented no certificate" }
        var made: SecTrust?
        guard SecTrustCreateWithCertificates(chain as CFArray, SecPolicyCreateSSL(true, host as CFString), &made) == errSecSuccess,
            let trust = made
        else {
            return "the chain could not be evaluated"
        }
        if let anchors {
            guard !anchors.isEmpty,
                SecTrustSetAnchorCertificates(trust, anchors as CFArray) == errSecSuccess,
                SecTrustSetAnchorCertificatesOnly(trust, true) == errSecSuccess
            else { return "the pinned authorities could not be set as the only anchors" }
        }
        var failure: CFError?
        guard SecTrustEvaluateWithError(trust, &failure) else {
            return failure.map { ($0 as Error).localizedDescription } ?? "the system did not trust the chain"
        }
        return nil
    }
}
#endif
