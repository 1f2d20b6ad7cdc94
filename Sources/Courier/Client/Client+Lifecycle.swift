import Foundation

extension Client {
    /// Cancels every request of this client, queued or in flight; each caller gets a
    /// ``CourierError`` of kind `cancelled` whose message is `reason`. Returns how many were cancelled.
    ///
    /// A request that returns at once and runs in a task of its own (``start(_:priority:)``,
    /// ``upload(_:)``, ``download(_:to:resume:)``, ``updates(_:)``) is reached from the call on,
    /// before its task has run. A stream or download is covered until its response head has
    /// arrived; its body is the caller's to cancel. New requests are not affected.
    @discardableResult
    public func cancelAll(reason: String = "all requests were cancelled") -> Int {
        self.parts.lifecycle.cancelAll(reason: reason)
    }

    /// Holds requests that would go to the network — new ones and queued ones — until
    /// ``resume()``, without failing them (their deadlines still run); answers from the cache
    /// still come. For an app in the background, or during a sign-out.
    public func suspend() {
        self.parts.lifecycle.suspend()
    }

    /// Lets held requests go, in their priority order.
    public func resume() {
        self.parts.lifecycle.resume()
    }

    /// Whether the client holds its network requests (see ``suspend()``).
    public var isSuspended: Bool { self.parts.lifecycle.isSuspended }

    /// Whether ``shutdown(gracePeriod:)`` has begun: every request from then on fails with kind
    /// `cancelled`, for good.
    package var isShutDown: Bool { self.parts.lifecycle.isShutDown }

    /// Stops taking requests (new ones fail with kind `cancelled`, "the client is shut down"),
    /// lets the running ones finish for up to `gracePeriod`, then cancels the rest. Returns how
    /// many were cancelled. It returns once their work has ended (a shared request whose callers
    /// all left included, for up to five seconds more): the transport is the app's to shut down
    /// afterwards, and the cache no request writes to any more. A streamed body (``stream(_:)``,
    /// a download) counts until its response head has arrived, not while it is read: one still
    /// being read goes on until its reader stops or the transport is shut down.
    ///
    /// Prefetches deferred while the client is constrained (`ConstrainedPolicy.defer`) fail at
    /// once, as cancelled: they cannot run without spending the data they wait to save. A caller
    /// cancelled while it waits cancels the running requests at once.
    ///
    /// Do not await it from a request's own work (a middleware, a decoding closure): it waits
    /// for that request too, which cannot end before it returns, so the request holds it for the
    /// whole grace period and is then cancelled (and should its deadline pass first, every
    /// running request is cancelled at once). Start it in a task of its own there.
    @discardableResult
    public func shutdown(gracePeriod: Duration) async -> Int {
        let constrained = self.parts.constrained
        let cancelled = await self.parts.lifecycle.shutdown(grace: gracePeriod) { cancel in
            constrained.close(with: CourierError(.cancelled, "the client is shut down"), before: cancel)
        }
        // A shared request whose callers all left runs on until it notices its cancellation (it
        // may be storing its answer in the cache): waited for too, up to five seconds, as the
        // cancelled requests are given to unwind.
        await self.parts.deduplicator.waitForRunningTasks(until: ContinuousClock.now + .seconds(5))
        return cancelled
    }
}
