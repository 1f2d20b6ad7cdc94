import Foundation

/// Requests that belong to a screen or a feature, cancelled together when it goes away.
///
/// The owner keeps one scope instead of one property per request. Releasing the scope (or calling
/// ``cancelAll()``) cancels every request started in it that has not finished; their callers get
/// kind `cancelled`, and no completion handler runs after the cancellation.
///
/// ```swift
/// final class ArticleScreen {
///     let scope = RequestScope()
///     func load() {
///         scope.send(NewsAPI.article(id: 42), on: client) { [weak self] result in self?.show(result) }
///     }
/// }   // when the screen is released, its requests are cancelled
/// ```
///
/// A completion handler holds what it captures until its request ends: one that captures the
/// scope's owner strongly keeps the owner — and so the scope — alive while the request runs, and
/// releasing the owner then cancels nothing. Capture the owner weakly, as above.
public final class RequestScope: Sendable {
    private struct State {
        var cancels: [UInt64: @Sendable () -> Void] = [:]
        var nextID: UInt64 = 0
        var generation: UInt64 = 0
    }

    private let state = Locked(State())

    /// Creates an empty scope.
    public init() {}

    deinit {
        self.cancelAll()
    }

    /// The number of requests started in the scope that have not finished.
    public var activeCount: Int { self.state.withLock { $0.cancels.count } }

    /// Starts an endpoint in the scope.
    @discardableResult
    public func start<Value: Sendable>(
        _ endpoint: Endpoint<Value>, on client: Client, priority: RequestPriority? = nil
    ) -> RequestHandle<Value> {
        let handle = client.start(endpoint, priority: priority)
        let id = self.register { handle.cancel() }
        Task { [weak self] in
            _ = try? await handle.response
            self?.unregister(id)
        }
        return handle
    }

    /// Sends an endpoint in the scope and calls `completion` on `queue` (the main queue by default).
    ///
    /// `completion` is not called if the scope was cancelled (or released) before it would run.
    /// It is held until the request ends: capture the scope's owner weakly in it (see above).
    public func send<Value: Sendable>(
        _ endpoint: Endpoint<Value>,
        on client: Client,
        queue: DispatchQueue = .main,
        completion: @escaping @Sendable (Result<Value, CourierError>) -> Void
    ) {
        let handle = client.start(endpoint)
        // The generation is read where the request is registered, under one lock: a `cancelAll()`
        // between the two would leave a request neither cancelled nor ever completed.
        let (id, generation) = self.registerReadingGeneration { handle.cancel() }
        Task { [weak self] in
            let result: Result<Value, CourierError>
            do {
                result = .success(try await handle.value)
            } catch {
                result = .failure(CourierError.wrap(error))
            }
            guard let self else { return }
            self.unregister(id)
            queue.async { [weak self] in
                // Checked again on the delivery queue, so a cancel that races the result wins; and
                // weakly, so a scope released while the delivery waits calls nobody back (a
                // strong reference kept it alive, and its release never counted).
                guard let self, self.state.withLock({ $0.generation }) == generation, !handle.isCancelled else { return }
                completion(result)
            }
        }
    }

    /// Cancels every request started in the scope that has not finished.
    public func cancelAll() {
        let cancels = self.state.withLock { state -> [@Sendable () -> Void] in
            state.generation += 1
            defer { state.cancels.removeAll() }
            return Array(state.cancels.values)
        }
        for cancel in cancels { cancel() }
    }

    private func register(_ cancel: @escaping @Sendable () -> Void) -> UInt64 {
        self.registerReadingGeneration(cancel).id
    }

    /// Registers `cancel` and returns its id with the generation it was registered in.
    private func registerReadingGeneration(_ cancel: @escaping @Sendable () -> Void) -> (id: UInt64, generation: UInt64) {
        self.state.withLock { state in
            state.nextID += 1
            state.cancels[state.nextID] = cancel
            return (state.nextID, state.generation)
        }
    }

    private func unregister(_ id: UInt64) {
        self.state.withLock { _ = $0.cancels.removeValue(forKey: id) }
    }
}
