import Foundation

/// Stage 4: this caller's deadline (the endpoint's timeout, else the client's) over everything
/// below it — queueing, middleware waits, retries and their backoff, redirects, the exchange,
/// the whole body and decoding — on every transport and for each HTTP/2 stream on its own.
///
/// When it passes, the work below is cancelled and the caller gets kind `timeout`. Each caller
/// has its own: a deduplicated joiner with a short deadline times out alone while the others go
/// on. For streamed exchanges (``Client/stream(_:)``, downloads) it covers the wait for the
/// response head only; their bodies may legitimately last for hours, and a stalled one is ended
/// by ``Client/Configuration/bodyIdleTimeout``: each read must bring a byte within it, for each
/// stream on its own (an HTTP/2 stream that stalls times out even while its connection is busy).
struct DeadlineStage: PipelineStage {
    let bodyIdleTimeout: Duration?
    var name: String { "deadline" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        var outcome: Outcome
        // A deadline decades away (a hostile or careless timeout) is no deadline: the clock's
        // sleep cannot even represent it.
        if let deadline = exchange.request.deadline, deadline - ContinuousClock.now < Deadline.longest {
            outcome = try await Deadline.run(until: deadline) { try await next(exchange) }
        } else {
            outcome = try await next(exchange)
        }
        if exchange.mode.isStream, let idle = self.bodyIdleTimeout, idle < Deadline.longest, outcome.response.body.bytes == nil {
            outcome.response.body = outcome.response.body.idleLimited(idle)
        }
        return outcome
    }
}

extension ResponseBody {
    /// This body, failing with kind `timeout` (and cancelling the rest) when a read brings nothing for `idle`.
    func idleLimited(_ idle: Duration) -> ResponseBody {
        guard case .stream(let stream) = self.storage else { return self }
        let limited = ByteStream(onCancel: { stream.cancel() }) {
            let next = SingleReader(stream.makeAsyncIterator().nextChunk)
            return {
                do {
                    return try await Deadline.run(until: .now + idle) { try await next.read() }
                } catch let error as CourierError where error.kind == .timeout && error.context == nil {
                    stream.cancel()
                    throw CourierError.timeout("no byte of the body arrived for \(idle)")
                }
            }
        }
        return .stream(limited, expectedLength: self.expectedLength)
    }
}

/// The `next` function of a stream's iterator, for the one consumer that reads it, one read at a
/// time (the iterator contract): each read may run in a child task, never two at once.
private final class SingleReader: @unchecked Sendable {
    private let next: () async throws -> Data?
    init(_ next: @escaping () async throws -> Data?) { self.next = next }
    func read() async throws -> Data? { try await self.next() }
}

/// Runs work under a deadline.
enum Deadline {
    /// The longest deadline enforced: about 68 years.
    static let longest = Duration.seconds(Int64(1) << 31)

    /// Runs `work`, cancelling it when `deadline` passes; throws kind `timeout` then.
    ///
    /// The work runs in a task of its own (it inherits priority and task-local values, and is
    /// cancelled with the caller); the deadline is a Dispatch timer, not a sleeping task, so a
    /// request costs one task and one timer.
    static func run<Result: Sendable>(until deadline: ContinuousClock.Instant, _ work: @escaping @Sendable () async throws -> Result) async throws -> Result {
        let left = deadline - ContinuousClock.now
        if left <= .zero { throw CourierError.timeout() }
        let expired = Locked(false)
        let task = Task { try await work() }
        // The timer holds the task only until the work is over: a cancelled Dispatch item stays
        // queued until its time, and must not keep the result (a streaming body) alive.
        let running = Locked<Task<Result, any Error>?>(task)
        let timer = DispatchWorkItem {
            expired.withLock { $0 = true }
            running.current?.cancel()
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(min(left, Self.longest).nanoseconds)), execute: timer)
        let result = await withTaskCancellationHandler {
            await task.result
        } onCancel: {
            task.cancel()
        }
        timer.cancel()
        running.withLock { $0 = nil }
        // Work that ended because the deadline cancelled it (a body cut short, a wait given up)
        // is a timeout, never a success — unless the caller itself was cancelled.
        if expired.current, !Task.isCancelled {
            if case .failure(let error as CourierError) = result, error.kind == .timeout { throw error }
            throw CourierError.timeout(underlying: (try? result.get()) == nil ? result.failure : nil)
        }
        return try result.get()
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating.
    fileprivate var nanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return product.addingReportingOverflow(attoseconds / 1_000_000_000).overflow ? .max : product + attoseconds / 1_000_000_000
    }
}
