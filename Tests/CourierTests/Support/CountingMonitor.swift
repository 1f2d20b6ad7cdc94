import Courier

/// Counts the pipeline events a test waits for, so that it waits for a state, never for a time.
final class CountingMonitor: EventMonitor {
    private let counts = Locked<[String: Int]>([:])

    /// How many times the named event happened: `joined` (a caller joined a deduplicated
    /// request), `queued` (a request waits for a slot), `attempt` (an attempt went to the transport).
    func count(_ event: String) -> Int { self.counts.withLock { $0[event, default: 0] } }

    private func add(_ event: String) { self.counts.withLock { $0[event, default: 0] += 1 } }

    func deduplicationJoined(_ request: RequestEvent, sharing: RequestID) { self.add("joined") }
    func requestQueued(_ request: RequestEvent, host: String) { self.add("queued") }
    func attemptStarted(_ attempt: AttemptEvent) { self.add("attempt") }
}
