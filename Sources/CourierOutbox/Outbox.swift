import Courier
import Foundation
import HTTPTypes

/// A durable outbox: requests stored in a SQLite file before they are sent, delivered through a
/// `Client` until the server has them, across crashes and restarts.
///
/// ```swift
/// let outbox = try Outbox(path: appSupport.appendingPathComponent("outbox.sqlite").path, client: client)
/// let id = try outbox.enqueue(MessagesAPI.send(text), queue: "messages", reference: draft.id)
/// outbox.start()                                    // delivers in the background, now and after restarts
/// for await item in outbox.completions() {          // also the ones that finished before a restart
///     show(item)
///     try outbox.acknowledge(item.id)
/// }
/// ```
///
/// **Durability.** ``enqueue(_:queue:reference:maxAttempts:expiresAfter:)`` returns only after the
/// item is committed with SQLite's `synchronous = FULL` in WAL mode: the write-ahead log is
/// fsynced before the commit returns, so an id the app holds survives a crash, a force-quit or
/// a power cut (as far as the disk honours fsync). An enqueue that throws stored nothing.
///
/// **Exactly-once effect.** Each item gets an `Idempotency-Key` when it is enqueued, sent with
/// every attempt, after every restart: a server that honours the key applies the item once even
/// when a response is lost. Items are marked in flight (durably) before they are sent; an item
/// found in flight when the outbox opens was interrupted and is sent again with the same key.
/// So open one `Outbox` per file at a time: one opened while another delivers from the same file
/// takes that one's items in flight for interrupted ones and sends them again (same key). Within
/// one outbox, `start()` and `deliverAll()` may run at once: each item is taken by one of them.
///
/// **Order and failures.** Items of one queue are delivered in order, one at a time: a failing
/// head blocks its queue, other queues go on. A 2xx delivers, even one whose body was lost (too
/// large, cut short): the server has the request, so it is not sent again, and the item's
/// `lastError` says what became of the body. A 408, 429, 5xx, a 409 to an attempt after the
/// first (the server still processes the first under its key), or a network
/// failure is tried again later (the client's retry policy runs first, within an attempt; then
/// the outbox's backoff, or the server's `Retry-After`), up to the item's maximum attempts. Any
/// other status, too many attempts, or expiry makes the item dead, with its last error and the
/// response — never silently dropped; ``retry(_:)`` revives it.
///
/// **Results and pruning.** A delivered item keeps its status, header fields and body (up to
/// ``Configuration/resultBodyLimit``). ``prune()`` (run when the outbox opens) deletes the items
/// the app has acknowledged: delivered ones delivered more than ``Configuration/deliveredRetention``
/// ago, dead ones dead for more than ``Configuration/deadRetention``; nothing unacknowledged is pruned.
///
/// Everything goes through the client: authentication, signing, pinning, metrics and logs apply.
/// Bodies must be in memory (a streamed body is refused with kind `invalidRequest`).
public final class Outbox: Sendable {
    /// How an outbox delivers and keeps items.
    ///
    /// Values outside what an outbox can use are brought into range when it opens (its
    /// ``Outbox/configuration`` shows them so): waits, retentions and the busy timeout below zero
    /// count as zero; waits and retentions above 2^31 seconds (68 years) are 2^31 seconds, the busy
    /// timeout at most 2,147,483 seconds (SQLite counts it in 32-bit milliseconds); a body limit
    /// below zero keeps no body; at least one attempt.
    public struct Configuration: Sendable {
        /// The most attempts an item takes unless it says otherwise.
        public var maxAttempts = 10
        /// The wait after the first failed attempt; doubled after each (with jitter), up to ``maxDelay``.
        public var baseDelay: Duration = .seconds(1)
        /// The longest wait between attempts, `Retry-After` included.
        public var maxDelay: Duration = .seconds(300)
        /// The most body bytes kept with a result.
        public var resultBodyLimit = 64 * 1024
        /// How long a delivered item is kept after its delivery (pruned only once acknowledged).
        public var deliveredRetention: Duration = .seconds(7 * 86400)
        /// How long a dead item is kept after it died (pruned only once acknowledged).
        public var deadRetention: Duration = .seconds(30 * 86400)
        /// How long a write waits for a database another connection holds before failing with kind `locked`.
        public var busyTimeout: Duration = .seconds(2)
        /// Queues whose items are sent together, by queue name.
        public var batches: [String: OutboxBatching] = [:]
        /// Whether opening the outbox runs ``Outbox/prune()``.
        public var prunesOnOpen = true
        /// Statements run on each connection when it opens (tests use it to cap the file's size).
        package var pragmas: [String] = []
        /// Whether opening the outbox puts items found in flight back in line (see "Exactly-once
        /// effect"); off for a program that only looks at or adds to the file of an app that may
        /// be delivering from it (the command-line tool but for `run`).
        package var recoversOnOpen = true

        /// The defaults.
        public init() {}

        /// This configuration with every value in the range the outbox can use (see above).
        var validated: Configuration {
            let longest = Duration.seconds(Int64(1) << 31)
            func clamped(_ value: Duration, to most: Duration) -> Duration { min(max(value, .zero), most) }
            var valid = self
            valid.maxAttempts = min(Int(Int32.max), max(1, self.maxAttempts))
            valid.baseDelay = clamped(self.baseDelay, to: longest)
            valid.maxDelay = clamped(self.maxDelay, to: longest)
            valid.resultBodyLimit = max(0, self.resultBodyLimit)
            valid.deliveredRetention = clamped(self.deliveredRetention, to: longest)
            valid.deadRetention = clamped(self.deadRetention, to: longest)
            valid.busyTimeout = clamped(self.busyTimeout, to: .seconds(2_147_483))
            return valid
        }
    }

    /// The configuration.
    public let configuration: Configuration
    let store: OutboxStore
    private let client: Client
    private let completionsHub = Locked<[UUID: AsyncStream<OutboxItem>.Continuation]>([:])
    private let wakeup = Wakeup()
    private let worker = Locked<Task<Void, Never>?>(nil)
    /// Deliveries under way in this outbox's loops.
    private let delivering = Locked(0)
    /// When the last few writes that mark or finish an item failed (a full disk, a file made
    /// read-only): each failure makes its loop wait before it looks again, never spin.
    package let writeFailures = Locked<[ContinuousClock.Instant]>([])
    /// Outcomes of attempts whose write failed, oldest first, tried again at every delivery pass.
    private let unrecorded = Locked<[Unrecorded]>([])

    /// Opens (or creates) the outbox at `path`, migrates its schema, puts interrupted items back
    /// in line and prunes old ones. Fails with a typed ``OutboxError`` for a corrupt, locked,
    /// read-only or unopenable file.
    public init(path: String, client: Client, configuration: Configuration = Configuration()) throws(OutboxError) {
        let configuration = configuration.validated
        self.configuration = configuration
        self.client = client
        self.store = try OutboxStore(
            path: path, busyTimeout: configuration.busyTimeout.inSeconds, pragmas: configuration.pragmas,
            recovers: configuration.recoversOnOpen)
        if configuration.prunesOnOpen { _ = try self.prune() }
    }

    // MARK: - Enqueueing

    /// Stores the endpoint's request durably and returns its id (see "Durability" above).
    ///
    /// The request is built now, as the client builds it (URL, the endpoint's header fields,
    /// encoded body), without authentication or signing. The client's and the service's default
    /// header fields are not stored: they apply at delivery, as they are then (a credential among
    /// them is never written to the file, and one rotated meanwhile is sent). Authentication and
    /// signing run at delivery too —
    /// the client's middleware and, for an endpoint of a service, the service's (its name is
    /// stored with the item). The endpoint's own middleware cannot be stored, and does not run. With a
    /// `reference` already in the outbox, nothing is stored and that item's id is returned.
    @discardableResult
    public func enqueue<Value: Sendable>(
        _ endpoint: Endpoint<Value>, queue: String = "default", reference: String? = nil, maxAttempts: Int? = nil,
        expiresAfter: Duration? = nil
    ) throws(OutboxError) -> OutboxItemID {
        // The logical request is stored and sent again later as it is: a wire protocol that boxes
        // each attempt (a JSON-RPC id) cannot be replayed that way.
        guard self.client.sendsAsREST(endpoint) else {
            throw OutboxError(
                .invalidRequest, "the outbox stores REST requests; \(endpoint.name) uses a wire protocol that boxes each call")
        }
        let request: Request
        do {
            request = try self.client.logicalRequest(for: endpoint)
        } catch {
            throw OutboxError(.invalidRequest, "the request cannot be built: \(error)")
        }
        var body: Data?
        if let requestBody = request.body {
            guard let bytes = requestBody.bytes else {
                throw OutboxError(.invalidRequest, "a streamed body cannot be stored; give the endpoint a body in memory")
            }
            body = bytes
        }
        // The fields the client's and the service's defaults gave are not stored: they apply when
        // the item is sent, as they are then (a credential rotated meanwhile, none on disk). The
        // body's `Content-Type` is stored whatever gave it: it labels the stored bytes, and a
        // default left out would have the body sent as `application/octet-stream`.
        let defaults = self.client.defaultFields(for: endpoint)
        var headers = request.head.headerFields.filter { ($0.name == .contentType && body != nil) || !defaults.contains($0) }.map {
            [$0.name.canonicalName, $0.value]
        }
        if let type = request.body?.contentType, request.head.headerFields[.contentType] == nil { headers.append(["content-type", type]) }
        let now = Date()
        let id = try self.store.insert(
            .init(
                queue: queue, reference: reference, name: request.name, method: request.head.method.rawValue, url: request.urlString,
                // The endpoint's own key, when it has one: an app that sent the request itself
                // first (and timed out) and then hands it to the outbox must not apply it twice.
                headers: headers, body: body, idempotencyKey: request.head.headerFields[Self.idempotencyKey] ?? UUID().uuidString,
                // At most what an attempt count may be when it is read back (2^31 - 1, "for ever"
                // in practice): `.max` would be refused as corrupt and hold the queue.
                maxAttempts: min(Int(Int32.max), max(1, maxAttempts ?? self.configuration.maxAttempts)),
                createdAt: now, expiresAt: expiresAfter.map { now.addingTimeInterval($0.inSeconds) }, service: endpoint.service?.name,
                hasOwnName: request.hasOwnName
            ))
        self.wakeup.signal()
        return id
    }

    // MARK: - Reading

    /// The item with this id, with its state and result; `nil` if there is none (or it was pruned).
    public func item(_ id: OutboxItemID) throws(OutboxError) -> OutboxItem? {
        try self.store.item(id)
    }

    /// The items in a state (all of them for `nil`), oldest first.
    public func items(in state: OutboxItem.State? = nil) throws(OutboxError) -> [OutboxItem] {
        try self.store.items(state: state)
    }

    /// Completed items — delivered or dead — as they complete, starting with those completed
    /// earlier (before a restart too) that the app has not acknowledged yet.
    public func completions() -> AsyncStream<OutboxItem> {
        let (stream, continuation) = AsyncStream<OutboxItem>.makeStream()
        let key = UUID()
        self.completionsHub.withLock { $0[key] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.completionsHub.withLock { $0.removeValue(forKey: key) } }
        for item in (try? self.store.unacknowledged()) ?? [] { continuation.yield(item) }
        return stream
    }

    /// Marks a completed item as seen by the app: ``completions()`` does not yield it again, and
    /// it may be pruned. Fails with kind `notFound` for an item that is not delivered or dead
    /// (one sent again by ``retry(_:)`` is unacknowledged until its new completion is).
    public func acknowledge(_ id: OutboxItemID) throws(OutboxError) {
        try self.store.acknowledge(id)
    }

    /// Sends a dead item again, from its first attempt.
    ///
    /// An item that died in a batch brings that batch's other dead items back with it: the batch
    /// goes again whole, with its body and its idempotency key (the server may have applied it,
    /// and one item alone under that key would be the key reused with another body).
    public func retry(_ id: OutboxItemID) throws(OutboxError) {
        try self.store.revive(id, now: Date())
        self.wakeup.signal()
    }

    /// Deletes what the retention policy lets go (see "Results and pruning"); returns how many items went.
    @discardableResult
    public func prune() throws(OutboxError) -> Int {
        let now = Date()
        return try self.store.prune(
            deliveredBefore: now.addingTimeInterval(-self.configuration.deliveredRetention.inSeconds),
            deadBefore: now.addingTimeInterval(-self.configuration.deadRetention.inSeconds)
        )
    }

    // MARK: - Delivering

    /// Starts delivering in the background, until ``stop()`` or the client's shutdown; new items
    /// wake it at once.
    public func start() {
        self.worker.withLock { task in
            guard task == nil else { return }
            task = Task { [self] in await self.deliver(untilIdle: false) }
        }
    }

    /// Stops the background delivery; an attempt in flight is cancelled and stays pending.
    public func stop() async {
        let task = self.worker.withLock { task -> Task<Void, Never>? in
            defer { task = nil }
            return task
        }
        task?.cancel()
        await task?.value
    }

    /// Delivers until no item is pending (waiting for backoffs as needed), until the task is
    /// cancelled, or until the client is shut down (which refuses every request from then on:
    /// the items stay pending, for an outbox on a client that runs).
    public func deliverAll() async {
        await self.deliver(untilIdle: true)
    }

    private func deliver(untilIdle: Bool) async {
        // Passes in a row in which outcomes left unrecorded could still not be recorded.
        var refusedPasses = 0
        while !Task.isCancelled {
            // Outcomes whose write failed go first: their items hold their queues. The other
            // queues go on meanwhile; every wait of the loop is a second at most until then.
            let recorded = self.recordLeftOver()
            // A shut-down client refuses every request for good (kind `cancelled`, which is not
            // the item's failure): asking it again would go on for ever (with no `baseDelay`, in
            // a busy loop). The outcomes left over were given their try above.
            if self.client.isShutDown { return }
            refusedPasses = recorded ? 0 : refusedPasses + 1
            let longestWait: Duration = recorded ? .seconds(60) : .seconds(1)
            let heads: [String: [OutboxStore.StoredRequest]]
            do {
                // A batching queue's head is as many items as one batch takes; any other queue's
                // is one item (its body read from the file at every look, so not more).
                let batches = self.configuration.batches
                heads = try self.store.heads { batches[$0]?.maxCount ?? 1 }
            } catch {
                // The storage failed; wait and look again rather than spin.
                await self.wakeup.wait(upTo: .seconds(1))
                continue
            }
            if heads.isEmpty {
                // Items behind another loop's item in flight are still to be delivered: wait for
                // that one to finish (it signals), rather than return with them pending.
                // (Only while another loop of this outbox is delivering: an item left in flight by
                // a write that failed holds nothing up.)
                // Outcomes the file still refuses are tried for a few passes more; then `deliverAll`
                // returns, and a later pass of this outbox (or its next opening) takes them up.
                if untilIdle {
                    let waitsForOthers = self.delivering.withLock({ $0 }) > 0 && (try? self.store.hasPendingBehindInFlight()) == true
                    guard waitsForOthers || (!recorded && refusedPasses < 4) else { return }
                    await self.wakeup.wait(upTo: .seconds(1))
                    continue
                }
                await self.wakeup.wait(upTo: longestWait)
                continue
            }
            let now = Date()
            var due: [(String, [OutboxStore.StoredRequest])] = []
            var earliest: Date?
            for (queue, items) in heads {
                let ready = self.readyAt(items, batching: self.configuration.batches[queue], now: now)
                if ready <= now { due.append((queue, items)) } else { earliest = min(earliest ?? ready, ready) }
            }
            if due.isEmpty {
                let wait = max(0.001, (earliest ?? now.addingTimeInterval(1)).timeIntervalSince(now))
                await self.wakeup.wait(upTo: min(.milliseconds(Int64(min(wait, 60) * 1000)), longestWait))
                continue
            }
            await withTaskGroup(of: Void.self) { group in
                for (queue, items) in due {
                    group.addTask { await self.deliverHead(queue: queue, items: items) }
                }
            }
        }
    }

    /// When a queue's head may be sent: its next attempt time, and for a batching queue also
    /// when the batch is full or old enough. The times are stored as dates: a next attempt
    /// further off than the longest wait the outbox sets (`maxDelay`), or an item created after
    /// `now`, was stored before the clock went back (by hand, or a device's clock corrected),
    /// and is due now rather than when the clock comes round again. A new batch with an expired
    /// item is due now, for that item to be marked dead; the items left are then looked at anew
    /// (expired items do not make a batch full).
    private func readyAt(_ items: [OutboxStore.StoredRequest], batching: OutboxBatching?, now: Date) -> Date {
        guard let head = items.first else { return .distantFuture }
        let longest = max(self.configuration.maxDelay, self.configuration.baseDelay).inSeconds
        let next = head.nextAttemptAt > now.addingTimeInterval(longest) ? now : head.nextAttemptAt
        guard let batching, head.attempts == 0 else { return next }
        // (Those a new batch can take: the items before one of a batch sent before.)
        if items.prefix(while: { $0.batch == nil }).contains(where: { $0.hasExpired(at: now) }) { return now }
        let bytes = items.reduce(0) { $0 + ($1.body?.count ?? 0) }
        if items.count >= batching.maxCount || bytes >= batching.maxBytes || head.createdAt > now { return next }
        return max(next, head.createdAt.addingTimeInterval(batching.maxAge.inSeconds))
    }

    private func deliverHead(queue: String, items: [OutboxStore.StoredRequest]) async {
        guard let head = items.first else { return }
        self.delivering.withLock { $0 += 1 }
        defer { self.delivering.withLock { $0 -= 1 } }
        let now = Date()
        let expired = { (item: OutboxStore.StoredRequest) in item.hasExpired(at: now) }
        if let batch = head.batch, let batching = self.configuration.batches[queue] {
            // A batch sent before (a retry, or one a crash interrupted) goes again whole, with
            // exactly its items and its key, whatever was enqueued since and whatever the rule
            // says now (a smaller `maxCount` after an update): the server may have applied it, and
            // its items sent again in another grouping would be a new batch, under a new key,
            // that it applies a second time. For the same reason an item of it that expired
            // takes the whole batch with it.
            guard let members = try? self.store.pendingItems(inBatch: batch), !members.isEmpty else {
                // Unreadable just now: look again in a while, not at once (nor split the batch).
                await self.wakeup.wait(upTo: .seconds(1))
                return
            }
            if members.contains(where: expired) {
                let stored = self.finish(
                    members.map(\.id), state: .dead, error: "expired before it could be delivered (with the batch it was sent in)",
                    result: nil, retryAt: nil)
                if !stored { await self.wakeup.wait(upTo: .seconds(1)) }
                return
            }
            await self.deliverBatch(members, sentBefore: batch, batching: batching, expired: expired)
            return
        }
        if let batch = head.batch {
            // A batch sent before, and no rule for this queue now (removed in an update, or a
            // program that knows none): its items are not sent one by one under new keys, which
            // the server would apply again if it applied the batch. They are dead, for the app
            // to see (and retry once the rule is back).
            guard let members = try? self.store.pendingItems(inBatch: batch), !members.isEmpty else {
                // Unreadable just now: look again in a while (nor decide for part of the batch).
                await self.wakeup.wait(upTo: .seconds(1))
                return
            }
            let stored = self.finish(
                members.map(\.id), state: .dead,
                error: "sent before in a batch, and the outbox has no batch rule for queue '\(queue)' now: not sent again alone",
                result: nil, retryAt: nil)
            if !stored { await self.wakeup.wait(upTo: .seconds(1)) }
            return
        }
        if expired(head) {
            let stored = self.finish([head.id], state: .dead, error: "expired before it could be delivered", result: nil, retryAt: nil)
            if !stored { await self.wakeup.wait(upTo: .seconds(1)) }
            return
        }
        if let batching = self.configuration.batches[queue] {
            await self.deliverBatch(items, sentBefore: nil, batching: batching, expired: expired)
        } else {
            await self.deliverOne(head)
        }
    }

    private func deliverOne(_ item: OutboxStore.StoredRequest) async {
        // Taken by this loop, or by none: another loop that took it first sends it.
        guard await self.take([item], batch: nil) else { return }
        var fields = HTTPFields()
        for pair in item.headers where pair.count == 2 {
            if let name = HTTPField.Name(pair[0]) { fields.append(HTTPField(name: name, value: pair[1])) }
        }
        fields[Self.idempotencyKey] = item.idempotencyKey
        var endpoint = Self.endpoint(
            name: item.hasOwnName ? item.name : nil, method: item.method, url: item.url, fields: fields, body: item.body)
        // The service's middleware (authentication, signing), retry and timeout apply at delivery;
        // its URL does not: the stored one is absolute.
        endpoint.service = item.service.map { ServiceID($0) }
        await self.send(endpoint, ids: [item.id], attempts: item.attempts + 1, maxAttempts: item.maxAttempts)
    }

    /// Sends a batch: `items` as they are when they were sent before under the key `sentBefore`,
    /// else as many of them as the rule takes, under a key made from theirs, leaving out (dead)
    /// those that have expired.
    private func deliverBatch(
        _ items: [OutboxStore.StoredRequest], sentBefore: String?, batching: OutboxBatching,
        expired: (OutboxStore.StoredRequest) -> Bool
    ) async {
        var chosen: [OutboxStore.StoredRequest] = []
        if sentBefore != nil {
            chosen = items
        } else {
            var bytes = 0
            var lapsed: [OutboxItemID] = []
            for item in items {
                if !chosen.isEmpty, chosen.count >= batching.maxCount || bytes + (item.body?.count ?? 0) > batching.maxBytes { break }
                // An item of a batch sent before (behind a revived one) goes only with that
                // batch, under its key: the server may have applied it.
                if item.batch != nil { break }
                if expired(item) {
                    lapsed.append(item.id)
                    continue
                }
                chosen.append(item)
                bytes += item.body?.count ?? 0
            }
            // Not sent any more; if this cannot be stored now, they are left out all the same,
            // and their turn at the head of the queue marks them.
            if !lapsed.isEmpty {
                let stored = self.finish(lapsed, state: .dead, error: "expired before it could be delivered", result: nil, retryAt: nil)
                // Without them the batch may not be due yet (not full, and not old enough): it
                // waits as if they had never been enqueued.
                let now = Date()
                if chosen.isEmpty || self.readyAt(chosen, batching: batching, now: now) > now {
                    if !stored { await self.wakeup.wait(upTo: .seconds(1)) }
                    return
                }
            }
            guard !chosen.isEmpty else { return }
        }
        // The same items make the same key; a batch sent before keeps the key it was sent with.
        let key = sentBefore ?? "batch-" + chosen.map(\.idempotencyKey).joined(separator: ",").sha256Prefix
        guard await self.take(chosen, batch: key) else { return }
        var endpoint = batching.makeRequest(
            chosen.map { OutboxBatchItem(id: $0.id, body: $0.body ?? Data(), idempotencyKey: $0.idempotencyKey) })
        endpoint.headers[Self.idempotencyKey] = key
        endpoint.acceptedStatuses = 100..<600
        // Sent as made, as its items are, rather than boxed by the client's default protocol
        // (which would give every attempt a new envelope and id). A protocol the rule names, for
        // the endpoint or for its service, is the rule's choice and applies.
        if endpoint.wire == nil, endpoint.service.map({ self.client.configuration.wireProtocols[$0] == nil }) ?? true {
            endpoint.wire = RESTProtocol()
        }
        let attempts = chosen.map(\.attempts).max() ?? 0
        await self.send(endpoint, ids: chosen.map(\.id), attempts: attempts + 1, maxAttempts: chosen.map(\.maxAttempts).min() ?? 1)
    }

    private func send(_ endpoint: Endpoint<Data>, ids: [OutboxItemID], attempts: Int, maxAttempts: Int) async {
        do {
            let response = try await self.client.response(endpoint)
            let result = OutboxItem.Result(
                status: response.status.code, headers: response.headers,
                body: Data(response.value.prefix(self.configuration.resultBodyLimit)))
            self.answered(ids, result: result, bodyError: nil, attempts: attempts, maxAttempts: maxAttempts)
        } catch let failure as CourierError where failure.bodyLostAfterHead {
            // The server answered, and the body was lost (too large, cut short, undecodable,
            // stalled past the deadline, or cancelled while it came): the status decides, as for
            // a whole response — a 2xx was delivered and is not sent again.
            let status = failure.status?.code ?? 0
            let result = OutboxItem.Result(status: status, headers: failure.headers ?? [:], body: Data())
            self.answered(
                ids, result: result, bodyError: "the response body was lost: \(failure.message)", attempts: attempts,
                maxAttempts: maxAttempts)
        } catch {
            if Task.isCancelled {
                // Stopped, not failed: the item stays in line for the next run, and the attempt
                // does not count against its `maxAttempts`. (Recorded by the next run if the
                // write fails now.)
                self.record(ids, state: .pending, error: nil, result: nil, retryAt: Date(), uncounted: true)
                return
            }
            let failure = CourierError.wrap(error)
            if failure.kind == .cancelled {
                // The client cancelled it (`cancelAll`, a shutdown): not the item's failure. It
                // stays in line, after a pause so a shut-down client is not asked in a loop.
                self.record(
                    ids, state: .pending, error: failure.message, result: nil,
                    retryAt: Date().addingTimeInterval(self.configuration.baseDelay.inSeconds), uncounted: true)
            } else if failure.kind == .invalidRequest {
                self.record(ids, state: .dead, error: failure.description, result: nil, retryAt: nil)
            } else {
                self.failed(
                    ids, error: failure.description, result: nil, attempts: attempts, maxAttempts: maxAttempts, retryAfter: nil)
            }
        }
    }

    /// Finishes the items of a response with `result`'s status: a 2xx delivers; a 408, 429 or
    /// 5xx is tried again; any other status is dead. `bodyError` says why the body is missing.
    private func answered(
        _ ids: [OutboxItemID], result: OutboxItem.Result, bodyError: String?, attempts: Int, maxAttempts: Int
    ) {
        let statusError = "status \(result.status)" + (bodyError.map { "; \($0)" } ?? "")
        switch result.status {
        case 200..<300:
            self.record(ids, state: .delivered, error: bodyError, result: result, retryAt: nil)
        // A 409 to an attempt after the first: the server still processes the first one under
        // the same Idempotency-Key (draft-ietf-httpapi-idempotency-key-header §2.6, "the
        // resource server MUST reply with an HTTP 409"), so it is tried again later. To a first
        // attempt it is the server's answer, and the item is dead.
        case 409 where attempts > 1, 408, 429, 500..<600:
            self.failed(
                ids, error: statusError, result: result, attempts: attempts, maxAttempts: maxAttempts,
                retryAfter: result.headers[.retryAfter])
        default:
            self.record(ids, state: .dead, error: statusError, result: result, retryAt: nil)
        }
    }

    private func failed(
        _ ids: [OutboxItemID], error: String, result: OutboxItem.Result?, attempts: Int, maxAttempts: Int, retryAfter: String?
    ) {
        guard attempts < maxAttempts else {
            self.record(ids, state: .dead, error: "\(error) (after \(attempts) attempts)", result: result, retryAt: nil)
            return
        }
        self.record(
            ids, state: .pending, error: error, result: nil,
            retryAt: Date().addingTimeInterval(self.delay(attempt: attempts, retryAfter: retryAfter).inSeconds))
    }

    /// The wait before the next attempt: the server's `Retry-After` (seconds or a date), else
    /// exponential backoff with jitter; never more than ``Configuration/maxDelay``.
    func delay(attempt: Int, retryAfter: String?) -> Duration {
        let cap = self.configuration.maxDelay
        // Read as the retry stage reads it (a repeated field, a date, a huge number).
        if let retryAfter, let wait = RetryPolicy.retryAfter(retryAfter, now: Date()) { return min(wait, cap) }
        let exponent = min(max(0, attempt - 1), 20)
        let base = self.configuration.baseDelay * (1 << exponent)
        return min(base * Double.random(in: 0.5...1.0), cap)
    }

    /// Marks the items in flight: `true` when this loop took them, `false` when another loop
    /// did, or the write failed (then after a wait, so a failing disk is not asked again at once).
    private func take(_ items: [OutboxStore.StoredRequest], batch: String?) async -> Bool {
        do {
            return try self.store.begin(items.map { ($0.id, $0.attempts, $0.batch) }, batch: batch)
        } catch {
            self.failedWrite()
            await self.wakeup.wait(upTo: .seconds(1))
            return false
        }
    }

    private func failedWrite() {
        self.writeFailures.withLock { $0 = Array(($0 + [ContinuousClock.now]).suffix(8)) }
    }

    /// Records how the attempt of items in flight ended. When the write fails (a full disk, a
    /// file locked past the busy timeout or made unwritable), the outcome is kept in memory and
    /// every delivery pass of this outbox tries it again (``recordLeftOver()``): items left in
    /// flight hold their queue, and would be sent again at the next opening.
    private func record(
        _ ids: [OutboxItemID], state: OutboxItem.State, error: String?, result: OutboxItem.Result?, retryAt: Date?, uncounted: Bool = false
    ) {
        var outcome = Unrecorded(ids: ids, state: state, error: error, result: result, retryAt: retryAt, uncounted: uncounted)
        guard let failure = self.write(outcome) else { return }
        outcome.lastFailure = failure
        self.unrecorded.withLock { $0.append(outcome) }
    }

    /// Tries again to record the outcomes whose write failed, oldest first, up to the first the
    /// file still refuses; returns whether none is left. An outcome refused because the file is
    /// full is tried without the response body (its status and fields kept): a file with no room
    /// for the body would refuse it for ever, and hold its queue. An outcome whose items are no
    /// longer in flight (another `Outbox` on the file took them up meanwhile) is dropped.
    private func recordLeftOver() -> Bool {
        let left = self.unrecorded.withLock { list -> [Unrecorded] in
            defer { list.removeAll() }
            return list
        }
        guard !left.isEmpty else { return true }
        var still: [Unrecorded] = []
        for var outcome in left {
            // One refused: the file refuses the rest too (each try may wait the busy timeout).
            guard still.isEmpty else {
                still.append(outcome)
                continue
            }
            if outcome.lastFailure == .full, var result = outcome.result, !result.body.isEmpty {
                result.body = Data()
                outcome.result = result
                outcome.error = (outcome.error.map { "\($0); " } ?? "") + "the response body could not be stored (the file is full)"
            }
            if let failure = self.write(outcome) {
                outcome.lastFailure = failure
                still.append(outcome)
            }
        }
        if !still.isEmpty { self.unrecorded.withLock { $0.insert(contentsOf: still, at: 0) } }
        return still.isEmpty
    }

    /// How an attempt of items in flight ended, as ``finish(_:state:error:result:retryAt:uncounted:)`` records it.
    private struct Unrecorded: Sendable {
        var ids: [OutboxItemID]
        var state: OutboxItem.State
        var error: String?
        var result: OutboxItem.Result?
        var retryAt: Date?
        var uncounted: Bool
        /// Why the file refused it last.
        var lastFailure: OutboxError.Kind?
    }

    /// Writes an outcome of items in flight (of those still in flight only); the kind of
    /// failure when the file refused it.
    private func write(_ outcome: Unrecorded) -> OutboxError.Kind? {
        self.write(
            outcome.ids, state: outcome.state, error: outcome.error, result: outcome.result, retryAt: outcome.retryAt,
            uncounted: outcome.uncounted, from: .inFlight)
    }

    /// Records the end of pending items (expired, or of a batch that cannot go), of those still
    /// pending only: another loop may have taken or ended them since they were read. `false`
    /// when the write failed.
    @discardableResult
    private func finish(
        _ ids: [OutboxItemID], state: OutboxItem.State, error: String?, result: OutboxItem.Result?, retryAt: Date?, uncounted: Bool = false
    ) -> Bool {
        self.write(ids, state: state, error: error, result: result, retryAt: retryAt, uncounted: uncounted, from: .pending) == nil
    }

    /// Records how the items ended, of those still in state `from` only, and yields the
    /// completed ones; the kind of failure when the write failed.
    private func write(
        _ ids: [OutboxItemID], state: OutboxItem.State, error: String?, result: OutboxItem.Result?, retryAt: Date?, uncounted: Bool,
        from: OutboxItem.State
    ) -> OutboxError.Kind? {
        let changed: [OutboxItemID]
        do {
            changed = try self.store.finish(
                ids, state: state, error: error, result: result, retryAt: retryAt, now: Date(), uncounted: uncounted,
                from: from)
        } catch {
            self.failedWrite()
            return error.kind
        }
        // A loop waiting for this queue's item in flight looks again.
        self.wakeup.signal()
        guard state == .delivered || state == .dead else { return nil }
        let subscribers = self.completionsHub.withLock { Array($0.values) }
        guard !subscribers.isEmpty else { return nil }
        for id in changed {
            guard let item = try? self.store.item(id) else { continue }
            for subscriber in subscribers { subscriber.yield(item) }
        }
        return nil
    }

    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!

    /// The endpoint an item is sent as; without a name of its own (`nil`), it is named from its
    /// method and path as the original was, and monitors see it as unnamed.
    static func endpoint(name: String?, method: String, url: String, fields: HTTPFields, body: Data?) -> Endpoint<Data> {
        var endpoint = Endpoint<Data>(
            name: name, method: HTTPRequest.Method(method) ?? .post, path: url, headers: fields,
            // The type stored with the body; none (an item stored before types always were)
            // lets the day's default fields name it, as they did when it was stored.
            body: body.map { .body(.data($0, contentType: fields[.contentType])) },
            acceptedStatuses: 100..<600, decoding: .data
        )
        // Sent as stored, whatever wire protocol the client applies by default.
        endpoint.wire = RESTProtocol()
        return endpoint
    }
}

/// How the items of one queue are sent together: up to `maxCount` items or `maxBytes` of bodies
/// in one request, sent when either is reached or the oldest item is `maxAge` old.
///
/// Each item keeps its own state; a batch's attempt succeeds or fails for all of its items. A
/// batch that failed is sent again with exactly its items and the same `Idempotency-Key`.
public struct OutboxBatching: Sendable {
    /// The most items in one request.
    public var maxCount: Int
    /// The most body bytes in one request.
    public var maxBytes: Int
    /// How long the oldest item waits for others.
    public var maxAge: Duration
    /// Builds the request for a batch (an analytics endpoint taking a JSON array, say). It is sent
    /// as made (`RESTProtocol`), whatever the client's default wire protocol, unless it sets
    /// its own `wire` or names a service the client has a wire protocol for.
    public var makeRequest: @Sendable ([OutboxBatchItem]) -> Endpoint<Data>

    /// Creates a batching rule.
    public init(
        maxCount: Int, maxBytes: Int = 1 << 20, maxAge: Duration, makeRequest: @escaping @Sendable ([OutboxBatchItem]) -> Endpoint<Data>
    ) {
        self.maxCount = max(1, maxCount)
        self.maxBytes = max(1, maxBytes)
        self.maxAge = maxAge
        self.makeRequest = makeRequest
    }

    /// Joins the items' JSON bodies into one JSON array, posted to `url`.
    public static func jsonArray(
        maxCount: Int, maxBytes: Int = 1 << 20, maxAge: Duration, url: String, name: String = "outbox.batch"
    ) -> OutboxBatching {
        OutboxBatching(maxCount: maxCount, maxBytes: maxBytes, maxAge: maxAge) { items in
            var body = Data("[".utf8)
            for (index, item) in items.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                body.append(item.body.isEmpty ? Data("null".utf8) : item.body)
            }
            body.append(UInt8(ascii: "]"))
            return Endpoint<Data>(name: name, method: .post, path: url, body: .data(body, contentType: "application/json"), decoding: .data)
        }
    }
}

/// One item of a batch, as a ``OutboxBatching`` rule sees it.
public struct OutboxBatchItem: Sendable {
    /// The item's id.
    public let id: OutboxItemID
    /// The item's body.
    public let body: Data
    /// The item's own key.
    public let idempotencyKey: String
}

/// Wakes the delivery loop early (an enqueue, a retry) from a timed wait.
final class Wakeup: Sendable {
    private struct State {
        var pending = false
        var waiters: [UUID: CheckedContinuation<Void, Never>] = [:]
        /// Waits that ended (by time) before their waiter was parked: it must not park.
        var abandoned: Set<UUID> = []
    }

    private let state = Locked(State())

    func signal() {
        let waiters = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
            let waiters = Array(state.waiters.values)
            state.waiters.removeAll()
            if waiters.isEmpty { state.pending = true }
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits for a signal (one that came while nobody waited counts), at most `duration`.
    func wait(upTo duration: Duration) async {
        let key = UUID()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = self.state.withLock { state -> Bool in
                        if state.abandoned.remove(key) != nil { return true }
                        if state.pending {
                            state.pending = false
                            return true
                        }
                        state.waiters[key] = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: duration) }
            await group.next()
            group.cancelAll()
            let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let waiter = state.waiters.removeValue(forKey: key) { return waiter }
                state.abandoned.insert(key)
                return nil
            }
            waiter?.resume()
        }
        // A waiter that was signalled or resumed above left no mark; one that never parked did.
        _ = self.state.withLock { $0.abandoned.remove(key) }
    }
}

extension String {
    /// The first 32 hex digits of the SHA-256 of the text.
    var sha256Prefix: String {
        Request.fingerprint(method: "", pathAndQuery: self, wire: "", body: nil).prefix(32).description
    }
}
