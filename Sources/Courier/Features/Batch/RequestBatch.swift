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
/// for await event in batch.events { print("\(event.name) done: \(event.succeeded)") }
/// let results = await batch.results()
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
        var waits: [@Sendable () async -> Void] = []
        var cancels: [@Sendable () -> Void] = []
        var finished = 0
        var isCancelled = false
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
            return (state.cancels.count - 1, state.isCancelled)
        }
        if cancelledAlready { handle.cancel() }
        let name = endpoint.name
        let wait: @Sendable () async -> Void = { [sink] in
            let result: Result<Value, CourierError>
            do {
                result = .success(try await handle.value)
            } catch {
                result = .failure(CourierError.wrap(error))
            }
            outcome.withLock { $0 = result }
            let (finished, total) = self.state.withLock { state -> (Int, Int) in
                state.finished += 1
                return (state.finished, state.cancels.count)
            }
            if case .success = result {
                sink.yield(Event(name: name, index: index, succeeded: true, finished: finished, total: total))
            } else {
                sink.yield(Event(name: name, index: index, succeeded: false, finished: finished, total: total))
            }
        }
        let reporter = Task { await wait() }
        self.state.withLock { $0.waits.append { await reporter.value } }
        return BatchItem(index: index, outcome: outcome)
    }

    /// Waits until every item has finished and returns all results.
    public func results() async -> BatchResults {
        let waits = self.state.withLock { $0.waits }
        for wait in waits { await wait() }
        self.sink.finish()
        return BatchResults()
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
