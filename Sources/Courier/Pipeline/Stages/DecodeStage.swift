import Foundation
import HTTPTypes

/// The payload (after unboxing) becomes the endpoint's value — `Decodable`, `Data`,
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
        let value: any Sendable
        do {
            // (The build stage worked out the endpoint's wire protocol: none is REST.)
            if exchange.wireIdentity.isEmpty {
                value = try exchange.endpoint.decoding.run(payload, outcome.response.head, self.decoder, reuse)
            } else {
                // A payload a wire protocol unboxed is not what the response's `Content-Type` describes
                // (`application/json-rpc`, an envelope served as `text/plain`): the protocol read
                // the response as it came, and the endpoint's decoding sees no type.
                var head = outcome.response.head
                head.headerFields[.contentType] = nil
                value = try exchange.endpoint.decoding.run(payload, head, self.decoder, reuse)
            }
        } catch {
            // (A stored answer is not the server's: nothing to keep.)
            guard outcome.source != .cache, outcome.source != .stale else { throw error }
            throw Self.answered(error, by: outcome.response.head)
        }
        outcome.value = value
        if self.events.isActive {
            let type = TypeNames.name(of: Swift.type(of: value))
            self.events.emit(exchange.request) { $0.decoded($1, as: type) }
        }
        return outcome
    }

    /// A body that does not decode still came with an answer: the error carries its status and
    /// header fields (an endpoint that accepts a 422 can tell which answer it could not read).
    @inline(never)
    private static func answered(_ error: any Error, by head: HTTPResponse) -> any Error {
        guard var failure = error as? CourierError, failure.kind == .decoding, failure.status == nil else { return error }
        failure.status = head.status
        failure.headers = head.headerFields
        return failure
    }
}
