import Foundation
import HTTPTypes

/// A step in the request pipeline that sees every request and its response.
///
/// A middleware receives the request and `next`, the rest of the chain. It may:
/// - change the request before calling `next`;
/// - throw, to stop the request with an error (nothing is sent);
/// - return a response without calling `next` (a fixture, a cached answer);
/// - `await` something before calling `next`, holding the request (a gate, a token refresh);
/// - call `next` again (a retry) — a one-shot ``RequestBody`` is never sent twice: the second
///   attempt fails with `invalidRequest` instead;
/// - change the response `next` returned.
///
/// Order: the client's middleware runs first, in array order, then the endpoint's, then the
/// retry and redirect stages and the transport; responses travel back in reverse order. It runs
/// after the cache, deduplication, scheduling and wire boxing (see "The request pipeline"), so it
/// sees the request that is about to be sent. A middleware that waits must honour task
/// cancellation: the caller's deadline and cancellation end a request by cancelling it.
///
/// ```swift
/// struct UserAgent: Middleware {
///     func intercept(_ request: Request, next: Next) async throws -> RawResponse {
///         var request = request
///         request.head.headerFields[.userAgent] = "MyApp/1.0"
///         return try await next(request)
///     }
/// }
/// ```
public protocol Middleware: Sendable {
    /// The rest of the chain, ending at the transport.
    typealias Next = @Sendable (Request) async throws -> RawResponse

    /// Handles one request, usually by calling `next`.
    func intercept(_ request: Request, next: Next) async throws -> RawResponse
}

/// A middleware made from a closure.
public struct ClosureMiddleware: Middleware {
    private let body: @Sendable (Request, Next) async throws -> RawResponse

    /// Creates a middleware from a closure with the same shape as ``Middleware/intercept(_:next:)``.
    public init(_ body: @escaping @Sendable (Request, Next) async throws -> RawResponse) {
        self.body = body
    }

    /// Calls the closure.
    public func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        try await self.body(request, next)
    }
}

extension Middleware where Self == ClosureMiddleware {
    /// A middleware made from a closure.
    public static func closure(_ body: @escaping @Sendable (Request, Next) async throws -> RawResponse) -> ClosureMiddleware {
        ClosureMiddleware(body)
    }
}

/// Runs a request through a list of middleware.
enum MiddlewareChain {
    static func send(
        _ request: Request, through chain: [any Middleware], exchange: RequestExchange, last: @escaping Middleware.Next
    ) async throws -> RawResponse {
        var next = last
        for middleware in chain.reversed() {
            let inner = next
            next = { request in
                do {
                    return try await middleware.intercept(request, next: inner)
                } catch {
                    throw ErrorContext.attach(
                        error, stage: String(describing: type(of: middleware)), exchange: exchange, fromMiddleware: true)
                }
            }
        }
        return try await next(request)
    }

    /// Sends `exchange` again — a retry's attempt, a redirect's hop — through the per-hop
    /// middleware among the client's and the endpoint's (``PerHopMiddleware``: signing), then
    /// through the stages below (`next`). The one way both the retry and the redirect stage
    /// re-run middleware.
    static func sendAgain<Next: PipelineNext>(
        _ exchange: RequestExchange, clientMiddleware: [any Middleware], next: Next
    ) async throws -> RawResponse {
        let perHop = (clientMiddleware + exchange.endpoint.middleware).filter { $0 is any PerHopMiddleware }
        guard !perHop.isEmpty else { return try await next.outOfLine(exchange).response }
        return try await self.send(exchange.request, through: perHop, exchange: exchange) { request in
            var inner = exchange
            inner.request = request
            return try await next.outOfLine(inner).response
        }
    }
}

/// Middleware that must see every request that goes on the wire: it runs in its place in the
/// chain, and again on each retry attempt and on each redirect hop to the same origin (until a
/// hop has left it), just before the transport. ``RequestSigner`` is one, so a retried or redirected request carries a
/// fresh signature over what is actually sent.
///
/// A middleware that itself sends the request again by calling its `next` twice (as
/// ``OAuth2Authenticator`` does after a 401 and a refresh) re-runs only the middleware after it:
/// put per-hop middleware after such a one, or the second send goes with the first one's
/// signature and nonce. The client's middleware runs before the endpoint's, so a signer in the
/// client's list with the authenticator in an endpoint's is the wrong way round.
public protocol PerHopMiddleware: Middleware {}

extension RequestSigner: PerHopMiddleware {}
