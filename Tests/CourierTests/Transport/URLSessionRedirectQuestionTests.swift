import CourierTestServer
import Foundation
import Testing

@testable import Courier

/// URLSession only: the moment under test is FoundationNetworking's question whether to follow a
/// redirect, which AsyncHTTPClient (told never to follow one) does not ask.
@Suite("URLSessionTransport: a cancel while the platform asks about a redirect")
struct URLSessionRedirectQuestionTests {
    /// FoundationNetworking traps ("Received callback for HTTP redirection, but we're not
    /// waiting for it") when a task is cancelled after it asked whether to follow a redirect and
    /// before the answer reaches its work queue: the whole process ended (seen once in the suite,
    /// under load). Here the cancel reaches the platform at that moment every time.
    @Test
    func aRequestCancelledWhileThePlatformAsksAboutItsRedirectEndsCancelled() async throws {
        let server = try await http1Server()
        let transport = URLSessionTransport()
        let asked = Locked(0)
        transport.whenAskedAboutARedirect { exchange in
            asked.withLock { $0 += 1 }
            exchange.cancel()
            // The task's cancel has been sent to the platform before the question is answered.
            transport.waitForControl()
        }
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/temporary")) }
        #expect(error?.kind == .cancelled)
        #expect(asked.withLock { $0 } == 1)
        #expect(server.requests.map(\.path) == ["/temporary"])
        // The session still works: the next request is answered.
        let article = try await client.send(Endpoint<Article>(path: "/json"))
        #expect(article.id == 1)
        transport.whenAskedAboutARedirect { _ in }
        transport.shutdown()
        try await server.stop()
    }

    /// The same moment met by the transport's shutdown, which cancels every task of its session.
    @Test
    func aShutdownWhileThePlatformAsksAboutARedirectEndsTheRequest() async throws {
        let server = try await http1Server()
        let transport = URLSessionTransport()
        let asked = Locked(0)
        transport.whenAskedAboutARedirect { _ in
            asked.withLock { $0 += 1 }
            transport.shutdown()
            // The session has been invalidated, and its tasks cancelled, before the answer.
            transport.waitForControl()
        }
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/temporary").retry(.never)) }
        #expect(error?.kind == .transport)
        #expect(error?.message == "the transport is shut down")
        #expect(asked.withLock { $0 } == 1)
        #expect(server.requests.map(\.path) == ["/temporary"])
        transport.whenAskedAboutARedirect { _ in }
        try await server.stop()
    }
}
