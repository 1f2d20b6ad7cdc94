/// Sends one request over the network and returns the response with a streaming body.
///
/// Redirects, retries after a failed attempt, decoding and the request's deadline are the
/// pipeline's, the same for every transport: its deadline stage ends the whole exchange (head and
/// body) at ``Request/deadline`` with kind `timeout`, whatever the transport does. A transport
/// must:
/// - claim the body with ``RequestBody/claim()`` (once per call);
/// - stop the exchange when the calling task is cancelled, and throw ``CourierError`` of kind
///   `cancelled`;
/// - throw ``CourierError`` for every failure (kind `transport`, `tls`, `pinMismatch`,
///   `timeout` or `cancelled`), and mark with `wasNotProcessed` only what the server provably
///   did not process (an HTTP/2 stream it refused);
/// - throw ``CourierError/connectionFailed(_:underlying:)`` when the connection failed before any
///   byte of a response (refused, reset or closed, no such name, no route), and only then: the
///   cache answers those with a stored response (``CachePolicy/servingStaleWhenDisconnected(_:)``).
///
/// It may bound its own waits by the deadline too (`AsyncHTTPClientTransport` passes it to
/// AsyncHTTPClient; `URLSessionTransport` leaves the session's timeout an idle timeout). It may
/// send a request once more on its own in one case only: an idempotent request with a replayable
/// body whose pooled connection closed under it before any byte of a response arrived (RFC 9110
/// §9.2.2) — `AsyncHTTPClientTransport` does, on a fresh connection; the retry stage never sees
/// that attempt.
///
/// Courier ships ``URLSessionTransport`` and, in `CourierAsyncHTTPClient`, a transport with HTTP/2
/// and TLS pinning. In your own tests, `CourierTesting` offers a stub transport:
///
/// ```swift
/// let client = Client(configuration: .init(transport: StubTransport { request in
///     RawResponse(head: .init(status: .ok), body: .data(Data("{}".utf8)))
/// }, baseURL: URL(string: "https://example.com")!))
/// ```
public protocol Transport: Sendable {
    /// Sends the request and returns once the response head has arrived.
    func send(_ request: Request) async throws -> RawResponse
}
