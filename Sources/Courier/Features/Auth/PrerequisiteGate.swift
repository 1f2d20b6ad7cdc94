/// Middleware that runs a one-time prerequisite (a "crumb", a session cookie, a CSRF token)
/// before any request passes, holds requests meanwhile, shares the result, and runs again after
/// ``invalidate()``.
///
/// `fetch` must not send through a client that uses this gate (it would wait for itself).
///
/// ```swift
/// let crumb = PrerequisiteGate(fetch: { try await bootstrapClient.send(AuthAPI.crumb()) }) { crumb, request in
///     request.head.headerFields[HTTPField.Name("X-Crumb")!] = crumb.value
/// }
/// ```
public final class PrerequisiteGate<Value: Sendable>: Middleware {
    private let fetch: @Sendable () async throws -> Value
    private let apply: @Sendable (Value, inout Request) -> Void
    private let state = Locked<(value: Value?, task: Task<Value, any Error>?, runs: Int)>((nil, nil, 0))

    /// Creates a gate.
    public init(fetch: @escaping @Sendable () async throws -> Value, apply: @escaping @Sendable (Value, inout Request) -> Void) {
        self.fetch = fetch
        self.apply = apply
    }

    /// How many times the prerequisite has run.
    public var runCount: Int { self.state.withLock { $0.runs } }

    /// Forgets the result: the next request runs the prerequisite again.
    public func invalidate() {
        self.state.withLock { $0.value = nil }
    }

    /// Waits for the prerequisite (running it if needed), applies it, and passes the request on.
    public func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        let value = try await self.value()
        var request = request
        self.apply(value, &request)
        return try await next(request)
    }

    private func value() async throws -> Value {
        let (ready, task) = self.state.withLock { state -> (Value?, Task<Value, any Error>?) in
            if let value = state.value { return (value, nil) }
            if let task = state.task { return (nil, task) }
            state.runs += 1
            let task = Task { [fetch] in try await fetch() }
            state.task = task
            return (nil, task)
        }
        if let ready { return ready }
        do {
            let value = try await task!.value
            self.state.withLock { state in
                state.value = value
                state.task = nil
            }
            return value
        } catch {
            self.state.withLock { $0.task = nil }
            throw CourierError.wrap(error)
        }
    }
}
