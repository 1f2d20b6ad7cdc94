import Foundation
import HTTPTypes

/// The logical request is boxed for the wire by the endpoint's ``WireProtocol`` (its
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
        // What the build stage left for after boxing (the protocol reads the body as encoded):
        // the compression the endpoint asks for, then the upload's progress.
        if endpoint.compressesRequestBody { try RequestBuilder.compress(&exchange.request.body, in: &exchange.request.head) }
        if let reporter = exchange.uploadReporter, let body = exchange.request.body {
            exchange.request.body = body.reporting(to: reporter)
        }
        exchange.wire = wire
        exchange.call = call
        exchange.readsBody = true
        var outcome = try await next.outOfLine(exchange)
        // RFC 9110 §9.3.2: the answer to a HEAD has no content, whatever the protocol wraps its
        // content in; there is nothing to unbox.
        guard !exchange.mode.isStream, !exchange.answersRevalidation(status: outcome.response.statusCode),
            exchange.request.head.method != .head
        else { return outcome }
        // A notification expects nothing back; a body that comes all the same is shown to the
        // protocol (a JSON-RPC error object says the notification was refused), its payload unused.
        if call.isNotification, outcome.body.isEmpty { return outcome }
        do {
            let payload = try wire.unbox(outcome.body, head: outcome.response.head, call: call)
            if !call.isNotification { outcome.payload = payload }
        } catch let error as CourierError where call.isNotification {
            // Of a reply nobody asked for, only a refusal counts (an RPC error object, a
            // business code); a body the protocol cannot read is ignored, as it was unasked.
            if error.kind == .rpc || error.kind == .business { throw error }
            return outcome
        } catch  where call.isNotification {
            return outcome
        } catch let error as CourierError {
            throw error
        } catch {
            // The answer could not be taken out of its envelope (not the JSON the protocol
            // expects, a tag that does not verify): the response is wrong, not the connection.
            throw CourierError.decoding(
                type: type(of: wire), codingPath: (error as? DecodingError)?.courierCodingPath,
                reason: "the response cannot be unboxed by \(type(of: wire)): \(error)", body: outcome.body, underlying: error)
        }
        outcome.payloadMayBeCached = wire.payloadMayBeCached
        return outcome
    }
}
