import Dispatch
import Foundation
import Testing

@testable import Courier

/// Deadlines × middleware (and transports) whose cancellation blocks its thread.
///
/// One thread watches every deadline of the process. A cancellation handler runs on the thread
/// that cancels — a middleware's, or a platform's (cancelling a URLSession task whose name
/// lookup is still running can wait for the lookup). If the watch ran those handlers itself,
/// one such request would hold up every other request's deadline in the process.
///
/// The deadlines that pass in one scan of the watch fire in turn on one thread, so the two
/// transports' cases run one after the other: run at once, each one's blocked handler could hold
/// up the other's second deadline.
@Suite("Deadlines: a blocked cancellation does not hold up other deadlines", .serialized)
struct DeadlineWatchTests {
    /// A middleware that waits until it is cancelled; cancelling it blocks the cancelling thread
    /// until the test lets it go (or 60 s pass), and only then ends the wait. (Ending the wait
    /// first would let the task run on and wait for the runtime's lock on its cancellation
    /// records, held while the handler runs, on a thread of the cooperative pool: with two such
    /// tests at once the pool's two threads would be blocked.)
    final class BlockingCancellation: Sendable {
        let release = DispatchSemaphore(value: 0)
        /// Whether the handler has started to block.
        let cancelled = Locked(false)
        /// Whether the handler has been let go (or gave up after 60 s).
        let released = Locked(false)
        private let wait = Locked<(continuation: CheckedContinuation<Void, Never>?, ended: Bool)>((nil, false))

        var blocking: ClosureMiddleware {
            ClosureMiddleware { request, next in
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let ended = self.wait.withLock { state -> Bool in
                            if !state.ended { state.continuation = continuation }
                            return state.ended
                        }
                        if ended { continuation.resume() }
                    }
                } onCancel: {
                    self.cancelled.withLock { $0 = true }
                    // A backstop only: the test signals it (long, so a slow machine never reaches it).
                    _ = self.release.wait(timeout: .now() + 60)
                    self.released.withLock { $0 = true }
                    let continuation = self.wait.withLock { state -> CheckedContinuation<Void, Never>? in
                        state.ended = true
                        defer { state.continuation = nil }
                        return state.continuation
                    }
                    continuation?.resume()
                }
                throw CancellationError()
            }
        }

        /// A middleware that sleeps for a minute: only its deadline ends it.
        static let waiting = ClosureMiddleware { request, next in
            try await Task.sleep(for: .seconds(60))
            return try await next(request)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCancellationHandlerThatBlocksDoesNotDelayAnotherRequestsDeadline(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let gate = BlockingCancellation()
        try await withClient(kind, server: server, configure: { $0.deduplication.isEnabled = false }) { client in
            let first = Task {
                try await client.send(
                    Endpoint<Data>(path: "/json", timeout: .seconds(1), middleware: [gate.blocking], decoding: .data))
            }
            // The first deadline has fired and its handler is blocked before the second starts.
            #expect(await eventually { gate.cancelled.withLock { $0 } })
            let error = await expectCourierError {
                _ = try await client.send(
                    Endpoint<Data>(path: "/json", timeout: .milliseconds(300), middleware: [BlockingCancellation.waiting], decoding: .data))
            }
            #expect(error?.kind == .timeout)
            // The second deadline fired while the first request's handler was still blocked.
            #expect(gate.released.withLock { $0 } == false, "the second request's deadline waited for the first one's cancellation")
            gate.release.signal()
            let firstError = await expectCourierError { _ = try await first.value }
            #expect(firstError?.kind == .timeout)
        }
    }

    /// Deadlines that pass at the same moment (found by one scan of the watch) do not wait for
    /// one another's cancellation either: one request's handler blocks, the others, due at the
    /// same instant, time out on time. (Before each deadline of a scan had a thread of its own,
    /// they fired in turn on one thread, and a request after the blocked one waited for it.)
    @Test(arguments: TransportKind.allCases)
    func deadlinesDueTogetherDoNotWaitForABlockedCancellation(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let gate = BlockingCancellation()
        try await withClient(kind, server: server, configure: { $0.deduplication.isEnabled = false }) { client in
            // One deadline for all five, so one scan of the watch finds them passed together.
            // (Seconds, so the first request is in its middleware before the deadline passes.)
            let timeout = Duration.seconds(2)
            let first = Task {
                try await client.send(Endpoint<Data>(path: "/json", timeout: timeout, middleware: [gate.blocking], decoding: .data))
            }
            let others = (0..<4).map { _ in
                Task { () -> CourierError.Kind? in
                    do {
                        _ = try await client.send(
                            Endpoint<Data>(path: "/json", timeout: timeout, middleware: [BlockingCancellation.waiting], decoding: .data))
                        return nil
                    } catch let error as CourierError {
                        return error.kind
                    }
                }
            }
            var kinds: [CourierError.Kind?] = []
            for other in others { kinds.append(try await other.value) }
            #expect(kinds == Array(repeating: .timeout, count: 4))
            // All four ended while the first request's handler was still blocked.
            #expect(gate.released.withLock { $0 } == false, "a deadline waited for another one's blocked cancellation")
            #expect(await eventually { gate.cancelled.withLock { $0 } })
            gate.release.signal()
            let firstError = await expectCourierError { _ = try await first.value }
            #expect(firstError?.kind == .timeout)
        }
    }

    /// Deadlines × deduplication × work below that never looks at cancellation: a caller waiting
    /// for a shared request gets `timeout` at its deadline while the shared work still waits, and
    /// the work ends on its own later. (Only the waiter's path: an exchange in a task of its own
    /// waits for its cancelled work to end, which owns the exchange's lifecycle ticket until then.)
    @Test(arguments: TransportKind.allCases)
    func aWaiterGetsItsTimeoutWhileTheWorkBelowIgnoresCancellation(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let gate = Gate()
        let returned = Locked(false)
        let deaf = ClosureMiddleware { request, next in
            await gate.wait()
            returned.withLock { $0 = true }
            return try await next(request)
        }
        // Lets the work end whatever happens (a caller that waited for it would wait this long).
        let backstop = Task {
            try await Task.sleep(for: .seconds(20))
            await gate.open()
        }
        // The middleware is the client's: an endpoint's closure middleware would keep the request
        // from being shared (a closure has no identity).
        try await withClient(kind, server: server, configure: { $0.middleware = [deaf] }) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(path: "/json", timeout: .milliseconds(300), decoding: .data))
            }
            #expect(error?.kind == .timeout)
            #expect(returned.withLock { $0 } == false, "the caller waited for the work below to end")
            await gate.open()
            #expect(await eventually { returned.withLock { $0 } })
        }
        backstop.cancel()
    }

    /// How the deadlines of one scan are spread over threads: one each, and past the cap the
    /// rest together on one more.
    @Test
    func theDeadlinesOfAScanGetAThreadEachUpToTheCap() {
        let due = Array(1...5)
        #expect(DeadlineWatch.batches(of: [Int](), threads: 3).isEmpty)
        #expect(DeadlineWatch.batches(of: due, threads: 8).map(Array.init) == [[1], [2], [3], [4], [5]])
        #expect(DeadlineWatch.batches(of: due, threads: 5).map(Array.init) == [[1], [2], [3], [4], [5]])
        #expect(DeadlineWatch.batches(of: due, threads: 2).map(Array.init) == [[1], [2, 3, 4, 5]])
        #expect(DeadlineWatch.batches(of: due, threads: 1).map(Array.init) == [[1, 2, 3, 4, 5]])
        #expect(DeadlineWatch.batches(of: due, threads: 1).reduce(0) { $0 + $1.count } == 5)
        // No thread to spare (or a nonsensical count) still fires everything, on one thread.
        #expect(DeadlineWatch.batches(of: due, threads: 0).map(Array.init) == [[1, 2, 3, 4, 5]])
        #expect(DeadlineWatch.batches(of: due, threads: -3).map(Array.init) == [[1, 2, 3, 4, 5]])
    }
}
