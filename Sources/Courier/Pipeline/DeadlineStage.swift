import Foundation

/// Stage 4: this caller's deadline (the endpoint's timeout, else the client's) over everything
/// below it — queueing, middleware waits, retries and their backoff, redirects, the exchange,
/// the whole body and decoding — on every transport and for each HTTP/2 stream on its own.
///
/// When it passes, the work below is cancelled and the caller gets kind `timeout`. Each caller
/// has its own: a deduplicated joiner with a short deadline times out alone while the others go
/// on. For streamed exchanges (``Client/stream(_:)``, downloads) it covers the wait for the
/// response head only; their bodies may legitimately last for hours, and a stalled one is ended
/// by the transport's idle read timeout.
struct DeadlineStage: PipelineStage {
    var name: String { "deadline" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        // A deadline decades away (a hostile or careless timeout) is no deadline: the clock's
        // sleep cannot even represent it.
        guard let deadline = exchange.request.deadline, deadline - ContinuousClock.now < Deadline.longest else {
            return try await next(exchange)
        }
        return try await Deadline.run(until: deadline) { try await next(exchange) }
    }
}

/// Runs work under a deadline.
enum Deadline {
    /// The longest deadline enforced: about 68 years.
    static let longest = Duration.seconds(Int64(1) << 31)

    /// Runs `work`, cancelling it when `deadline` passes; throws kind `timeout` then.
    static func run<Result: Sendable>(until deadline: ContinuousClock.Instant, _ work: @escaping @Sendable () async throws -> Result) async throws -> Result {
        if ContinuousClock.now >= deadline { throw CourierError.timeout() }
        let expired = Locked(false)
        do {
            return try await withThrowingTaskGroup(of: Result?.self) { group in
                group.addTask { try await work() }
                group.addTask {
                    try await Task.sleep(until: deadline, clock: .continuous)
                    expired.withLock { $0 = true }
                    return nil
                }
                defer { group.cancelAll() }
                while let next = try await group.next() {
                    if let result = next {
                        // Work that ended because the deadline cancelled it (a body cut short)
                        // is a timeout, never a success.
                        if expired.current { throw CourierError.timeout() }
                        return result
                    }
                    throw CourierError.timeout()
                }
                throw CourierError.timeout()
            }
        } catch let error as CourierError where error.kind == .timeout {
            throw error
        } catch {
            if expired.current, !Task.isCancelled { throw CourierError.timeout(underlying: error) }
            throw error
        }
    }
}
