import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import InMemoryLogging
import Logging
import Testing

@testable import Courier

/// HTTP/2 needs AsyncHTTPClient here: URLSession on Linux does not speak HTTP/2.
@Suite("Retries of streams the server refused")
struct RefusedStreamTests {
    @Test
    func aRefusedStreamIsRetriedEvenForAPostAndOtherResetsAreNot() async throws {
        let counter = PathCounter()
        let server = try await tlsServer { request in
            let n = counter.hit(request.path)
            switch request.path {
            case "/refused", "/refused-once":
                // RFC 9113 §8.7: REFUSED_STREAM means nothing was processed, so any method may be retried.
                return n == 1 ? ScriptedResponse(behaviour: .resetStream(errorCode: 0x7)) : .json(#"{"id":1,"title":"accepted"}"#)
            default:
                // INTERNAL_ERROR: the server may have acted on it; a POST is not sent again.
                return ScriptedResponse(behaviour: .resetStream(errorCode: 0x2))
            }
        }
        try await withClient(.asyncHTTPClient, server: server) { client in
            let accepted = try await client.response(Endpoint<Article>(method: .post, path: "/refused", body: .json(["a": 1])))
            #expect(accepted.value.title == "accepted")
            #expect(accepted.version == .http2)
            #expect(counter["/refused"] == 2)
            // The second attempt is the retry stage's, not the transport's: without retries it fails.
            let unretried = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(method: .post, path: "/refused-once", body: .json(["a": 1])).retry(.never))
            }
            #expect(unretried?.kind == .transport)
            #expect(counter["/refused-once"] == 1)
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(method: .post, path: "/internal", body: .json(["a": 1])))
            }
            #expect(error?.kind == .transport)
            #expect(counter["/internal"] == 1)
        }
    }
}
