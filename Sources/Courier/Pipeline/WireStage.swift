import Foundation
import HTTPTypes

/// Stage 11: the logical request is boxed for the wire by the endpoint's ``WireProtocol`` (its
/// own, its service's, or the client's default) — REST passes through; JSON-RPC wraps the params
/// and gets its `id` here, after caching and deduplication have used the logical request — and
/// on the way up the answer is unboxed: a JSON-RPC error object throws `rpc`, a non-success
/// envelope code throws `business`.
///
/// Streamed bodies are boxed but not unboxed (they are read by the caller as they arrive). A
/// `304` answering the cache's revalidation is not unboxed: the stored payload is used.
struct WireStage: PipelineStage {
    let defaultWire: any WireProtocol
    let wireProtocols: [ServiceID: any WireProtocol]
    let callIDs: Locked<Int>
    private let defaultIsREST: Bool
    var name: String { "wire" }

    init(configuration: Client.Configuration, callIDs: Locked<Int>) {
        self.defaultWire = configuration.defaultWireProtocol
        self.wireProtocols = configuration.wireProtocols
        self.callIDs = callIDs
        self.defaultIsREST = configuration.defaultWireProtocol is RESTProtocol
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        if self.passesThrough(exchange) { return try await next(exchange) }
        return try await self.boxed(exchange, next: next)
    }

    /// Whether the exchange goes to the wire as it is (REST). Synchronous and apart from `run`,
    /// as the other helpers of the stages: values that live only between two waits stay on the
    /// thread's stack, and the async frame every request allocates from its task stays small.
    @inline(never)
    private func passesThrough(_ exchange: RequestExchange) -> Bool {
        let endpoint = exchange.endpoint
        if endpoint.wire == nil, endpoint.service == nil, self.defaultIsREST { return true }
        return self.wire(for: endpoint) is RESTProtocol
    }

    private func wire(for endpoint: EndpointDescription) -> any WireProtocol {
        endpoint.wire ?? endpoint.service.flatMap { self.wireProtocols[$0] } ?? self.defaultWire
    }

    /// The exchange boxed by its wire protocol, sent, and its answer unboxed.
    @inline(never)
    private func boxed<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let endpoint = exchange.endpoint
        let wire = self.wire(for: endpoint)
        var exchange = exchange
        let id = self.callIDs.withLock { value -> Int in
            value += 1
            return value
        }
        let call = WireCall(operation: endpoint.operation ?? endpoint.name, isNotification: endpoint.isNotification, id: id)
        do {
            try wire.box(&exchange.request, call: call)
        } catch let error as CourierError {
            throw error
        } catch {
            // The request could not be put in its envelope (a body that is not JSON, a key of
            // the wrong size): nothing was sent, and it is the request that is wrong.
            throw CourierError(.invalidRequest, "the request cannot be boxed for \(type(of: wire)): \(error)", underlying: error)
        }
        exchange.wire = wire
        exchange.call = call
        exchange.readsBody = true
        var outcome = try await next.outOfLine(exchange)
        guard !exchange.mode.isStream, !call.isNotification, !exchange.answersRevalidation(status: outcome.response.statusCode)
        else { return outcome }
        outcome.payload = try wire.unbox(outcome.body, head: outcome.response.head, call: call)
        outcome.payloadMayBeCached = wire.payloadMayBeCached
        return outcome
    }
}

/// Stage 12: a status outside the endpoint's accepted statuses (2xx by default) throws kind
/// `httpStatus`, with the header fields and the body (up to the maximum response size) kept.
/// A `304` answering the cache's own revalidation is not an error.
struct StatusCheckStage: PipelineStage {
    let maxResponseSize: Int
    var name: String { "status-check" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let outcome = try await next(exchange)
        if Self.accepts(exchange, status: outcome.response.statusCode) { return outcome }
        try await self.fail(outcome.response, deadline: exchange.request.deadline)
    }

    /// Whether the status is one the endpoint accepts, or the 304 the cache's revalidation asked for.
    @inline(never)
    static func accepts(_ exchange: RequestExchange, status: Int) -> Bool {
        exchange.endpoint.acceptedStatuses.contains(status) || exchange.answersRevalidation(status: status)
    }

    /// Throws kind `httpStatus` for the response, its body read up to the maximum response size.
    /// Apart from `run` so that the async frame of every request does not hold this path's values.
    @inline(never)
    private func fail(_ response: RawResponse, deadline: ContinuousClock.Instant?) async throws -> Never {
        var body = response.body.bytes
        if body == nil {
            body = try? await response.body.collect(upTo: self.maxResponseSize, deadline: deadline)
        }
        throw CourierError.httpStatus(response.head, body: body)
    }
}

/// Stage 13: the body is read into memory, up to the client's maximum response size
/// (`responseTooLarge`, reading stops there). A body nobody needs (an accepted status, a decoding
/// that ignores the body, no cache, no wire protocol, no other waiter) is discarded instead.
/// Streamed exchanges hand the body to the caller unread.
struct CollectBodyStage: PipelineStage {
    let maxResponseSize: Int
    var name: String { "body" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        var outcome = try await next(exchange)
        guard !exchange.mode.isStream, outcome.response.body.bytes == nil else { return outcome }
        if !exchange.readsBody, exchange.endpoint.acceptedStatuses.contains(outcome.response.statusCode) {
            await outcome.response.body.discard()
            outcome.response.body = .empty
        } else {
            outcome.response.body = .data(
                try await outcome.response.body.collect(upTo: self.maxResponseSize, deadline: exchange.request.deadline))
        }
        return outcome
    }
}

/// Stage 14: gzip, deflate, br and zstd content codings are removed as the body is read, within the
/// client's ``DecompressionLimits`` (the maximum response size for collected bodies, a ratio for
/// streams), so a decompression bomb fails with `responseTooLarge`. Downloads ask for and keep
/// the identity coding (their ranges count the bytes on disk).
struct ContentDecodingStage: PipelineStage {
    let limits: DecompressionLimits?
    let maxResponseSize: Int
    var name: String { "content-decoding" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let mode = exchange.mode
        return try self.finished(try await next(exchange), mode: mode)
    }

    /// The outcome with its body's content coding removed (apart from `run`, so that the decoded
    /// response, which few exchanges need, stays out of the async frame every request allocates).
    @inline(never)
    private func finished(_ outcome: consuming Outcome, mode: ExchangeMode) throws -> Outcome {
        guard mode != .download, self.limits != nil, outcome.response.head.headerFields.contains(.contentEncoding) else { return outcome }
        outcome.response = try self.decoded(outcome.response, maxSize: mode.isStream ? nil : self.maxResponseSize)
        return outcome
    }

    /// The response with its gzip or deflate content coding removed (lazily, as the body is read).
    func decoded(_ raw: RawResponse, maxSize: Int?) throws -> RawResponse {
        guard let limits = self.limits, let value = raw.head.headerFields.combinedValue(.contentEncoding) else { return raw }
        guard let coding = try ContentCoding.of(value) else { return raw }
        var decoded = raw
        var bounded = limits
        if let maxSize { bounded.maxSize = min(maxSize, limits.maxSize ?? .max) }
        decoded.body = raw.body.decoded(coding, limits: bounded)
        decoded.head.headerFields[.contentEncoding] = nil
        decoded.head.headerFields[.contentLength] = nil
        return decoded
    }
}
