import Foundation
import HTTPTypes

/// Stage 5: the payload (after unboxing) becomes the endpoint's value — `Decodable`, `Data`,
/// `String`, nothing, or a reformer closure — for each caller on its own (deduplicated callers
/// share bytes, not values). Fails with `decoding`, naming the type, the coding path and a body
/// excerpt. Streamed exchanges have no value to decode.
///
/// Values decoded from a cache hit are reused for deterministic decodings of value types.
struct DecodeStage: PipelineStage {
    let decoder: JSONDecoder
    let values: DecodedValues
    let events: EventHub
    var name: String { "decode" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let outcome = try await next(exchange)
        guard !exchange.mode.isStream else { return outcome }
        return try self.decoded(outcome, exchange)
    }

    /// The outcome with its value decoded (synchronous and apart from `run`, so its temporaries
    /// stay out of the async frame).
    @inline(never)
    private func decoded(_ outcome: consuming Outcome, _ exchange: RequestExchange) throws -> Outcome {
        let payload = outcome.payload ?? outcome.body
        // A cache hit's stored payload is already unboxed, whatever the wire protocol.
        let reuse = outcome.cacheKey.map { (key: $0, values: self.values) }
        let value = try exchange.endpoint.decoding.run(payload, outcome.response.head, self.decoder, reuse)
        outcome.value = value
        if self.events.isActive {
            let type = TypeNames.name(of: Swift.type(of: value))
            self.events.emit(exchange.request) { $0.decoded($1, as: type) }
        }
        return outcome
    }
}

/// A ``ResponseDecoding`` without its value type.
struct ErasedDecoding: Sendable {
    /// Whether the body is read at all.
    let readsBody: Bool
    /// Decodes, reusing a value decoded earlier from the same cached body when given a key.
    let run:
        @Sendable (_ body: Data, _ head: HTTPResponse, _ decoder: JSONDecoder, _ reuse: (key: String, values: DecodedValues)?) throws ->
            any Sendable

    /// For exchanges whose body the caller reads itself (streams, downloads): nothing to decode.
    static let streamed = ErasedDecoding(readsBody: false) { _, _, _, _ in () }

    init(
        readsBody: Bool,
        run: @escaping @Sendable (Data, HTTPResponse, JSONDecoder, (key: String, values: DecodedValues)?) throws -> any Sendable
    ) {
        self.readsBody = readsBody
        self.run = run
    }

    init<Value: Sendable>(_ decoding: ResponseDecoding<Value>) {
        self.readsBody = decoding.readsBody
        let deterministic = decoding.isDeterministic
        self.run = { body, head, decoder, reuse in
            let input = ResponseDecodingInput(body: body, head: head, decoder: decoder)
            if let reuse, deterministic {
                return try reuse.values.value(key: reuse.key, body: body) { try decoding.run(input) }
            }
            return try decoding.run(input)
        }
    }
}

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

/// Stage 6: while the client is constrained (Low Data Mode), a prefetch endpoint is refused with
/// kind `constrained` or waits until it is lifted, by the client's ``ConstrainedPolicy`` — for
/// every kind of exchange, downloads and streams included. The wait ends with the caller's
/// cancellation or deadline.
struct ConstrainedStage: PipelineStage {
    let gate: ConstrainedGate
    let policy: ConstrainedPolicy
    var name: String { "constrained" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        if exchange.endpoint.isPrefetch {
            try await self.gate.admit(policy: self.policy)
        }
        return try await next(exchange)
    }
}

/// Type names for the "decoded" event, worked out once per type (the runtime's name lookup is
/// slow enough to matter on every request).
enum TypeNames {
    private static let names = Locked<[ObjectIdentifier: String]>([:])

    static func name(of type: any Any.Type) -> String {
        let key = ObjectIdentifier(type)
        if let name = Self.names.withLock({ $0[key] }) { return name }
        let name = String(describing: type)
        Self.names.withLock { $0[key] = name }
        return name
    }
}
