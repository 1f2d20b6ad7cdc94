import Foundation
import HTTPTypes

/// Whether identical in-flight requests of an endpoint share one network request.
public struct Deduplication: Sendable, Equatable {
    enum Mode: Sendable, Equatable {
        case automatic
        case disabled
        case key(String)
    }

    let mode: Mode

    /// On for GET and HEAD, off for other methods (the default).
    public static let automatic = Deduplication(mode: .automatic)
    /// Never shared: every call reaches the wire.
    public static let disabled = Deduplication(mode: .disabled)
    /// Shared for any method, with `key` added to the request's identity.
    ///
    /// Use it to opt a POST in (a search, a GraphQL query), or to tell apart requests that differ
    /// only by something outside the URL, headers and body.
    public static func key(_ key: String) -> Deduplication { Deduplication(mode: .key(key)) }
}

/// The client-wide deduplication settings.
public struct DeduplicationConfiguration: Sendable, Equatable {
    /// Whether deduplication runs at all.
    public var isEnabled: Bool
    /// Header fields left out of a request's identity. Every other field of the *logical*
    /// request (the endpoint's and the client's default fields, before middleware adds tokens or
    /// signatures) counts: two requests that differ in any of them are never shared.
    public var ignoredHeaders: [HTTPField.Name]

    /// Creates settings.
    public init(isEnabled: Bool = true, ignoredHeaders: [HTTPField.Name] = []) {
        self.isEnabled = isEnabled
        self.ignoredHeaders = ignoredHeaders
    }
}
