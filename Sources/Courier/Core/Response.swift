import Foundation
import HTTPTypes

/// A decoded value together with what the server said about it.
public struct Response<Value>: Sendable where Value: Sendable {
    /// The decoded value.
    public var value: Value
    /// The response status.
    public var status: HTTPResponse.Status
    /// The response header fields.
    public var headers: HTTPFields
    /// The protocol version the response arrived over.
    public var version: HTTPVersion
    /// Time from the start of the request to the decoded value.
    public var duration: Duration
    /// The final URL, after redirects.
    public var url: URL? { URL(string: self.urlString) }
    /// The final URL as text.
    public var urlString: String
    /// The number of body bytes received.
    public var byteCount: Int
    /// Where the response came from.
    public var source: ResponseSource
    /// How old the response is when it came from the cache (RFC 9111 age); `nil` from the network.
    public var age: Duration?
    /// Why a stored response past its freshness answered (``source`` is ``ResponseSource/stale``);
    /// `nil` otherwise.
    public var staleReason: StaleReason? = nil
}

/// Where a response came from.
public enum ResponseSource: String, Sendable, Hashable {
    /// This request's own network exchange.
    case network
    /// Another identical request's network exchange, shared by deduplication.
    case coalesced
    /// The cache, without asking the server.
    case cache
    /// The cache, after the server confirmed it is current (`304 Not Modified`).
    case revalidated
    /// The cache, past the response's freshness: served while it is revalidated in the
    /// background (`stale-while-revalidate`), because the server failed (`stale-if-error`) or
    /// because it could not be reached (``StaleReason/disconnected``); the response's
    /// `staleReason` says which.
    case stale
}
