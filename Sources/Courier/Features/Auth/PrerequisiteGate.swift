/// Middleware that runs a one-time prerequisite (a "crumb", a session cookie, a CSRF token)
/// before any request passes, holds requests meanwhile, shares the result, and runs again after
/// ``invalidate()``.
///
/// - A request waiting for the prerequisite stops waiting as soon as its task is cancelled
///   (kind `cancelled`) or its ``Request/deadline`` passes (kind `timeout`); the fetch itself
///   goes on, and its result serves the next requests.
/// - A fetch that has not ended within `fetchTimeout` (a bootstrap server that accepts the
///   connection and never answers) is cancelled; once it has ended it fails its waiters with
///   kind `timeout`, and the next request runs the prerequisite again. (A fetch that ignores
///   cancellation holds the gate until it ends.)
/// - ``invalidate()`` during a fetch is not lost: that fetch's result goes to the requests
///   already waiting for it, but does not satisfy the gate; the next request runs the
///   prerequisite again.
///
/// `fetch` must not send through a client that uses this gate (it would wait for itself).
///
/// ```swift
/// let crumb = PrerequisiteGate(fetch: { try await bootstrapClient.send(AuthAPI.crumb()) }) { crumb, request in
///     request.head.headerFields[HTTPField.Name("X-Crumb")!] = crumb.value
/// }
/// ```
public final class PrerequisiteGate<Value: Sendable>: Middleware {
    private struct State {
        /// The prerequisite's result, while valid.
        var value: Value?
        /// The fetch in flight for the current generation, if any.
        var pending: SharedOutcome<Value>?
        /// Incremented by ``invalidate()``: a fetch started in an older generation cannot satisfy the gate.
        var generation: UInt64 = 0
        var runs = 0
    }

    private let fetch: @Sendable () async throws -> Value
    private let apply: @Sendable (Value, inout Request) -> Void
    private let fetchTimeout: Duration
    private let state = Locked(State())

    /// Creates a gate whose fetch may take up to 60 seconds.
    ///
    /// - Parameters:
    ///   - fetch: runs the prerequisite once and returns its result.
    ///   - apply: puts the result into each request that passes.
    public convenience init(fetch: @escaping @Sendable () async throws -> Value, apply: @escaping @Sendable (Value, inout Request) -> Void)
    {
        self.init(fetchTimeout: .seconds(60), fetch: fetch, apply: apply)
    }

    /// Creates a gate.
    ///
    /// - Parameters:
    ///   - fetchTimeout: how long one run of the prerequisite may take before it is cancelled and
    ///     fails with kind `timeout`.
    ///   - fetch: runs the prerequisite once and returns its result.
    ///   - apply: puts the result into each request that passes.
    public init(
        fetchTimeout: Duration, fetch: @escaping @Sendable () async throws -> Value,
        apply: @escaping @Sendable (Value, inout Request) -> Void
    ) {
        self.fetch = fetch
        self.apply = apply
        self.fetchTimeout = fetchTimeout
    }

    /// How many times the prerequisite has run.
    public var runCount: Int { self.state.withLock { $0.runs } }

    /// Forgets the result: the next request runs the prerequisite again, even when a fetch is in
    /// flight (its result then serves only the requests already waiting for it).
    public func invalidate() {
        self.state.withLock { state in
            state.value = nil
            state.pending = nil
            state.generation += 1
        }
    }

    /// Waits for the prerequisite (running it if needed), applies it, and passes the request on.
    public func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        let value = try await self.value(deadline: request.deadline)
        var request = request
        self.apply(value, &request)
        return try await next(request)
    }

    private enum Step {
        case ready(Value)
        case wait(SharedOutcome<Value>)
        case fail(CourierError)
    }

    private func value(deadline: ContinuousClock.Instant?) async throws -> Value {
        let what = "the prerequisite"
        let interruption = SharedOutcome<Value>.interruption(deadline: deadline, waitingFor: what)
        let step = self.state.withLock { state -> Step in
            if let value = state.value { return .ready(value) }
            if let pending = state.pending { return .wait(pending) }
            // A request that can no longer wait does not start a fetch.
            if let interruption { return .fail(interruption) }
            state.runs += 1
            let outcome = SharedOutcome<Value>()
            state.pending = outcome
            let generation = state.generation
            let limit = self.fetchTimeout
            Task { [fetch] in
                let result: Result<Value, any Error>
                do {
                    // A limit decades away (a hostile or careless one) is no limit: the clock's
                    // sleep cannot even represent it.
                    if limit < Deadline.longest {
                        result = .success(try await Deadline.run(until: .now + max(limit, .zero)) { try await fetch() })
                    } else {
                        result = .success(try await fetch())
                    }
                } catch let error as CourierError where error.kind == .timeout && error.context == nil {
                    result = .failure(CourierError.timeout("the prerequisite did not finish within \(limit)"))
                } catch {
                    result = .failure(CourierError.wrap(error))
                }
                self.finish(result, generation: generation, outcome: outcome)
            }
            return .wait(outcome)
        }
        switch step {
        case .ready(let value): return value
        case .wait(let outcome): return try await outcome.value(deadline: deadline, waitingFor: what)
        case .fail(let error): throw error
        }
    }

    /// Records a fetch's result (unless the gate was invalidated meanwhile) and hands it to its waiters.
    private func finish(_ result: Result<Value, any Error>, generation: UInt64, outcome: SharedOutcome<Value>) {
        self.state.withLock { state in
            guard state.generation == generation else { return }
            if case .success(let value) = result { state.value = value }
            state.pending = nil
        }
        outcome.complete(result)
    }
}
