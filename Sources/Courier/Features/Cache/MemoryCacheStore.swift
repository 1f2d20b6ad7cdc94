import Foundation

/// A cache store in memory, bounded by bytes: when full, the least recently used entries go.
public final class MemoryCacheStore: CacheStore {
    private struct State {
        var entries: [String: CacheEntry] = [:]
        var recency = LRUIndex<String>()
    }

    /// The most bytes (bodies plus header fields) the store holds.
    public let capacity: Int
    private let state = Locked(State())

    /// Creates an empty store holding at most `capacity` bytes.
    public init(capacity: Int = 16 * 1024 * 1024) {
        self.capacity = capacity
    }

    /// The bytes held now.
    public var size: Int { self.state.withLock { $0.recency.totalCost } }

    /// The number of entries held now.
    public var count: Int { self.state.withLock { $0.entries.count } }

    /// The entry stored under `key`, or `nil`; reading it makes it the most recently used.
    public func entry(forKey key: String) -> CacheEntry? {
        self.state.withLock { state in
            guard let entry = state.entries[key] else { return nil }
            state.recency.touch(key)
            return entry
        }
    }

    /// Stores `entry` under `key`, then evicts the least recently used entries past the capacity.
    public func setEntry(_ entry: CacheEntry, forKey key: String) {
        let cost = entry.cost
        self.state.withLock { state in
            guard cost <= self.capacity else {
                state.entries[key] = nil
                state.recency.remove(key)
                return
            }
            state.entries[key] = entry
            state.recency.insert(key, cost: cost)
            while state.recency.totalCost > self.capacity, let oldest = state.recency.removeOldest() {
                state.entries[oldest] = nil
            }
        }
    }

    /// Removes the entry under `key`, if any.
    public func removeEntry(forKey key: String) {
        self.state.withLock { state in
            state.entries[key] = nil
            state.recency.remove(key)
        }
    }

    /// Removes the entries in `scope`.
    public func removeEntries(in scope: CacheScope) {
        self.state.withLock { state in
            for (key, entry) in state.entries where scope.contains(url: entry.url, partition: entry.partition) {
                state.entries[key] = nil
                state.recency.remove(key)
            }
        }
    }
}

extension CacheScope {
    /// Whether an entry with this URL and partition is in the scope.
    func contains(url: String, partition: String) -> Bool {
        switch self {
        case .all: return true
        case .partition(let name): return partition == name
        case .url(let target): return url == target
        }
    }
}
