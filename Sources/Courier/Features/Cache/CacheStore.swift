import Foundation
import HTTPTypes

/// One stored response with what is needed to judge its freshness and to revalidate it.
public struct CacheEntry: Sendable, Equatable {
    /// The normalised URL the response answered (used to invalidate entries).
    public var url: String
    /// The request method.
    public var method: String
    /// The partition the entry belongs to.
    public var partition: String
    /// The response status code.
    public var status: Int
    /// The response header fields.
    public var headers: HTTPFields
    /// The response body, as received (before any wire-protocol unboxing or decoding).
    public var body: Data
    /// When the request that produced (or last revalidated) the response was sent.
    public var requestDate: Date
    /// When its response arrived.
    public var responseDate: Date
    /// What the request had in the header fields the response's `Vary` names (lower-cased
    /// names): the SHA-256 digest of each value (`sha256:` and hexadecimal digits), never the
    /// value, which may be a credential; an absent field is stored as `nil`.
    public var varyingFields: [String: String?]
    /// At most how long, in seconds, the response may be served for ``url`` without asking the
    /// server again, whatever its own freshness: set when it was reached through a redirect that
    /// allowed less (a `302` without freshness of its own allows none); below zero (or not a
    /// number): none, and no stale answer either, not even when the origin cannot be reached (a
    /// redirect said `no-cache` or `no-store`); `nil`: no limit but the response's own. Applies
    /// under ``CachePolicy/http``.
    public var freshnessLimit: TimeInterval?

    /// Creates an entry.
    public init(
        url: String, method: String, partition: String, status: Int, headers: HTTPFields, body: Data,
        requestDate: Date, responseDate: Date, varyingFields: [String: String?] = [:]
    ) {
        self.url = url
        self.method = method
        self.partition = partition
        self.status = status
        self.headers = headers
        self.body = body
        self.requestDate = requestDate
        self.responseDate = responseDate
        self.varyingFields = varyingFields
    }

    /// The status of an index entry: a response that varies is stored once per variant, and the
    /// entry under the request's own key only names the fields it varies on (in `Vary`).
    package static let variantIndexStatus = 0

    /// Whether this entry is a variant index rather than a response.
    package var isVariantIndex: Bool { self.status == Self.variantIndexStatus }

    /// The bytes the entry occupies, roughly: its body plus its header fields.
    public var cost: Int {
        self.headers.reduce(self.body.count + self.url.utf8.count + 64) { $0 + $1.name.rawName.utf8.count + $1.value.utf8.count + 4 }
    }
}

/// Which entries to remove.
public enum CacheScope: Sendable, Hashable {
    /// Every entry.
    case all
    /// The entries of one partition (a signed-out account).
    case partition(String)
    /// The entries for one normalised URL, any method and partition.
    case url(String)
}

/// Where a client keeps cached responses: in memory, on disk, or an app's own store.
///
/// Methods are synchronous and are called from any task; they must be safe to call
/// concurrently. A store never throws: an entry it cannot read is a miss, one it cannot write is
/// not stored. An entry it hands back with a status no response can have (outside 100...999) is
/// taken for a miss. A store keeps every field of an entry: one that drops
/// ``CacheEntry/freshnessLimit`` serves a response reached through a redirect for as long as
/// the response's own freshness.
public protocol CacheStore: Sendable {
    /// The entry stored under `key`, or `nil`.
    func entry(forKey key: String) -> CacheEntry?
    /// Stores `entry` under `key`, replacing any entry there.
    func setEntry(_ entry: CacheEntry, forKey key: String)
    /// Removes the entry under `key`, if any.
    func removeEntry(forKey key: String)
    /// Removes the entries in `scope`.
    func removeEntries(in scope: CacheScope)
}
