import Crypto
import Foundation
import HTTPTypes

/// The identity of a logical request, taken before wire boxing and middleware: what makes two
/// calls "the same" for deduplication.
///
/// Method, URL (query order normalised), body digest, the cache partition (two accounts never
/// share a response), the endpoint's own middleware (a per-endpoint token or signer makes a
/// different request), the endpoint's wire protocol and operation, and the header fields that
/// change a response.
struct LogicalKey: Hashable, Sendable {
    let method: String
    let url: String
    let bodyDigest: Data?
    let partition: String
    let endpointMiddleware: [MiddlewareIdentity]
    let wire: String
    let headers: [String]
    let acceptedStatuses: Range<Int>
    let custom: String?
    /// The fields the cache lookup added (validators, a `Range` for the missing bytes): callers
    /// whose requests the cache changed differently never share one exchange.
    var cachePlan = ""

    /// The key of a logical request; `nil` when it must never be shared: its body is a stream
    /// (it cannot be digested without being consumed), or it has endpoint middleware whose
    /// identity cannot be told (a value that is not `Hashable`, such as a closure).
    init?(request: Request, endpoint: EndpointDescription, partition: String, wire: String, ignoredHeaders: [HTTPField.Name]) {
        self.method = request.head.method.rawValue
        self.url = LogicalKey.normalise(scheme: request.head.scheme, authority: request.head.authority, path: request.head.path)
        if let body = request.body {
            guard let bytes = body.bytes else { return nil }
            self.bodyDigest = Data(SHA256.hash(data: bytes))
        } else {
            self.bodyDigest = nil
        }
        self.partition = partition
        var middleware: [MiddlewareIdentity] = []
        for item in endpoint.middleware {
            guard let identity = Self.identity(of: item) else { return nil }
            middleware.append(identity)
        }
        self.endpointMiddleware = middleware
        self.wire = wire
        var headers: [String] = []
        for field in request.head.headerFields where !ignoredHeaders.contains(field.name) {
            headers.append("\(field.name.canonicalName):\(field.value)")
        }
        self.headers = headers
        self.acceptedStatuses = endpoint.acceptedStatuses
        if case .key(let key) = endpoint.deduplication.mode { self.custom = key } else { self.custom = nil }
    }

    /// A middleware's identity: the object for a class instance, the value for a `Hashable`
    /// value; `nil` for any other value (two closures cannot be told apart).
    static func identity(of middleware: any Middleware) -> MiddlewareIdentity? {
        if type(of: middleware) is AnyClass {
            return MiddlewareIdentity(value: AnyHashable(ObjectIdentifier(middleware as AnyObject)))
        }
        if let hashable = middleware as? any Hashable {
            return MiddlewareIdentity(value: AnyHashable(hashable))
        }
        return nil
    }

    /// `scheme://authority/path?query` with the scheme and host lower-cased (RFC 3986 §6.2.2.1)
    /// and an empty query dropped. The query stays in its order: `?a=1&b=2` and `?b=2&a=1` are
    /// two URIs (RFC 9111 §2 keys on the target URI) that a server may answer differently.
    /// (Query items given as a dictionary are sorted when the endpoint is made.)
    static func normalise(scheme: String?, authority: String?, path: String?) -> String {
        let target = path ?? "/"
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var url = "\((scheme ?? "https").lowercased())://\((authority ?? "").lowercased())\(parts[0])"
        if parts.count == 2, !parts[1].isEmpty {
            url += "?" + parts[1]
        }
        return url
    }
}

/// A middleware's identity in a ``LogicalKey``.
///
/// Unchecked: the value is an `ObjectIdentifier` or a `Hashable` middleware, and every
/// middleware is `Sendable`.
struct MiddlewareIdentity: Hashable, @unchecked Sendable {
    let value: AnyHashable
}
