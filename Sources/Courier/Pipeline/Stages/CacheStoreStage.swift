import Foundation
import HTTPTypes

/// On the way up, what passed the status check and the unboxing is stored (a business
/// error under HTTP 200 or a JSON-RPC error object never is); a `304` answering a revalidation
/// refreshes the stored entry and serves it (source `.revalidated`); an unsafe method answered
/// with a non-error status invalidates the URL's entries (RFC 9111 §4.4), even when the request
/// then fails (a status the endpoint does not accept, a redirect chain that ends in an error).
///
/// It sits below deduplication, so a shared exchange is stored once. What is stored is the
/// payload after unboxing, so a hit needs no wire protocol.
///
/// **Vary and middleware.** The lookup runs on the logical request, before middleware adds
/// `Authorization`, `Cookie`, signatures or anything else. A response whose `Vary` names a field
/// whose value in the request as sent differs from the logical request's (a field set or changed
/// below the cache) is not stored: a later lookup could not tell those values apart, and one
/// user would be served another's response. Put per-user header fields in the endpoint (so they
/// are part of the logical request) or give each account its own cache partition.
struct CacheStoreStage: PipelineStage {
    let cache: ResponseCache?
    let events: EventHub
    var name: String { "cache-store" }
    var isLinked: Bool { self.cache != nil }

    static var mayBypass: Bool { true }
    func bypasses(_ exchange: RequestExchange) -> Bool { self.cache == nil || !exchange.hasCacheRun }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard let cache = self.cache, exchange.hasCacheRun else { return try await next(exchange) }
        return try await self.store(exchange, cache: cache, next: next)
    }

    /// The exchange sent, and what it brings stored (apart from `run`: most exchanges carry no
    /// cache decision, and their frame does not hold one).
    @inline(never)
    private func store<Next: PipelineNext>(_ exchange: RequestExchange, cache: ResponseCache, next: Next) async throws -> Outcome {
        guard let run = exchange.cacheRun else { return try await next(exchange) }
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            // An unsafe method the server answered without an error still invalidates.
            cache.invalidateAfter(exchange.request, failure: error, record: exchange.record, policy: run.policy)
            throw error
        }
        // A redirect was an answer too: after it, an unsafe method's final answer may be an error
        // status the endpoint accepts (a 303 to a 404), which alone would invalidate nothing.
        if !CacheRules.isSafe(exchange.request.head.method), let redirect = exchange.record.followedRedirect {
            cache.invalidateAfter(exchange.request, answer: HTTPResponse(status: .init(code: redirect)), policy: run.policy)
        }
        let redirects = exchange.record.redirects
        guard self.events.isActive else {
            return cache.finish(run, outcome: outcome, sentHeaders: exchange.record.sentHeaders, redirects: redirects)
        }
        let events = self.events
        return cache.finish(run, outcome: outcome, sentHeaders: exchange.record.sentHeaders, redirects: redirects) {
            events.emit(exchange.request) { $0.cacheStored($1) }
        }
    }
}
