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
