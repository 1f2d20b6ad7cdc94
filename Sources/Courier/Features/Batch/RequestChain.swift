/// Steps that run in order, each able to use the previous result; the first failure stops the
/// rest, and one call cancels the whole sequence.
///
/// ```swift
/// let signIn = client.chain(priority: .veryHigh) { chain in
///     let crumb = try await chain.send(AuthAPI.crumb())
///     let session = try await chain.send(AuthAPI.signIn(user: name, crumb: crumb.value))
///     return try await chain.send(AccountAPI.profile(session.token))
/// }
/// let profile = try await signIn.value
/// ```
///
/// Plain sequential `try await` calls give the same ordering; a chain adds a handle to cancel the
/// sequence from elsewhere (a screen going away), one priority for all its steps, and a count of
/// finished steps for progress.
public struct RequestChain: Sendable {
    let client: Client
    let priority: RequestPriority?
    let steps: Locked<Int>

    /// Sends one step; throws kind `cancelled` without sending if the chain was cancelled.
    public func send<Value: Sendable>(_ endpoint: Endpoint<Value>) async throws -> Value {
        if Task.isCancelled { throw ChainHandle<Value>.classified(CourierError.cancelled(), by: self.client.configuration.errorClassifier) }
        var step = endpoint
        if let priority = self.priority { step.priority = priority }
        let value = try await self.client.send(step)
        self.steps.withLock { $0 += 1 }
        return value
    }
}

/// A running ``RequestChain``: await its value, cancel it, or read how many steps finished.
public struct ChainHandle<Value: Sendable>: Sendable {
    let task: Task<Value, any Error>
    let steps: Locked<Int>
    let classifier: ErrorClassifier

    /// The chain's result, or the first step's error (always a ``CourierError``, presented as
    /// the client's ``ErrorClassifier`` says: a cancelled chain is silent).
    public var value: Value {
        get async throws {
            do {
                return try await self.task.value
            } catch {
                throw Self.classified(error, by: self.classifier)
            }
        }
    }

    /// `error` as a ``CourierError``, with its presentation from `classifier` unless the
    /// pipeline gave it one (an error with a request's context came through it).
    static func classified(_ error: any Error, by classifier: ErrorClassifier) -> CourierError {
        var failure = CourierError.wrap(error)
        if failure.context == nil { failure.presentation = classifier.classify(failure) }
        return failure
    }

    /// How many steps have finished successfully.
    public var completedSteps: Int { self.steps.current }

    /// Cancels the step in flight and every later one.
    public func cancel() { self.task.cancel() }
}

extension Client {
    /// Runs `body` as a chain of steps at `priority` (each endpoint's own when `nil`).
    public func chain<Value: Sendable>(
        priority: RequestPriority? = nil,
        _ body: @escaping @Sendable (RequestChain) async throws -> Value
    ) -> ChainHandle<Value> {
        let steps = Locked(0)
        let chain = RequestChain(client: self, priority: priority, steps: steps)
        return ChainHandle(task: Task { try await body(chain) }, steps: steps, classifier: self.configuration.errorClassifier)
    }
}
