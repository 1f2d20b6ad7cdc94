import Foundation

/// How an endpoint uses the client's response cache.
///
/// ```swift
/// var endpoint = NewsAPI.list(page: 1)
/// endpoint.cachePolicy = .cacheFor(.seconds(300))      // an app-chosen lifetime
/// endpoint.cachePolicy = .http                          // what the server's headers say (the default)
/// endpoint.cachePolicy = .cacheFor(.seconds(60)).allowingAnyMethod()   // a cacheable POST search
/// ```
///
/// For cache-then-network (the stored value at once, then the fresh one) call
/// ``Client/updates(_:)``.
public struct CachePolicy: Sendable, Hashable {
    enum Mode: Sendable, Hashable {
        case networkOnly
        case cacheElseNetwork
        case cacheFor(Duration)
        case http
        /// Always fetch, then store what may be stored (the network half of cache-then-network).
        case reload
    }

    let mode: Mode
    /// Whether methods other than GET and HEAD are cached too (the key then includes the body digest).
    public private(set) var cachesAnyMethod: Bool = false

    init(mode: Mode) { self.mode = mode }

    /// The cache is neither read nor written (unsafe methods still invalidate stored entries).
    public static let networkOnly = CachePolicy(mode: .networkOnly)
    /// A stored response, however old, is used; the network is asked only when nothing is stored.
    public static let cacheElseNetwork = CachePolicy(mode: .cacheElseNetwork)
    /// A response stored less than `lifetime` ago is used; an older one is fetched again
    /// (conditionally when it has a validator) and replaced. The server's caching headers are
    /// ignored, except `no-store` and `Vary`.
    public static func cacheFor(_ lifetime: Duration) -> CachePolicy { CachePolicy(mode: .cacheFor(lifetime)) }
    /// HTTP caching as a private cache (RFC 9111): freshness from `Cache-Control` and `Expires`,
    /// `Age`, heuristic freshness from `Last-Modified` where allowed, revalidation with
    /// `If-None-Match` / `If-Modified-Since`, `Vary`, and invalidation by unsafe methods.
    public static let http = CachePolicy(mode: .http)

    /// The same policy, applied to every method: POST and other methods are then cached too,
    /// keyed by their body's digest, and do not invalidate the URL's entries.
    public func allowingAnyMethod() -> CachePolicy {
        var policy = self
        policy.cachesAnyMethod = true
        return policy
    }

    /// How long past its freshness a stored response may be served while it is revalidated in
    /// the background, overriding the response's `stale-while-revalidate`; `nil`: the response's.
    public private(set) var staleWhileRevalidate: Duration?
    /// How long past its freshness a stored response may be served when the origin answers
    /// 500, 502, 503 or 504 or cannot be reached, overriding `stale-if-error`; `nil`: the response's.
    public private(set) var staleIfError: Duration?
    /// The freshness given to a response without explicit expiry (RFC 9111 §4.2.2).
    public private(set) var heuristic: HeuristicFreshness = .standard
    /// Whether a stored response past its freshness answers when the origin cannot be reached
    /// at all (RFC 9111 §4.2.4); on by default. See ``servingStaleWhenDisconnected(_:)``.
    public private(set) var servesStaleWhenDisconnected = true

    /// The same policy, serving stale responses for these windows whatever the responses say
    /// (RFC 5861): `.zero` turns a behaviour off, `nil` keeps the response's directive.
    ///
    /// Under ``http`` the response's `must-revalidate` or `no-cache`, or the request's
    /// `no-cache`, still forbid serving stale (RFC 9111 §4.2.4). Under ``cacheFor(_:)`` the
    /// windows count from the end of the app-chosen lifetime, and only these overrides apply.
    public func servingStale(whileRevalidating: Duration? = nil, ifError: Duration? = nil) -> CachePolicy {
        var policy = self
        policy.staleWhileRevalidate = whileRevalidating
        policy.staleIfError = ifError
        return policy
    }

    /// The same policy, serving (or not) a stored response past its freshness when the origin
    /// cannot be reached at all: the connection refused, reset or closed before any byte of a
    /// response, a name that does not resolve, no route. RFC 9111 §4.2.4 lets a disconnected
    /// cache do so; it is on by default, the choice for an app's private cache that should keep
    /// working offline.
    ///
    /// The answer's source is ``ResponseSource/stale`` with ``StaleReason/disconnected``, its `Age`
    /// field says how old it is, and monitors see ``EventMonitor/cacheHit(_:source:age:)``. An
    /// origin that answers — even with an error status — is not disconnected (that is
    /// `stale-if-error`'s case, ``servingStale(whileRevalidating:ifError:)``), nor is a timeout.
    ///
    /// Under ``http`` nothing stale is served when the stored response says `must-revalidate` or
    /// `no-cache`, or when the request says `no-cache` (or `Pragma: no-cache`), `no-store`,
    /// `max-age` or `min-fresh` without `max-stale`, or a `max-stale` the staleness exceeds.
    /// `proxy-revalidate` and `s-maxage` bind shared caches only; this cache is private. Under
    /// ``cacheFor(_:)`` only the request's `no-cache` and `no-store` forbid it.
    /// ``cacheElseNetwork`` serves what is stored anyway; ``networkOnly`` never does.
    ///
    /// Which failures count is the transport's to say: `AsyncHTTPClientTransport` and
    /// ``URLSessionTransport`` mark the ones above (``CourierError/couldNotConnect``); a transport
    /// of your own throws ``CourierError/connectionFailed(_:underlying:)`` for them, and its
    /// other failures are never read as disconnected. The stored response must be one the request could have been
    /// answered with: its `Vary` matched, and the request without conditional fields of its own.
    public func servingStaleWhenDisconnected(_ allowed: Bool) -> CachePolicy {
        var policy = self
        policy.servesStaleWhenDisconnected = allowed
        return policy
    }

    /// The same policy with another heuristic freshness rule.
    public func heuristicFreshness(_ rule: HeuristicFreshness) -> CachePolicy {
        var policy = self
        policy.heuristic = rule
        return policy
    }
}

/// The freshness lifetime a cache gives a response that states none (RFC 9111 §4.2.2): a
/// fraction of the time since its `Last-Modified`, up to a limit.
///
/// Only responses with a status code the RFC calls heuristically cacheable (200, 203, 204, 206,
/// 300, 301, 308, 404, 405, 410, 414, 501) or marked `public` get one.
public struct HeuristicFreshness: Sendable, Hashable {
    /// The fraction of the time between `Last-Modified` and `Date`.
    public var fraction: Double
    /// The longest lifetime given.
    public var limit: Duration

    /// A rule: `fraction` of the time since `Last-Modified`, at most `limit`.
    public init(fraction: Double, limit: Duration) {
        self.fraction = fraction.isNaN ? 0 : min(max(fraction, 0), 1)
        self.limit = max(limit, .zero)
    }

    /// 10% of the time since `Last-Modified`, at most a day (the RFC's suggestion).
    public static let standard = HeuristicFreshness(fraction: 0.1, limit: .seconds(86_400))
    /// No heuristic freshness: a response without explicit expiry is stale at once.
    public static let none = HeuristicFreshness(fraction: 0, limit: .zero)
}

/// The client's response cache: where responses are stored, the default policy and the partition.
public struct CacheConfiguration: Sendable {
    /// Where responses are kept; `nil` turns caching off.
    public var store: (any CacheStore)?
    /// The policy of endpoints that set none.
    public var policy: CachePolicy
    /// The partition new entries are stored under and lookups read from, asked for each request:
    /// return the signed-in account, so one account never reads another's responses.
    public var partition: @Sendable () -> String
    /// The wall clock ages and lifetimes are measured with (replaceable in tests).
    public var now: @Sendable () -> Date

    /// Creates a configuration.
    public init(
        store: (any CacheStore)? = nil,
        policy: CachePolicy = .http,
        partition: @escaping @Sendable () -> String = { "" },
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.store = store
        self.policy = policy
        self.partition = partition
        self.now = now
    }
}
