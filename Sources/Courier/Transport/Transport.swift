/// Sends one request over the network and returns the response with a streaming body.
///
/// A transport does not follow redirects, retry, or decode: the pipeline above it does that, the
/// same way for every transport. It must:
/// - claim the body with ``RequestBody/claim()`` (once per call);
/// - stop the exchange when the calling task is cancelled, and throw ``CourierError`` of kind
///   `cancelled`;
/// - enforce ``Request/deadline`` over the whole exchange and throw kind `timeout`;
/// - throw ``CourierError`` for every failure.
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
