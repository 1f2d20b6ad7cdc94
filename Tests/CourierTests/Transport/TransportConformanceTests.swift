import Courier
import CourierAsyncHTTPClient
import CourierConformance
import Foundation
import Testing

/// Courier's own transports through the public conformance suite, and a broken one to show the
/// suite can fail.
@Suite("Transport conformance: the contract, checked over real sockets")
struct TransportConformanceTests {
    @Test
    func asyncHTTPClientTransportKeepsTheContract() async {
        let suite = TransportConformance(shutdown: { try? await ($0 as? AsyncHTTPClientTransport)?.shutdown() }) {
            AsyncHTTPClientTransport()
        }
        let failures = await suite.run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test
    func urlSessionTransportKeepsTheContract() async {
        let suite = TransportConformance(shutdown: { ($0 as? URLSessionTransport)?.shutdown() }) { URLSessionTransport() }
        let failures = await suite.run()
        #expect(failures.isEmpty, "\(failures)")
    }

    /// A transport that reads the whole body before it returns, drops the caller's header
    /// fields and throws plain errors: the suite names each broken rule.
    @Test
    func aTransportThatBreaksTheContractIsCaught() async {
        let suite = TransportConformance(shutdown: { ($0 as? Careless)?.inner.shutdown() }) { Careless(inner: URLSessionTransport()) }
        let failures = await suite.run()
        let broken = Set(failures.map(\.check))
        #expect(broken.isSuperset(of: [.exchange, .streamedResponseBody, .untrustedCertificate, .connectionRefused]), "\(failures)")
        #expect(!broken.contains(.largeResponseBody), "\(failures)")
    }

    struct Careless: Transport {
        struct Plain: Error {}
        let inner: URLSessionTransport

        func send(_ request: Request) async throws -> RawResponse {
            var stripped = request
            stripped.head.headerFields = [:]
            do {
                let response = try await self.inner.send(stripped)
                let body = try await response.body.collect(upTo: 64 << 20, deadline: request.deadline)
                return RawResponse(head: response.head, body: .data(body), version: response.version)
            } catch {
                throw Plain()
            }
        }
    }
}
