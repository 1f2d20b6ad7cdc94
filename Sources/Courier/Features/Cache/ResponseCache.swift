import Crypto
import Foundation
import HTTPTypes

/// One request's dealings with the cache: its key, the entry found and the decision taken.
struct CacheRun: Sendable {
    let policy: CachePolicy
    /// The store key; `nil` when the request cannot be cached (a streamed body, or a method the
    /// policy does not cache) — its response may still invalidate entries.
    let key: String?
    /// Where the entry found lives: the key itself, or the key of the variant the request selects.
    let entryKey: String?
    let url: String
    let partition: String
    let method: HTTPRequest.Method
    /// The request's header fields before any conditional fields were added.
    let requestHeaders: HTTPFields
    let entry: CacheEntry?
    let action: CacheAction
    let requestDate: Date
}

/// What a cache lookup or a finished exchange gives the client.
struct CacheOutcome: Sendable {
    var fetched: FetchedResponse
    var source: ResponseSource
    var age: TimeInterval?
    /// The store key, when the response came from the cache.
    var key: String?
}

/// Decoded values of cached responses, so repeated cache hits skip decoding.
///
/// A value is reused only for the same key, the same type and a byte-identical body, and only
/// for deterministic decodings of value types (a shared class instance could be mutated by one
/// caller under another's feet). At most `capacity` values are kept, least recently used out first.
final class DecodedValues: Sendable {
    private struct Slot {
        var body: Data
        var value: any Sendable
    }

    private struct Key: Hashable {
        var key: String
        var type: ObjectIdentifier
    }

    private struct State {
        var slots: [Key: Slot] = [:]
        var recency = LRUIndex<Key>()
    }

    private let state = Locked(State())
    let capacity: Int

    init(capacity: Int = 256) { self.capacity = capacity }

    /// The value decoded earlier from the same body, or a new one from `decode`, remembered.
    func value<Value: Sendable>(key: String, body: Data, decode: () throws -> Value) rethrows -> Value {
        guard !(Value.self is AnyObject.Type) else { return try decode() }
        let slotKey = Key(key: key, type: ObjectIdentifier(Value.self))
        let reused: Value? = self.state.withLock { state in
            guard let slot = state.slots[slotKey], slot.body == body, let value = slot.value as? Value else { return nil }
            state.recency.touch(slotKey)
            return value
        }
        if let reused { return reused }
        let value = try decode()
        self.state.withLock { state in
            state.slots[slotKey] = Slot(body: body, value: value)
            state.recency.insert(slotKey, cost: 1)
            while state.recency.count > self.capacity, let oldest = state.recency.removeOldest() {
                state.slots[oldest] = nil
            }
        }
        return value
    }
}

/// The client's cache: keys, lookups and storing, over a ``CacheStore`` and the pure ``CacheRules``.
struct ResponseCache: Sendable {
    let store: any CacheStore
    let configuration: CacheConfiguration

    /// The key of a request (method, normalised URL, body digest when there is a body,
    /// partition), or `nil` when its body is a stream that cannot be digested.
    static func key(for request: Request, url: String, partition: String) -> String? {
        var key = "\(request.head.method.rawValue) \(url)\npartition:\(partition)"
        if let body = request.body {
            guard let bytes = body.bytes else { return nil }
            key += "\nbody:\(SHA256.hex(bytes))"
        }
        return key
    }

    /// Looks the request up and decides what to do.
    func begin(_ request: Request, policy: CachePolicy) -> CacheRun {
        let url = DeduplicationKey.normalise(scheme: request.head.scheme, authority: request.head.authority, path: request.head.path)
        let partition = self.configuration.partition()
        let now = self.configuration.now()
        let method = request.head.method
        var key: String?
        var entryKey: String?
        var entry: CacheEntry?
        if CacheRules.handles(method, policy: policy), let requestKey = Self.key(for: request, url: url, partition: partition) {
            key = requestKey
            if policy.mode != .reload, policy.mode != .networkOnly {
                entryKey = requestKey
                entry = self.store.entry(forKey: requestKey)
                if let index = entry, index.isVariantIndex {
                    // The response varies: the request's values of the varying fields pick the variant.
                    let variantKey = Self.variantKey(requestKey, names: CacheRules.varyNames(index.headers) ?? [], requestHeaders: request.head.headerFields)
                    entryKey = variantKey
                    entry = self.store.entry(forKey: variantKey)
                }
            }
        }
        let action = key == nil ? .fetch : CacheRules.action(policy: policy, method: method, requestHeaders: request.head.headerFields, entry: entry, now: now)
        return CacheRun(
            policy: policy, key: key, entryKey: entryKey, url: url, partition: partition, method: method,
            requestHeaders: request.head.headerFields, entry: entry, action: action, requestDate: now
        )
    }

    /// The stored response a run decided to serve.
    func served(_ run: CacheRun) -> CacheOutcome? {
        guard case .serve(let age) = run.action, let entry = run.entry else { return nil }
        return CacheOutcome(fetched: Self.fetched(from: entry), source: .cache, age: age, key: run.entryKey)
    }

    /// The stored response for a request, however old (cache-then-network's first value).
    func anyStored(for request: Request, policy: CachePolicy) -> CacheOutcome? {
        var lenient = CachePolicy.cacheElseNetwork
        if policy.cachesAnyMethod { lenient = lenient.allowingAnyMethod() }
        return self.served(self.begin(request, policy: lenient))
    }

    /// Whether the run may store its response, so its body must be read.
    func mayStore(_ run: CacheRun) -> Bool {
        run.key != nil && run.policy.mode != .networkOnly
    }

    /// Handles a network response: a 304 answering a revalidation becomes the refreshed stored
    /// response; a storable response is stored; an unsafe method's success invalidates the URL.
    func finish(_ run: CacheRun, fetched: FetchedResponse) -> CacheOutcome {
        let now = self.configuration.now()
        let status = fetched.head.status.code
        if CacheRules.invalidates(method: run.method, status: status, policy: run.policy) {
            self.store.removeEntries(in: .url(run.url))
        }
        guard let key = run.key else { return CacheOutcome(fetched: fetched, source: .network) }
        if status == 304, case .revalidate = run.action, let entry = run.entry, let entryKey = run.entryKey {
            let refreshed = CacheRules.refreshed(entry, notModified: fetched.head.headerFields, requestDate: run.requestDate, responseDate: now)
            self.store.setEntry(refreshed, forKey: entryKey)
            var result = Self.fetched(from: refreshed)
            result.version = fetched.version
            return CacheOutcome(fetched: result, source: .revalidated, age: CacheRules.age(of: refreshed, now: now), key: entryKey)
        }
        if run.policy.mode != .networkOnly,
           CacheRules.mayStore(policy: run.policy, method: run.method, requestHeaders: run.requestHeaders, status: status, responseHeaders: fetched.head.headerFields) {
            let entry = CacheEntry(
                url: run.url, method: run.method.rawValue, partition: run.partition, status: status,
                headers: fetched.head.headerFields, body: fetched.body, requestDate: run.requestDate, responseDate: now,
                varyingFields: CacheRules.varyingFields(responseHeaders: fetched.head.headerFields, requestHeaders: run.requestHeaders)
            )
            let names = CacheRules.varyNames(fetched.head.headerFields) ?? []
            if names.isEmpty {
                self.store.setEntry(entry, forKey: key)
            } else {
                // An index under the key names the varying fields; each variant has its own key.
                let index = CacheEntry(
                    url: run.url, method: run.method.rawValue, partition: run.partition, status: CacheEntry.variantIndexStatus,
                    headers: [.vary: names.joined(separator: ", ")], body: Data(), requestDate: run.requestDate, responseDate: now
                )
                self.store.setEntry(index, forKey: key)
                self.store.setEntry(entry, forKey: Self.variantKey(key, names: names, requestHeaders: run.requestHeaders))
            }
        } else if run.entry != nil, let entryKey = run.entryKey, (200..<300).contains(status) || status == 404 || status == 410 {
            // A newer answer that may not be stored replaces nothing: drop the outdated entry.
            self.store.removeEntry(forKey: entryKey)
        }
        return CacheOutcome(fetched: fetched, source: .network)
    }

    /// The key of one variant: the key plus the request's values of the varying fields.
    static func variantKey(_ key: String, names: [String], requestHeaders: HTTPFields) -> String {
        let values = CacheRules.varyingFields(responseHeaders: [.vary: names.joined(separator: ",")], requestHeaders: requestHeaders)
        return key + names.sorted().map { "\nvary:\($0)=\(values[$0].flatMap { $0 } ?? "\u{0}")" }.joined()
    }

    private static func fetched(from entry: CacheEntry) -> FetchedResponse {
        var head = HTTPResponse(status: .init(code: entry.status))
        head.headerFields = entry.headers
        // No URL: parsing one costs more than the rest of a memory hit; the request's URL is used.
        return FetchedResponse(head: head, body: entry.body, version: .http1_1, url: nil)
    }
}
