/// Why a TLS connection failed, as far as the transport could tell: carried by ``CourierError``
/// (kinds `tls` and `pinMismatch`) in ``CourierError/tlsReason``.
///
/// The platform's own wording stays in ``CourierError/message``; this is the stable, switchable
/// part. A transport that cannot tell leaves ``CourierError/tlsReason`` `nil`. Reasons may be
/// added in a minor version: a `switch` over them needs a `default` case.
public struct TLSFailureReason: Sendable, Hashable, CustomStringConvertible {
    private enum Base: String, Sendable, Hashable {
        case expired, notYetValid, untrustedIssuer, hostnameMismatch, pinMismatch, handshakeFailure
    }

    private let base: Base

    private init(_ base: Base) {
        self.base = base
    }

    /// A certificate of the chain is past its `notAfter` date.
    public static let expired = TLSFailureReason(.expired)
    /// A certificate of the chain is before its `notBefore` date.
    public static let notYetValid = TLSFailureReason(.notYetValid)
    /// The chain does not end at a trusted authority; a self-signed certificate is this too.
    public static let untrustedIssuer = TLSFailureReason(.untrustedIssuer)
    /// The certificate is trusted but names other hosts than the one connected to.
    public static let hostnameMismatch = TLSFailureReason(.hostnameMismatch)
    /// The certificate does not carry a pinned key or chain to a pinned authority.
    public static let pinMismatch = TLSFailureReason(.pinMismatch)
    /// The handshake failed for another reason (no common protocol or cipher, a peer that does
    /// not speak TLS, a certificate rejected for a reason not listed here).
    public static let handshakeFailure = TLSFailureReason(.handshakeFailure)

    /// The reason's stable name, such as `hostnameMismatch`, for logs and exit messages.
    public var name: String { self.base.rawValue }

    /// A few words for messages, such as "the certificate has expired".
    public var description: String {
        switch self.base {
        case .expired: return "the certificate has expired"
        case .notYetValid: return "the certificate is not yet valid"
        case .untrustedIssuer: return "the certificate is not issued by a trusted authority"
        case .hostnameMismatch: return "the certificate is for another host name"
        case .pinMismatch: return "the certificate does not match the host's pins"
        case .handshakeFailure: return "the TLS handshake failed"
        }
    }
}
