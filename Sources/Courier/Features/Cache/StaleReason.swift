import Foundation

/// Why a stored response past its freshness answered a request (its source is
/// ``ResponseSource/stale``).
///
/// Compared by value; more reasons may be added in later versions, so a `switch` over them needs
/// a `default`.
public struct StaleReason: Sendable, Hashable, CustomStringConvertible {
    enum Code: UInt8, Sendable {
        case whileRevalidating
        case originError
        case disconnected
    }

    let code: Code

    init(_ code: Code) { self.code = code }

    /// Served while it is revalidated in the background (`stale-while-revalidate`, RFC 5861 §3).
    public static let whileRevalidating = StaleReason(.whileRevalidating)
    /// The origin answered 500, 502, 503 or 504, or failed, within a `stale-if-error` window
    /// (RFC 5861 §4).
    public static let originError = StaleReason(.originError)
    /// The origin could not be reached at all — the connection refused, reset or closed before
    /// any byte of a response, a name that does not resolve, no route — and nothing forbade a
    /// stale answer (RFC 9111 §4.2.4; ``CachePolicy/servingStaleWhenDisconnected(_:)``).
    public static let disconnected = StaleReason(.disconnected)

    /// The reason's name: `while-revalidating`, `origin-error` or `disconnected`.
    public var description: String {
        switch self.code {
        case .whileRevalidating: "while-revalidating"
        case .originError: "origin-error"
        case .disconnected: "disconnected"
        }
    }
}
