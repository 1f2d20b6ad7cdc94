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
    public func send(_ request: Request) async throws -> RawResponse {
        if let body = request.body { _ = try await body.claimCollected() }
        self.recorded.append(request)
        try Task.checkCancellation()
        return try await self.respond(request)
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
