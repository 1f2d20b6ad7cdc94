import Crypto
import Foundation
import HTTPTypes

/// The endpoint becomes the *logical* request — URL from the base URL (or the server
/// directory's entry for the endpoint's service), the client's default header fields then the
/// endpoint's, the body encoded (and compressed when asked, unless a wire protocol boxes it:
/// the wire stage compresses then) — and its ``LogicalKey``.
///
/// The logical request carries no wire id, no token, no signature and no timestamp: those are
/// added further down (wire stage, middleware), so identical calls share a key. Fails with
/// `invalidRequest`.
struct BuildStage: PipelineStage {
    let parts: ClientParts
    /// Whether the client's default wire protocol is REST (asked once: a dynamic cast).
    private let defaultIsREST: Bool
    var name: String { "build" }

    init(parts: ClientParts) {
        self.parts = parts
        self.defaultIsREST = parts.configuration.defaultWireProtocol is RESTProtocol
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        try await next(self.built(exchange))
    }

    /// The exchange with its logical request, key and partition (synchronous and apart from
    /// `run`: its temporaries stay on the thread's stack, out of the async frame).
    @inline(never)
    private func built(_ exchange: RequestExchange) throws -> RequestExchange {
        var exchange = exchange
        let endpoint = exchange.endpoint
        // REST through and through (the common case) is known without asking the protocols.
        if endpoint.wire != nil || endpoint.service != nil || !self.defaultIsREST {
            exchange.wireIdentity = RequestBuilder.wireIdentity(of: endpoint, configuration: self.parts.configuration)
        }
        // A wire protocol that boxes the body (JSON-RPC, field encryption) reads it as the
        // endpoint encoded it: the wire stage compresses it and reports its upload after boxing.
        let boxed = !exchange.wireIdentity.isEmpty
        var request = try RequestBuilder.build(
            endpoint, configuration: self.parts.configuration, base: self.parts.base, id: exchange.request.id, compressing: !boxed)
        if let adjust = exchange.adjust { adjust(&request) }
        if !boxed, let reporter = exchange.uploadReporter, let body = request.body {
            request.body = body.reporting(to: reporter)
        }
        exchange.request = request
        if self.parts.keepsLogicalRequests {
            exchange.request.logical = LogicalRequest(request, wire: exchange.wireIdentity)
        }
        if !exchange.mode.isStream {
            // Read once: the dedup key, the cache lookup and the cache store all use this value.
            exchange.partition = self.parts.configuration.cache.partition()
        }
        if !exchange.mode.isStream, self.parts.configuration.deduplication.isEnabled, DeduplicationStage.shares(exchange) {
            exchange.key = LogicalKey(
                request: request, endpoint: exchange.endpoint, partition: exchange.partition, wire: exchange.wireIdentity,
                ignoredHeaders: self.parts.configuration.deduplication.ignoredHeaders
            )
        }
        return exchange
    }
}
