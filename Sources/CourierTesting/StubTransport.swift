import Courier
import Foundation
import HTTPTypes

/// A transport that answers from a closure, for your own unit tests.
///
/// It records every request it receives. Courier's own tests use a real server instead; this is
/// for apps that want to test their endpoints and middleware without a network.
///
/// ```swift
/// let stub = StubTransport { request in
///     .json(#"{"id": 1, "title": "Hello"}"#)
/// }
/// let client = Client(configuration: .init(transport: stub, baseURL: URL(string: "https://api.example.com")!))
/// let article = try await client.send(NewsAPI.article(id: 1))
/// #expect(stub.requests.first?.head.path == "/articles/1")
/// ```
public final class StubTransport: Transport {
    private let respond: @Sendable (Request) async throws -> RawResponse
    private let recorded = Recorded()

    /// Creates a stub that answers every request with `respond`.
    public init(_ respond: @escaping @Sendable (Request) async throws -> RawResponse) {
        self.respond = respond
    }

    /// The requests received so far, in order.
    public var requests: [Request] { self.recorded.all }

    /// Records the request (claiming its body) and answers it.
    ///
    /// A streamed request body is read whole, as a transport sends it, and the request is recorded
    /// (and handed to the closure) with those bytes as its body (`.data`, so replayable and with
    /// its length), so a test can read what was sent.
    /// As over a real connection, the answer to a HEAD request and a 204 or 304 answer come with
    /// no body, whatever the closure gave (RFC 9110 §9.3.2, §15.3.5, §15.4.5; RFC 9112 §6.3).
    public func send(_ request: Request) async throws -> RawResponse {
        var request = request
        if let body = request.body {
            let sent = try await body.claimCollected()
            if body.bytes == nil { request.body = .data(sent, contentType: body.contentType) }
        }
        self.recorded.append(request)
        try Task.checkCancellation()
        var response = try await self.respond(request)
        if request.head.method == .head || response.head.status.code == 204 || response.head.status.code == 304 {
            response.body.cancel()
            response.body = .empty
        }
        return response
    }
}

extension StubTransport {
    /// One row of a stub's route table: a method and a path pattern, and what to answer.
    ///
    /// In a pattern, `*` matches one path segment and `**` any number of them (at the end);
    /// the query is ignored unless the pattern has one, which must then match exactly.
    public struct Route: Sendable {
        /// The method to match; `nil` matches any.
        public let method: HTTPRequest.Method?
        /// The path pattern.
        public let pattern: String
        /// How long to wait before answering (cancellable).
        public let delay: Duration?
        let answer: @Sendable (Request) async throws -> RawResponse

        /// A route answering with a response.
        public init(_ method: HTTPRequest.Method?, _ pattern: String, delay: Duration? = nil, _ response: RawResponse) {
            self.init(method, pattern, delay: delay) { _ in response }
        }

        /// A route failing with an error, as a transport would (a timeout, a reset connection).
        public init(_ method: HTTPRequest.Method?, _ pattern: String, delay: Duration? = nil, failing error: CourierError) {
            self.init(method, pattern, delay: delay) { _ in throw error }
        }

        /// A route answering with a closure.
        public init(
            _ method: HTTPRequest.Method?, _ pattern: String, delay: Duration? = nil,
            _ answer: @escaping @Sendable (Request) async throws -> RawResponse
        ) {
            self.method = method
            self.pattern = pattern
            self.delay = delay
            self.answer = answer
        }

        /// Whether the route matches a request's method and path.
        public func matches(_ request: Request) -> Bool {
            if let method = self.method, method != request.head.method { return false }
            let target = request.head.path ?? "/"
            let (path, query) = Self.split(target)
            let (patternPath, patternQuery) = Self.split(self.pattern)
            if let patternQuery, patternQuery != query { return false }
            let segments = path.split(separator: "/", omittingEmptySubsequences: true)
            let wanted = patternPath.split(separator: "/", omittingEmptySubsequences: true)
            for (index, part) in wanted.enumerated() {
                if part == "**" { return true }
                guard index < segments.count else { return false }
                if part != "*", part != segments[index] { return false }
            }
            return wanted.count == segments.count
        }

        private static func split(_ target: String) -> (Substring, Substring?) {
            guard let mark = target.firstIndex(of: "?") else { return (target[...], nil) }
            return (target[..<mark], target[target.index(after: mark)...])
        }
    }

    /// Creates a stub answering from a route table: the first matching route answers; a request
    /// no route matches fails with kind `invalidRequest`, naming its method and path.
    ///
    /// ```swift
    /// let stub = StubTransport(routes: [
    ///     .init(.get, "/articles/*", .json(#"{"id": 1, "title": "Hello"}"#)),
    ///     .init(.post, "/articles", .status(.created)),
    ///     .init(.get, "/slow", delay: .seconds(2), .json("{}")),
    ///     .init(nil, "/offline/**", failing: .connectionFailed("no route to host")),
    /// ])
    /// ```
    public convenience init(routes: [Route]) {
        self.init { request in
            guard let route = routes.first(where: { $0.matches(request) }) else {
                throw CourierError(.invalidRequest, "no stub route for \(request.head.method.rawValue) \(request.head.path ?? "/")")
            }
            if let delay = route.delay {
                do {
                    try await Task.sleep(for: delay)
                } catch {
                    throw CourierError.cancelled(underlying: error)
                }
            }
            return try await route.answer(request)
        }
    }
}

extension RawResponse {
    /// A JSON response with the given text and status.
    public static func json(_ text: String, status: HTTPResponse.Status = .ok) -> RawResponse {
        RawResponse(head: HTTPResponse(status: status, headerFields: [.contentType: "application/json"]), body: .data(Data(text.utf8)))
    }

    /// A response with a status and no body.
    public static func status(_ status: HTTPResponse.Status) -> RawResponse {
        RawResponse(head: HTTPResponse(status: status))
    }
}

private final class Recorded: @unchecked Sendable {
    // Guarded by `lock`; every access goes through `append` or `all`.
    private var requests: [Request] = []
    private let lock = NSLock()

    func append(_ request: Request) {
        self.lock.lock()
        defer { self.lock.unlock() }
        self.requests.append(request)
    }

    var all: [Request] {
        self.lock.lock()
        defer { self.lock.unlock() }
        return self.requests
    }
}
