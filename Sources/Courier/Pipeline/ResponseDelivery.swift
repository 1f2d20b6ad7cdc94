import Foundation

/// The last step: what came out of the stage list becomes the caller's ``Response``.
enum ResponseDelivery {
    /// The typed response of a collected exchange.
    static func response<Value: Sendable>(_ outcome: Outcome, as type: Value.Type) throws -> Response<Value> {
        let value = try self.value(outcome, as: type)
        return Response(
            value: value, status: outcome.response.status, headers: outcome.response.head.headerFields, version: outcome.response.version,
            duration: outcome.duration, urlString: outcome.urlString, byteCount: outcome.body.count, source: outcome.source,
            age: outcome.age.map { .milliseconds(Int64(min($0, 1e12) * 1000)) }, staleReason: outcome.staleReason
        )
    }

    /// The decoded value of a collected exchange.
    static func value<Value: Sendable>(_ outcome: Outcome, as type: Value.Type) throws -> Value {
        guard let boxed = outcome.value, let value = boxed as? Value else {
            throw CourierError(.decoding, "the pipeline produced no value of type \(Value.self)")
        }
        return value
    }
}
