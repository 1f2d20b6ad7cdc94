import CourierTestServer
import Foundation
import Testing

@testable import Courier

/// What a request's handle keeps once the request ended: no observer of its priority. Each
/// observer holds what it moves (a scheduler ticket, a deduplication wait with its key), and a
/// handle may live long (kept by a batch).
@Suite("Deduplication: a handle keeps no observer once its request ended")
struct DeduplicationObserverTests {
    @Test(arguments: TransportKind.allCases)
    func aHandleKeepsNoPriorityObserverOnceItsRequestEnded(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/shared" { await gate.wait() }
            return .json(#"{"id":1,"title":"t"}"#)
        }
        try await withClient(kind, server: server) { client in
            let alone = client.start(Endpoint<Article>(path: "/alone"))
            _ = try await alone.value
            #expect(alone.control.observerCount == 0)
            // A leader and a caller that joined it.
            let leader = client.start(Endpoint<Article>(path: "/shared"))
            #expect(await eventually { server.requests.contains { $0.path == "/shared" } })
            let joiner = client.start(Endpoint<Article>(path: "/shared"))
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 })
            await gate.open()
            _ = try await leader.value
            _ = try await joiner.value
            #expect(leader.control.observerCount == 0)
            #expect(joiner.control.observerCount == 0)
        }
    }
}
