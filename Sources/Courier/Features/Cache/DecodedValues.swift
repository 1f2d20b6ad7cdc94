import Foundation
import HTTPTypes

/// Decoded values of cached responses, so repeated cache hits skip decoding.
///
/// A value is reused only for the same key, the same type and a byte-identical body, and only
/// for deterministic decodings of value types (a shared class instance could be mutated by one
/// caller under another's feet). Bounded twice, least recently used out first: at most
/// `capacity` values, and bodies of at most `maxBytes` in total (each entry is charged its body's
/// size, which it keeps alive even after the cache evicts the response). A body larger than a
/// quarter of `maxBytes` is decoded every time rather than pushing out everything else.
package final class DecodedValues: Sendable {
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
    /// The most values kept.
    package let capacity: Int
    /// The most body bytes kept, summed over the values.
    package let maxBytes: Int

    package init(capacity: Int = 256, maxBytes: Int = 8 << 20) {
        self.capacity = max(0, capacity)
        self.maxBytes = max(0, maxBytes)
    }

    /// How many values, and how many body bytes, are kept now.
    package var usage: (count: Int, bytes: Int) {
        self.state.withLock { ($0.recency.count, $0.recency.totalCost) }
    }

    /// The value decoded earlier from the same body, or a new one from `decode`, remembered.
    package func value<Value: Sendable>(key: String, body: Data, decode: () throws -> Value) rethrows -> Value {
        guard !(Value.self is AnyObject.Type) else { return try decode() }
        let slotKey = Key(key: key, type: ObjectIdentifier(Value.self))
        let reused: Value? = self.state.withLock { state in
            guard let slot = state.slots[slotKey], slot.body == body, let value = slot.value as? Value else { return nil }
            state.recency.touch(slotKey)
            return value
        }
        if let reused { return reused }
        let value = try decode()
        guard body.count <= self.maxBytes / 4, self.capacity > 0 else { return value }
        self.state.withLock { state in
            state.slots[slotKey] = Slot(body: body, value: value)
            state.recency.insert(slotKey, cost: body.count)
            while state.recency.count > self.capacity || state.recency.totalCost > self.maxBytes, let oldest = state.recency.removeOldest()
            {
                state.slots[oldest] = nil
            }
        }
        return value
    }
}
