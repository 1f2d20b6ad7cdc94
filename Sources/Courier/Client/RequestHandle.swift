/// A request started with ``Client/start(_:priority:)``: await its result or cancel it.
public struct RequestHandle<Value: Sendable>: Sendable {
    let task: Task<Response<Value>, any Error>
    let control: RequestControl

    /// The request's priority; setting it moves the request in the scheduler's queue while it waits.
    public var priority: RequestPriority {
        get { self.control.priority }
        nonmutating set { self.control.setPriority(newValue) }
    }

    /// Cancels the request; awaiting it then throws kind `cancelled`.
    public func cancel() {
        self.control.cancelByCaller()
        self.task.cancel()
    }

    /// Whether ``cancel()`` was called.
    ///
    /// A request that timed out or was ended by ``Client/cancelAll(reason:)`` was not cancelled
    /// this way: its task is, but this stays `false`.
    public var isCancelled: Bool { self.control.isCancelledByCaller }

    /// The decoded value, once the request has finished.
    public var value: Value {
        get async throws { try await self.response.value }
    }

    /// The decoded value with its HTTP metadata, once the request has finished.
    public var response: Response<Value> {
        get async throws {
            do {
                return try await self.task.value
            } catch {
                throw CourierError.wrap(error)
            }
        }
    }
}
