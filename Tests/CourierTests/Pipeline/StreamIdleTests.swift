import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import InMemoryLogging
import Logging
import Testing

@testable import Courier

/// Streamed bodies: the per-stream idle timeout (`bodyIdleTimeout`).
@Suite("Streamed bodies end when they stall")
struct StreamIdleTests {
    @Test(arguments: TransportKind.allCases)
    func aStreamThatStallsEndsAfterTheIdleTimeoutOverHTTP1(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in
            .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(30)))
        }
        try await withClient(kind, server: server, configure: { $0.bodyIdleTimeout = .seconds(1) }) { client in
            let stream = try await client.stream(Endpoint<Data>(path: "/stall", decoding: .data))
            let error = await expectCourierError { for try await _ in stream.body {} }
            #expect(error?.kind == .timeout)
        }
    }

    /// HTTP/2 over TLS: on URLSession where the test CA can be trusted (``TransportKind/overTLS``).
    @Test(arguments: TransportKind.overTLS)
    func aStalledHTTP2StreamEndsWhileItsConnectionStaysBusy(_ kind: TransportKind) async throws {
        let server = try await tlsServer { request in
            request.path == "/stall"
                ? .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(30)))
                : await Routes.standard(request)
        }
        try await withClient(kind, server: server, configure: { $0.bodyIdleTimeout = .seconds(2) }) { client in
            let stream = try await client.stream(Endpoint<Data>(path: "/stall", decoding: .data))
            #expect(stream.version == HTTP2Tests.reportedHTTP2(kind))
            let reader = Task { () -> CourierError? in
                do {
                    for try await _ in stream.body {}
                    return nil
                } catch {
                    return error as? CourierError
                }
            }
            for index in 0..<20 {
                _ = try await client.send(Endpoint<Article>(path: "/json?n=\(index)"))
            }
            let error = await reader.value
            #expect(error?.kind == .timeout)
            #expect(Set(server.requests.map(\.connectionID)).count == 1)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
        }
    }
}
