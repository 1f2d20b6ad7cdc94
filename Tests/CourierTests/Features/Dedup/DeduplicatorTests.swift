import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// The deduplicator's bookkeeping on its own, where a race between callers is set up by hand
/// (the seams with the pipeline are in `DeduplicationTests` and `LogicalIdentityTests`).
@Suite("The deduplicator, on its own")
struct DeduplicatorTests {
    /// A caller whose lifecycle ticket `cancelAll` has already ended, joining a shared request
    /// at a higher priority, leaves as it joins and puts the priority back where the others have
    /// it. The raise its join worked out was sent after that, so the scheduler kept the queued
    /// request at a priority no waiter had, ahead of requests someone still waits for.
    @Test
    func aJoinerCancelledAsItJoinsLeavesThePriorityWhereTheOthersHaveIt() async throws {
        let sent = Locked<[RequestPriority]>([])
        let deduplicator = Deduplicator(makeTicket: { 1 }, reprioritize: { _, priority in sent.withLock { $0.append(priority) } })
        let lifecycle = Lifecycle(scheduler: RequestScheduler(configuration: SchedulerConfiguration()))
        let head = HTTPRequest(method: .get, scheme: "https", authority: "api.example.com", path: "/shared")
        let key = try #require(
            LogicalKey(
                request: Request(head: head), endpoint: .erasing(Endpoint<Data>(path: "/shared")), partition: "", wire: "",
                ignoredHeaders: []))
        let gate = Gate()
        let fetching = Locked(false)
        let leader = Task {
            try await deduplicator.run(key: key, ticket: 10, priority: .normal, deadline: nil, control: nil) { _, _ in
                fetching.withLock { $0 = true }
                await gate.wait()
                throw CourierError.transport("ended by the test")
            }
        }
        #expect(await eventually { fetching.current })
        let ticket = try lifecycle.begin()
        #expect(lifecycle.cancelAll(reason: "signed out") == 1)
        let joined = await expectCourierError {
            _ = try await deduplicator.run(
                key: key, ticket: 11, priority: .high, deadline: nil, control: nil, lifecycle: lifecycle, lifecycleTicket: ticket
            ) { _, _ in
                Issue.record("a joiner fetches nothing")
                throw CourierError.transport("not reached")
            }
        }
        #expect(joined?.kind == .cancelled)
        #expect(sent.current.last == .normal, "\(sent.current)")
        await gate.open()
        let led = await expectCourierError { _ = try await leader.value }
        #expect(led?.message == "ended by the test")
    }
}
