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

    /// Task cancellation × batch: cancelling the task that awaits `results()` cancels the batch
    /// (before, the wait went on until every item had finished, here never), and every result is
    /// then readable.
    @Test(arguments: TransportKind.allCases)
    func cancellingTheTaskAwaitingResultsCancelsTheBatch(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(600))
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let one = batch.add(Endpoint<Article>(path: "/slow/1"))
            let two = batch.add(Endpoint<Article>(path: "/slow/2"))
            #expect(await eventually { server.requests.count == 2 })
            let waiting = Task { await batch.results() }
            #expect(await eventually { batch.isWaitingForResults })
            waiting.cancel()
            let results = await Self.results(of: waiting, in: batch) { one.outcome.current != nil && two.outcome.current != nil }
            for result in [results[one], results[two]] {
                #expect(await expectCourierError { _ = try result.get() }?.kind == .cancelled)
            }
            #expect(await eventually { server.abandonedCount == 2 })
        }
    }

    /// Deduplication × task cancellation × batch: two identical items share one request; the
    /// cancelled wait for the results cancels both, and the shared request leaves the wire.
    @Test(arguments: TransportKind.allCases)
    func cancellingTheWaitForResultsEndsAnItemSharedByTwo(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(600))
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let one = batch.add(Endpoint<Article>(path: "/slow/shared"))
            let two = batch.add(Endpoint<Article>(path: "/slow/shared"))
            #expect(await eventually { server.requests.count == 1 && client.deduplicationCounts.coalesced == 1 })
            let waiting = Task { await batch.results() }
            #expect(await eventually { batch.isWaitingForResults })
            waiting.cancel()
            let results = await Self.results(of: waiting, in: batch) { one.outcome.current != nil && two.outcome.current != nil }
            for result in [results[one], results[two]] {
                #expect(await expectCourierError { _ = try result.get() }?.kind == .cancelled)
            }
            #expect(await eventually { server.abandonedCount == 1 })
            #expect(server.requests.count == 1)
        }
    }

    /// A task already cancelled when it asks for the results does not wait for the items: it
    /// cancels them and gets their results.
    @Test(arguments: TransportKind.allCases)
    func aCancelledTaskAskingForResultsCancelsTheBatchAtOnce(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(600))
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let one = batch.add(Endpoint<Article>(path: "/slow/1"))
            #expect(await eventually { server.requests.count == 1 })
            let waiting = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return await batch.results()
            }
            let results = await Self.results(of: waiting, in: batch) { one.outcome.current != nil }
            #expect(await expectCourierError { _ = try results[one].get() }?.kind == .cancelled)
            #expect(await eventually { server.abandonedCount == 1 })
        }
    }

    /// The results a cancelled wait returned, once every item has `ended` by itself (expected);
    /// when they do not, the batch is cancelled here so the test ends instead of waiting for the
    /// server.
    private static func results(
        of waiting: Task<BatchResults, Never>, in batch: RequestBatch, sourceLocation: SourceLocation = #_sourceLocation,
        ended: () -> Bool
    ) async -> BatchResults {
        let didEnd = await eventually(ended)
        #expect(didEnd, "the items did not end when the wait for their results was cancelled", sourceLocation: sourceLocation)
        if !didEnd { batch.cancel() }
        return await waiting.value
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
