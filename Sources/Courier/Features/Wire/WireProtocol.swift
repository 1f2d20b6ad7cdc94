import Foundation
import HTTPTypes

/// How an endpoint's request is boxed for the wire and its answer unboxed: REST, JSON-RPC 2.0,
/// a code/msg/data envelope, or your own.
///
/// `box` runs after deduplication and the cache have used the logical request, before
/// middleware, on the body as the endpoint encoded it (compression and upload progress apply to
/// what it boxed); `unbox` runs on the response body before it is decoded, and may throw a
/// protocol-level error (an RPC error object, a business code). For a notification
/// (``WireCall/isNotification``), `unbox` sees a body only when the server sent one, and only
/// its `rpc` and `business` errors count. Write your own by conforming:
///
/// ```swift
/// struct SignedEnvelope: WireProtocol {
///     func box(_ request: inout Request, call: WireCall) throws { … wrap request.body … }
///     func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data { … verify, return payload … }
/// }
/// ```
public protocol WireProtocol: Sendable {
    /// Rewrites the request for the wire.
    func box(_ request: inout Request, call: WireCall) throws
    /// Returns the payload to decode, or throws the protocol's error.
    func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data
    /// Whether the unboxed payload may be stored by the response cache (`false` when unboxing
    /// reveals what must not rest on disk, such as decrypted fields). `true` by default.
    var payloadMayBeCached: Bool { get }
    /// What tells this protocol's settings apart, as text: part of the keys by which
    /// deduplication shares one answer and the cache stores one, so two settings that unbox the
    /// same bytes differently (other success codes, another key) never share an answer. The
    /// type's name by default; a protocol with settings that change `box` or `unbox` includes
    /// them (never a secret itself: the text may be stored on disk).
    var wireIdentity: String { get }
}

extension WireProtocol {
    /// Payloads may be cached.
    public var payloadMayBeCached: Bool { true }
    /// The type's name.
    public var wireIdentity: String { "\(type(of: self))" }
}

/// What a wire protocol knows about the call it boxes.
public struct WireCall: Sendable {
    /// The operation's name (the endpoint's `operation`, or its name).
    public var operation: String
    /// Whether no response payload is expected (a JSON-RPC notification).
    public var isNotification: Bool
    /// An identifier for the call, unique within the client.
    public var id: Int

    package init(operation: String, isNotification: Bool, id: Int) {
        self.operation = operation
        self.isNotification = isNotification
        self.id = id
    }
}

/// REST: the request and response pass through unchanged.
public struct RESTProtocol: WireProtocol {
    /// Creates the protocol.
    public init() {}
    /// Leaves the request as it is.
    public func box(_ request: inout Request, call: WireCall) throws {}
    /// Returns the body as it is.
    public func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data { body }
}

extension WireProtocol where Self == RESTProtocol {
    /// REST: pass-through.
    public static var rest: RESTProtocol { RESTProtocol() }
}
