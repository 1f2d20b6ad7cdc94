/// The scheduler's decisions as a plain value: no locks, no tasks, no clock of its own.
///
/// Requests wait in one queue per host and priority, in their place in line. When capacity frees up, the scheduler
/// looks at the head of every queue (the first in line of that host and priority) and starts the
/// one with the highest *effective* priority: its priority plus one level per `agingInterval`
/// waited, ties broken by place in line (the number a request got when `start` was called, else on
/// arrival). Cancelled and re-prioritised entries are dropped lazily
/// when they reach the head of a queue, so every operation is O(1) amortised plus a scan of the
/// queue heads (hosts × 5).
package struct SchedulerState: Sendable {
    /// One request known to the scheduler.
    package struct Ticket: Sendable, Equatable {
        /// The ticket's identifier.
        package var id: UInt64
        /// The host the request goes to.
        package var host: String
        /// Its current priority.
        package var priority: RequestPriority
        /// The request's place in line: the number it got when it was called (``makeOrder()``),
        /// else when it arrived. Within a priority the smaller number goes first.
        package var sequence: UInt64
        /// When it was queued, for ageing.
        package var enqueuedAt: ContinuousClock.Instant {
            get { FixedInstant.instant(at: self.enqueuedOffset) }
            set { self.enqueuedOffset = FixedInstant.offset(of: newValue) }
        }
        /// ``enqueuedAt`` as a time since a fixed instant: a ticket of fixed layout is copied
        /// and stored without the runtime's generic value witnesses (see ``FixedInstant``).
        private var enqueuedOffset: Duration

        package init(id: UInt64, host: String, priority: RequestPriority, sequence: UInt64, enqueuedAt: ContinuousClock.Instant) {
            self.id = id
            self.host = host
            self.priority = priority
            self.sequence = sequence
            self.enqueuedOffset = FixedInstant.offset(of: enqueuedAt)
        }
    }

    private struct QueueKey: Hashable {
        var host: String
        var priority: RequestPriority
    }

    /// One place in a queue: a request, the generation of its record it was queued with (a
    /// re-prioritised request leaves a stale entry behind), and its number in line.
    struct QueueEntry {
        var id: UInt64
        var generation: UInt32
        var order: UInt64
    }

    private typealias Entry = QueueEntry

    package private(set) var configuration: SchedulerConfiguration
    private var waiting: [UInt64: (ticket: Ticket, generation: UInt32)] = [:]
    private var queues: [QueueKey: FIFO<Entry>] = [:]
    private var inFlightByHost: [String: Int] = [:]
    /// Live (not cancelled, not started) queued requests per host: stale queue entries never count.
    private var waitingByHost: [String: Int] = [:]
    private var inFlight = 0
    private var http2Hosts: Set<String> = []
    private var nextSequence: UInt64 = 0
    /// Whether slots are handed out; a paused scheduler (a suspended client) queues every request.
    package private(set) var isPaused = false
    /// When the pause began: time paused does not count as waiting, for ageing.
    private var pausedAt: ContinuousClock.Instant?

    /// Creates an empty state.
    package init(configuration: SchedulerConfiguration = .default) {
        self.configuration = configuration.validated
    }

    /// The number of requests waiting.
    package var queuedCount: Int { self.waiting.count }
    /// The number of requests on the wire.
    package var inFlightCount: Int { self.inFlight }

    /// Whether a request to `host` may start now without queueing.
    package func hasCapacity(for host: String) -> Bool {
        !self.isPaused && self.inFlight < self.configuration.maxConcurrentRequests
            && self.inFlightByHost[host, default: 0] < self.limit(for: host)
    }

    /// The per-host limit that applies to `host`.
    package func limit(for host: String) -> Int {
        !self.http2Hosts.isEmpty && self.http2Hosts.contains(host)
            ? self.configuration.maxRequestsPerHTTP2Host : self.configuration.maxRequestsPerHost
    }

    /// The most hosts remembered as speaking HTTP/2: past it the memory starts over (each host
    /// is remembered again at its next HTTP/2 answer), so a client that reaches ever new hosts
    /// (a CDN's numbered subdomains, say) does not grow without end.
    package static let maxHTTP2Hosts = 1024

    /// How many hosts are remembered as speaking HTTP/2.
    package var http2HostCount: Int { self.http2Hosts.count }

    /// Records that `host` answered over HTTP/2, raising its limit.
    package mutating func markHTTP2(_ host: String) {
        if self.http2Hosts.count >= Self.maxHTTP2Hosts, !self.http2Hosts.contains(host) { self.http2Hosts.removeAll() }
        self.http2Hosts.insert(host)
    }

    /// Offers a request: returns `true` if it starts now (capacity taken), `false` if it was queued.
    ///
    /// A request only starts at once when nothing of the same host is queued, so a newcomer never
    /// overtakes requests already waiting for that host.
    ///
    /// `order` is the number the request got when it was called (``makeOrder()``); without one it
    /// is numbered now. A request that reaches the queue after one called later goes before it.
    package mutating func submit(
        id: UInt64, host: String, priority: RequestPriority, order: UInt64? = nil, now: ContinuousClock.Instant
    ) -> Bool {
        if self.hasCapacity(for: host) && !self.hasWaiters(for: host) {
            self.take(host)
            return true
        }
        let order = order ?? self.makeOrder()
        let key = QueueKey(host: host, priority: priority)
        // A request numbered earlier that arrives later goes ahead of those it overtakes, and
        // takes on the longest wait among them: the head of a queue carries the queue's age, so
        // a late arrival must not hide the ageing the requests behind it have earned.
        var enqueuedAt = now
        if let overtaken = self.queues[key]?.oldestLiveWait(after: { $0.order > order }, in: self.waiting) {
            enqueuedAt = min(enqueuedAt, overtaken)
        }
        let ticket = Ticket(id: id, host: host, priority: priority, sequence: order, enqueuedAt: enqueuedAt)
        self.waiting[id] = (ticket, 0)
        self.waitingByHost[host, default: 0] += 1
        self.queues[key, default: FIFO()].insert(Entry(id: id, generation: 0, order: order), after: { $0.order <= order })
        return false
    }

    /// The next number in line: taken when a request is called, so that requests started one
    /// after the other queue in that order whichever reaches the scheduler first.
    package mutating func makeOrder() -> UInt64 {
        self.nextSequence += 1
        return self.nextSequence
    }

    /// Removes a queued request; returns `false` if it was not queued (already started or unknown).
    ///
    /// Its queue entry goes lazily, when it reaches the head of its queue; but when the last live
    /// request of its host goes, all of that host's entries go with it (nothing else would trim
    /// them while nothing queues: ten thousand requests cancelled behind a busy slot, say).
    package mutating func cancel(id: UInt64) -> Bool {
        guard let record = self.waiting.removeValue(forKey: id) else { return false }
        let host = record.ticket.host
        self.unqueue(host)
        if self.waiting.isEmpty {
            self.queues.removeAll()
        } else if !self.hasWaiters(for: host) {
            for priority in RequestPriority.allCases { self.queues[QueueKey(host: host, priority: priority)] = nil }
        }
        return true
    }

    /// The entries held in the queues, stale ones included (for tests of their clean-up).
    package var queueEntryCount: Int { self.queues.values.reduce(0) { $0 + $1.count } }

    /// Changes the priority of a queued request; returns `false` if it is not queued.
    package mutating func reprioritize(id: UInt64, to priority: RequestPriority) -> Bool {
        guard var record = self.waiting[id] else { return false }
        guard record.ticket.priority != priority else { return true }
        record.ticket.priority = priority
        record.generation &+= 1
        let order = record.ticket.sequence
        let key = QueueKey(host: record.ticket.host, priority: priority)
        // As in `submit`: going ahead of requests of its new queue, it takes on the longest wait
        // among them, so their ageing is not hidden behind a head that arrived later.
        if let overtaken = self.queues[key]?.oldestLiveWait(after: { $0.order > order }, in: self.waiting) {
            record.ticket.enqueuedAt = min(record.ticket.enqueuedAt, overtaken)
        }
        self.waiting[id] = record
        self.queues[key, default: FIFO()].insert(Entry(id: id, generation: record.generation, order: order), after: { $0.order <= order })
        return true
    }

    /// The priority of a queued request.
    package func priority(of id: UInt64) -> RequestPriority? {
        self.waiting[id]?.ticket.priority
    }

    /// Records that a started request to `host` finished, and returns the queued requests that start now, in order.
    package mutating func finish(host: String, now: ContinuousClock.Instant) -> [UInt64] {
        self.inFlight -= 1
        let count = self.inFlightByHost[host, default: 1] - 1
        self.inFlightByHost[host] = count > 0 ? count : nil
        return self.startReady(now: now)
    }

    /// Hands out no slot from now on: every request queues, in its place in line.
    package mutating func pause(now: ContinuousClock.Instant) {
        guard !self.isPaused else { return }
        self.isPaused = true
        self.pausedAt = now
    }

    /// Hands out slots again, and returns the queued requests that start now, in order (the
    /// highest priority first, then by place in line).
    ///
    /// Time paused does not count as waiting: a request ages only for the time it waited while
    /// slots were handed out (else, after a long suspension, every held request would have aged
    /// to the top and they would leave in arrival order, whatever their priority).
    package mutating func unpause(now: ContinuousClock.Instant) -> [UInt64] {
        guard self.isPaused else { return [] }
        if let pausedAt = self.pausedAt, now > pausedAt {
            let paused = now - pausedAt
            for index in self.waiting.indices {
                let enqueuedAt = self.waiting.values[index].ticket.enqueuedAt
                self.waiting.values[index].ticket.enqueuedAt = min(enqueuedAt + paused, now)
            }
        }
        self.isPaused = false
        self.pausedAt = nil
        return self.startReady(now: now)
    }

    /// Starts as many queued requests as capacity allows and returns them in start order.
    package mutating func startReady(now: ContinuousClock.Instant) -> [UInt64] {
        guard !self.isPaused, !self.waiting.isEmpty else { return [] }
        var started: [UInt64] = []
        while self.inFlight < self.configuration.maxConcurrentRequests, let next = self.pickNext(now: now) {
            self.waiting[next.id] = nil
            self.unqueue(next.host)
            self.take(next.host)
            started.append(next.id)
        }
        return started
    }

    /// A snapshot for metrics.
    package var snapshot: TrafficSnapshot {
        var queued: [RequestPriority: Int] = [:]
        for record in self.waiting.values { queued[record.ticket.priority, default: 0] += 1 }
        return TrafficSnapshot(queuedByPriority: queued, inFlightByHost: self.inFlightByHost)
    }

    /// The effective priority of a ticket after ageing, in priority levels.
    package func effectivePriority(of ticket: Ticket, now: ContinuousClock.Instant) -> Double {
        let waited = now - ticket.enqueuedAt
        return Double(ticket.priority.rawValue) + max(0, waited / self.configuration.agingInterval).rounded(.down)
    }

    // MARK: - Private

    private mutating func take(_ host: String) {
        self.inFlight += 1
        self.inFlightByHost[host, default: 0] += 1
    }

    private func hasWaiters(for host: String) -> Bool {
        self.waitingByHost[host] != nil
    }

    private mutating func unqueue(_ host: String) {
        let count = self.waitingByHost[host, default: 1] - 1
        self.waitingByHost[host] = count > 0 ? count : nil
    }

    /// Drops stale entries at the head of each queue, then picks the best head whose host has capacity.
    ///
    /// The queues are visited and trimmed in place, by index (no key is hashed, and no queue is
    /// copied out and written back); queues left empty are removed after the scan.
    private mutating func pickNext(now: ContinuousClock.Instant) -> Ticket? {
        var best: (ticket: Ticket, score: Double, index: Dictionary<QueueKey, FIFO<Entry>>.Index)?
        var emptied: [QueueKey] = []
        var index = self.queues.startIndex
        while index != self.queues.endIndex {
            var head: Ticket?
            while let entry = self.queues.values[index].first {
                if let record = self.waiting[entry.id], record.generation == entry.generation {
                    head = record.ticket
                    break
                }
                self.queues.values[index].removeFirst()
            }
            if head == nil { emptied.append(self.queues.keys[index]) }
            if let ticket = head, self.inFlightByHost[ticket.host, default: 0] < self.limit(for: ticket.host) {
                let score = self.effectivePriority(of: ticket, now: now)
                if let current = best, current.score > score || (current.score == score && current.ticket.sequence < ticket.sequence) {
                    // The current best stays.
                } else {
                    best = (ticket, score, index)
                }
            }
            self.queues.formIndex(after: &index)
        }
        if let best { self.queues.values[best.index].removeFirst() }
        for key in emptied { self.queues[key] = nil }
        return best?.ticket
    }
}

extension FIFO where Element == SchedulerState.QueueEntry {
    /// The earliest `enqueuedAt` among the live entries at the back for which `isBehind` holds
    /// (looking from the back, as ``insert(_:after:)`` does).
    func oldestLiveWait(
        after isBehind: (Element) -> Bool, in waiting: [UInt64: (ticket: SchedulerState.Ticket, generation: UInt32)]
    ) -> ContinuousClock.Instant? {
        var oldest: ContinuousClock.Instant?
        self.forEachFromBack { entry in
            guard isBehind(entry) else { return false }
            if let record = waiting[entry.id], record.generation == entry.generation {
                oldest = min(oldest ?? record.ticket.enqueuedAt, record.ticket.enqueuedAt)
            }
            return true
        }
        return oldest
    }
}

/// A first-in first-out queue with amortised O(1) operations.
struct FIFO<Element>: Sendable where Element: Sendable {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { self.head >= self.storage.count }
    var count: Int { self.storage.count - self.head }
    var first: Element? { self.isEmpty ? nil : self.storage[self.head] }

    mutating func append(_ element: Element) {
        self.storage.append(element)
    }

    /// Calls `body` with the elements from the back while it returns `true`.
    func forEachFromBack(_ body: (Element) -> Bool) {
        var index = self.storage.count
        while index > self.head, body(self.storage[index - 1]) { index -= 1 }
    }

    /// Inserts `element` behind the last element for which `isAhead` holds, looking from the
    /// back: O(1) when elements come in order, as they nearly always do.
    mutating func insert(_ element: Element, after isAhead: (Element) -> Bool) {
        var index = self.storage.count
        while index > self.head && !isAhead(self.storage[index - 1]) { index -= 1 }
        if index == self.storage.count { self.storage.append(element) } else { self.storage.insert(element, at: index) }
    }

    @discardableResult
    mutating func removeFirst() -> Element? {
        guard !self.isEmpty else { return nil }
        let element = self.storage[self.head]
        self.head += 1
        if self.head > 64 && self.head * 2 > self.storage.count {
            self.storage.removeFirst(self.head)
            self.head = 0
        }
        return element
    }
}
