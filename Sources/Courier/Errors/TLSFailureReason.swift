/// Why a TLS connection failed, as far as the transport could tell: carried by ``CourierError``
/// (kinds `tls` and `pinMismatch`) in ``CourierError/tlsReason``.
///
/// The platform's own wording stays in ``CourierError/message``; this is the stable, switchable
/// part. A transport that cannot tell leaves ``CourierError/tlsReason`` `nil`.
public enum TLSFailureReason: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// A certificate of the chain is past its `notAfter` date.
    case expired
    /// A certificate of the chain is before its `notBefore` date.
    case notYetValid
    /// The chain does not end at a trusted authority; a self-signed certificate is this too.
    case untrustedIssuer
    /// The certificate is trusted but names other hosts than the one connected to.
    case hostnameMismatch
    /// The certificate does not carry a pinned key or chain to a pinned authority.
    case pinMismatch
    /// The handshake failed for another reason (no common protocol or cipher, a peer that does
    /// not speak TLS, a certificate rejected for a reason not listed here).
    case handshakeFailure

    /// A few words for messages, such as "the certificate has expired".
    public var description: String {
        switch self {
        case .expired: return "the certificate has expired"
        case .notYetValid: return "the certificate is not yet valid"
        case .untrustedIssuer: return "the certificate is not issued by a trusted authority"
        case .hostnameMismatch: return "the certificate is for another host name"
        case .pinMismatch: return "the certificate does not match the host's pins"
        case .handshakeFailure: return "the TLS handshake failed"
        }
    }
}
