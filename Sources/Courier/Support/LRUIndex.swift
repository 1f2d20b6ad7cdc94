/// Recency order and total cost of a set of keys: the bookkeeping of an LRU cache.
///
/// All operations are O(1): the keys form a doubly linked list threaded through a dictionary.
struct LRUIndex<Key: Hashable & Sendable>: Sendable {
    private struct Node: Sendable {
        var cost: Int
        var older: Key?
        var newer: Key?
    }

    private var nodes: [Key: Node] = [:]
    private var oldest: Key?
    private var newest: Key?
    /// The sum of the costs of all keys.
    private(set) var totalCost = 0

    var count: Int { self.nodes.count }

    /// Adds `key` as the most recently used, or updates its cost and makes it the most recent.
    mutating func insert(_ key: Key, cost: Int) {
        self.remove(key)
        self.nodes[key] = Node(cost: cost, older: self.newest, newer: nil)
        if let newest = self.newest { self.nodes[newest]?.newer = key }
        self.newest = key
        if self.oldest == nil { self.oldest = key }
        self.totalCost += cost
    }

    /// Makes `key` the most recently used.
    mutating func touch(_ key: Key) {
        guard let node = self.nodes[key], self.newest != key else { return }
        self.insert(key, cost: node.cost)
    }

    /// Removes `key`, if present.
    mutating func remove(_ key: Key) {
        guard let node = self.nodes.removeValue(forKey: key) else { return }
        if let older = node.older { self.nodes[older]?.newer = node.newer } else { self.oldest = node.newer }
        if let newer = node.newer { self.nodes[newer]?.older = node.older } else { self.newest = node.older }
        self.totalCost -= node.cost
    }

    /// Removes and returns the least recently used key.
    mutating func removeOldest() -> Key? {
        guard let key = self.oldest else { return nil }
        self.remove(key)
        return key
    }
}
