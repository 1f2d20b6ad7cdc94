import Foundation

/// Several endpoints run concurrently as one unit: each result is reported as it arrives, the
/// whole once all have finished, and one call cancels them all.
///
/// A failure does not lose the other results:
///
/// ```swift
/// let batch = client.batch(priority: .high)
/// let page = batch.add(NewsAPI.list(page: 1))
/// let banner = batch.add(MediaAPI.image(id: 7))
/// let progress = Task { for await event in batch.events { print("\(event.name) done: \(event.succeeded)") } }
/// let results = await batch.results()   // `events` ends once this has returned
/// let news = try results[page].get()
/// ```
///
/// For a couple of requests whose results you need together, `async let` is simpler; use a batch
/// when you want per-item progress, one cancellation for the group, a shared priority, or partial
/// results after failures.
public final class RequestBatch: Sendable {
    /// One finished item.
    public struct Event: Sendable {
        /// The endpoint's name.
        public var name: String
        /// The item's position in the batch (in order of ``add(_:)``).
        public var index: Int
        /// Whether it succeeded.
        public var succeeded: Bool
        /// How many items have finished, this one included.
        public var finished: Int
        /// How many items the batch has.
        public var total: Int
    }

    private struct State {
        var cancels: [@Sendable () -> Void] = []
        /// Items added and not yet finished (their event reported).
        var unfinished = 0
        var finished = 0
        var isCancelled = false
        /// Callers of ``results()`` waiting for `unfinished` to reach zero.
        var resultsWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let client: Client
    private let priority: RequestPriority?
    private let state = Locked(State())
    private let sink: AsyncStream<Event>.Continuation

    /// Each item's outcome as it finishes; the stream ends once every item added so far has finished
    /// and ``results()`` has been called.
    public let events: AsyncStream<Event>

    init(client: Client, priority: RequestPriority?) {
        self.client = client
        self.priority = priority
        (self.events, self.sink) = AsyncStream.makeStream(of: Event.self)
    }

    /// Starts an endpoint as part of the batch and returns a token to read its result later.
    @discardableResult
    public func add<Value: Sendable>(_ endpoint: Endpoint<Value>) -> BatchItem<Value> {
        let handle = self.client.start(endpoint, priority: self.priority)
        let outcome = Locked<Result<Value, CourierError>?>(nil)
        let (index, cancelledAlready) = self.state.withLock { state -> (Int, Bool) in
            state.cancels.append { handle.cancel() }
            state.unfinished += 1
            return (state.cancels.count - 1, state.isCancelled)
        }
        if cancelledAlready { handle.cancel() }
        let name = endpoint.name
        Task { [sink, state] in
            let result: Result<Value, CourierError>
            do {
                result = .success(try await handle.value)
            } catch {
                result = .failure(CourierError.wrap(error))
            }
            outcome.withLock { $0 = result }
            let succeeded = if case .success = result { true } else { false }
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                // Counted and yielded under one lock, so events arrive in the order counted (two
                // items ending together yielded 2 of 2, then 1 of 2). A yield only enqueues.
                state.finished += 1
                sink.yield(Event(name: name, index: index, succeeded: succeeded, finished: state.finished, total: state.cancels.count))
                state.unfinished -= 1
                guard state.unfinished == 0 else { return [] }
                defer { state.resultsWaiters.removeAll() }
                return state.resultsWaiters
            }
            for waiter in waiters { waiter.resume() }
        }
        return BatchItem(index: index, outcome: outcome)
    }

    /// Waits until every item has finished and returns all results.
    ///
    /// An item added while this waits is waited for too. Items added after it has returned still
    /// run and their results can be read once they finish, but ``events`` has ended by then. (An
    /// item added in reaction to the last item's event may come after it has returned.)
    ///
    /// Cancelling the task that awaits this cancels the batch, as ``cancel()`` does: every
    /// unfinished item ends with kind `cancelled` (one finishing at that moment may still
    /// succeed), and this returns once they have ended, so every result can be read. The batch
    /// stays cancelled: an item added later fails at once, and other callers waiting here get the
    /// same results.
    public func results() async -> BatchResults {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let done = self.state.withLock { state -> Bool in
                    if state.unfinished == 0 { return true }
                    state.resultsWaiters.append(waiter)
                    return false
                }
                if done { waiter.resume() }
            }
        } onCancel: {
            self.cancel()
        }
        self.sink.finish()
        return BatchResults()
    }

    /// Whether a caller of ``results()`` is waiting for items to finish (for tests).
    var isWaitingForResults: Bool {
        self.state.withLock { !$0.resultsWaiters.isEmpty }
    }

    /// Cancels every item that has not finished; each then fails with kind `cancelled`.
    public func cancel() {
        let cancels = self.state.withLock { state -> [@Sendable () -> Void] in
            state.isCancelled = true
            return state.cancels
        }
        for cancel in cancels { cancel() }
    }
}

/// A token for one item of a ``RequestBatch``.
public struct BatchItem<Value: Sendable>: Sendable {
    /// The item's position in the batch.
    public let index: Int
    let outcome: Locked<Result<Value, CourierError>?>
}

/// The results of a finished batch, read with the items' tokens.
public struct BatchResults: Sendable {
    /// The result of one item.
    public subscript<Value>(item: BatchItem<Value>) -> Result<Value, CourierError> {
        item.outcome.current ?? .failure(CourierError(.invalidRequest, "the batch item has not finished"))
    }
}

extension Client {
    /// Creates a batch whose items run concurrently at `priority` (each endpoint's own when `nil`).
    public func batch(priority: RequestPriority? = nil) -> RequestBatch {
        RequestBatch(client: self, priority: priority)
    }
}
