import Crypto
import Foundation
import HTTPTypes

/// The identity of a logical request, taken before wire boxing and middleware: what makes two
/// calls "the same" for deduplication.
///
/// Method, URL (scheme and host in any letter case, an empty query the same as none), body
/// digest, the cache partition (two accounts never share a response), the endpoint's own
/// middleware (a per-endpoint token or signer makes a different request), the endpoint's wire
/// protocol and operation, the header fields (those of one name in order; fields of different
/// names in any order, as HTTP treats them), the accepted statuses and the endpoint's own retry
/// policy (the shared exchange retries as its first caller's endpoint says), and whether it
/// leaves the client's home (where middleware sends credentials only to home).
///
/// Made once per request from the parts the request already holds (no URL or header text is
/// built) and hashed once, when made: every dictionary lookup of the deduplicator hashes one
/// integer and the cache plan (RFC-less bookkeeping, usually empty). The parts sit in one shared
/// object, so the exchange that carries the key stays small to copy.
struct LogicalKey: Hashable, Sendable {
    /// The parts that never change once the key is made, and their hash.
    private final class Parts: Sendable {
        let method: HTTPRequest.Method
        /// Lower-cased.
        let scheme: String
        /// The per-host form (``Authority/hostKey(scheme:authority:)``): the host lower-cased,
        /// the scheme's default port left out.
        let authority: String
        let path: Substring
        let bodyDigest: SHA256.Digest?
        let partition: String
        let endpointMiddleware: [MiddlewareIdentity]
        let wire: String
        /// The fields. Compared as `HTTPFields` compares them: for each name, the same values in
        /// the same order; fields of different names may be interleaved differently (RFC 9110 §5.3).
        let headers: HTTPFields
        let acceptedStatuses: Range<Int>
        let retryPolicy: RetryPolicy?
        let custom: String?
        /// Whether the request leaves the client's home (``Request/leavesHome``): middleware such
        /// as the OAuth2 authenticator sends credentials only to home, so two requests that differ
        /// in it are not the same request.
        let leavesHome: Bool
        let hash: Int

        init(
            method: HTTPRequest.Method, scheme: String, authority: String, path: Substring, bodyDigest: SHA256.Digest?,
            partition: String, endpointMiddleware: [MiddlewareIdentity], wire: String, headers: HTTPFields,
            acceptedStatuses: Range<Int>, retryPolicy: RetryPolicy?, custom: String?, leavesHome: Bool
        ) {
            self.method = method
            self.scheme = scheme
            self.authority = authority
            self.path = path
            self.bodyDigest = bodyDigest
            self.partition = partition
            self.endpointMiddleware = endpointMiddleware
            self.wire = wire
            self.headers = headers
            self.acceptedStatuses = acceptedStatuses
            self.retryPolicy = retryPolicy
            self.custom = custom
            self.leavesHome = leavesHome
            // The hash takes the parts that tell requests in flight apart (the path and what is
            // sent to it); equality compares every part. Keys that differ only in the rest (the
            // partition, the wire protocol, the fields) share a hash, and stay different keys.
            // The method and the host are left out as well: nearly every request in flight is a GET
            // to one of a few hosts, so they would cost two more strings to hash and tell little apart.
            var hasher = Hasher()
            hasher.combine(path)
            hasher.combine(bodyDigest)
            hasher.combine(headers.count)
            hasher.combine(custom)
            self.hash = hasher.finalize()
        }

        func isSame(as other: Parts) -> Bool {
            self === other
                || (self.hash == other.hash && self.method == other.method && self.path == other.path
                    && self.authority == other.authority && self.scheme == other.scheme && self.bodyDigest == other.bodyDigest
                    && self.partition == other.partition && self.endpointMiddleware == other.endpointMiddleware
                    && self.wire == other.wire && self.acceptedStatuses == other.acceptedStatuses && self.custom == other.custom
                    && self.retryPolicy == other.retryPolicy && self.leavesHome == other.leavesHome && self.headers == other.headers)
        }
    }

    private let parts: Parts

    /// The scheduler's per-host key of the request (``Authority/slotKey(hostKey:scheme:)``,
    /// the scheme lower-cased, `https` when there is none): the host key is made once, for both.
    var hostKey: String { Authority.slotKey(hostKey: self.parts.authority, scheme: self.parts.scheme) }

    /// The per-host key of a request's head, as ``hostKey`` makes it.
    static func hostKey(of head: HTTPRequest) -> String {
        let scheme = Self.scheme(of: head)
        return Authority.slotKey(hostKey: Authority.hostKey(scheme: scheme, authority: head.authority ?? ""), scheme: scheme)
    }

    /// The request's scheme, lower-cased (`https` when it has none).
    private static func scheme(of head: HTTPRequest) -> String {
        let written = head.scheme ?? "https"
        return written == "https" || written == "http" ? written : written.lowercased()
    }
    /// The fields the cache lookup added (validators, a `Range` for the missing bytes): callers
    /// whose requests the cache changed differently never share one exchange.
    var cachePlan = ""

    /// The key of a logical request; `nil` when it must never be shared: its body is a stream
    /// (it cannot be digested without being consumed), or it has endpoint middleware whose
    /// identity cannot be told (a value that is not `Hashable`, such as a closure).
    init?(request: Request, endpoint: EndpointDescription, partition: String, wire: String, ignoredHeaders: [HTTPField.Name]) {
        var bodyDigest: SHA256.Digest?
        if let body = request.body {
            guard let bytes = body.bytes else { return nil }
            bodyDigest = SHA256.hash(data: bytes)
        }
        var middleware: [MiddlewareIdentity] = []
        if !endpoint.middleware.isEmpty {
            middleware.reserveCapacity(endpoint.middleware.count)
            for item in endpoint.middleware {
                guard let identity = Self.identity(of: item) else { return nil }
                middleware.append(identity)
            }
        }
        // The request's own fields, shared, not copied: removing a field it does not have
        // changes nothing.
        var headers = request.head.headerFields
        for name in ignoredHeaders { headers[name] = nil }
        // `/a?` and `/a` name the same resource: an empty query is dropped. A `?` that ends a
        // query (`/search?q=what?`: RFC 3986 §3.4 lets a query hold one) is part of it.
        var path = Substring(request.head.path ?? "/")
        if path.utf8.last == UInt8(ascii: "?"), path.utf8.firstIndex(of: UInt8(ascii: "?")) == path.utf8.index(before: path.utf8.endIndex) {
            path = path.dropLast()
        }
        let custom: String?
        if case .key(let key) = endpoint.deduplication.mode { custom = key } else { custom = nil }
        let scheme = Self.scheme(of: request.head)
        self.parts = Parts(
            method: request.head.method, scheme: scheme,
            authority: Authority.hostKey(scheme: scheme, authority: request.head.authority ?? ""), path: path,
            bodyDigest: bodyDigest, partition: partition, endpointMiddleware: middleware, wire: wire, headers: headers,
            acceptedStatuses: endpoint.acceptedStatuses, retryPolicy: endpoint.retryPolicy, custom: custom, leavesHome: request.leavesHome)
    }

    static func == (lhs: LogicalKey, rhs: LogicalKey) -> Bool {
        lhs.parts.isSame(as: rhs.parts) && lhs.cachePlan == rhs.cachePlan
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(self.parts.hash)
        // Usually empty, and then left out: equal keys still hash alike.
        if !self.cachePlan.isEmpty { hasher.combine(self.cachePlan) }
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

    /// `scheme://authority/path?query` with the scheme and host lower-cased (RFC 3986 §6.2.2.1),
    /// the scheme's default port left out (§6.2.3) and an empty query dropped. The query stays in its order: `?a=1&b=2` and `?b=2&a=1` are
    /// two URIs (RFC 9111 §2 keys on the target URI) that a server may answer differently.
    /// (Query items given as a dictionary are sorted when the endpoint is made.)
    static func normalise(scheme: String?, authority: String?, path: String?) -> String {
        let target = path ?? "/"
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let scheme = (scheme ?? "https").lowercased()
        var url = "\(scheme)://\(Authority.hostKey(scheme: scheme, authority: authority ?? ""))\(parts[0])"
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
