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
