import CourierTestServer
import Foundation
import Testing

@testable import Courier

@Suite("A batch's results wait for every item added before they return")
struct BatchResultsTests {
    /// An item added while `results()` is already waiting must be waited for as well: before the
    /// fix, `results()` took a snapshot of the items when called and could return before a later
    /// item had finished, leaving its result unreadable and its event unreported.
    @Test(arguments: TransportKind.allCases)
    func anItemAddedWhileResultsWaitsIsWaitedFor(_ kind: TransportKind) async throws {
        let first = Gate()
        let second = Gate()
        let server = try await http1Server { request in
            if request.path == "/first" { await first.wait() }
            if request.path == "/second" { await second.wait() }
            return .json(#"{"id":\#(request.path.count),"title":"\#(request.path)"}"#)
        }
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let one = batch.add(Endpoint<Article>(name: "one", path: "/first"))
            #expect(await eventually { server.requests.count == 1 })
            let events = Task { () -> [RequestBatch.Event] in
                var events: [RequestBatch.Event] = []
                for await event in batch.events { events.append(event) }
                return events
            }
            let waiting = Task { await batch.results() }
            #expect(await eventually { batch.isWaitingForResults })
            let two = batch.add(Endpoint<Article>(name: "two", path: "/second"))
            #expect(await eventually { server.requests.count == 2 })
            await first.open()
            #expect(await eventually { one.outcome.current != nil })
            // The second item is still held: the results must not be in yet.
            #expect(two.outcome.current == nil)
            await second.open()
            let results = await waiting.value
            #expect((try? results[one].get()) == Article(id: 6, title: "/first"))
            #expect((try? results[two].get()) == Article(id: 7, title: "/second"))
            let reported = await events.value
            #expect(reported.map(\.name).sorted() == ["one", "two"])
            #expect(reported.map(\.finished).sorted() == [1, 2])
            #expect(reported.allSatisfy { $0.total == 2 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func resultsOfAnEmptyBatchReturnAtOnceAndEndTheEvents(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            _ = await batch.results()
            var count = 0
            for await _ in batch.events { count += 1 }
            #expect(count == 0)
            #expect(server.requests.isEmpty)
        }
    }
}
