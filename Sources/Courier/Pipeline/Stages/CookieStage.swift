import Foundation
import HTTPTypes

/// The client's ``CookieJar`` puts its matching cookies in the `Cookie` field of every
/// request that goes on the wire — each redirect hop and each retry attempt, for the URL that hop
/// goes to — and stores the `Set-Cookie` fields of every response, a redirect's included.
///
/// It sits below redirects and retries, so a login that answers `302` with a session cookie sets
/// it before the redirected request leaves, and a hop to another host carries that host's cookies
/// only. A `Cookie` field the endpoint set itself stays, first. Below the cache, so a response
/// served from the cache sets nothing again; `Vary: Cookie` responses follow the cache's rule for
/// fields set below it. No jar configured: nothing happens.
struct CookieStage: PipelineStage {
    let jar: CookieJar?
    var name: String { "cookies" }
    var isLinked: Bool { self.jar != nil }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard let jar = self.jar else { return try await next(exchange) }
        return try await self.withCookies(exchange, jar: jar, next: next)
    }

    /// The exchange sent with the jar's cookies, and the response's stored in it.
    @inline(never)
    private func withCookies<Next: PipelineNext>(_ exchange: RequestExchange, jar: CookieJar, next: Next) async throws -> Outcome {
        guard let url = exchange.request.url else { return try await next.outOfLine(exchange) }
        var exchange = exchange
        if let value = jar.headerValue(for: url) {
            let own = exchange.request.head.headerFields[values: .cookie]
            exchange.request.head.headerFields[.cookie] = (own + [value]).joined(separator: "; ")
        }
        let outcome = try await next.outOfLine(exchange)
        jar.receive(outcome.response.head.headerFields[values: .setCookie], from: url)
        return outcome
    }
}
