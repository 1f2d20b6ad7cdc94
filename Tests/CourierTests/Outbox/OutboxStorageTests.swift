import Courier
import CourierTesting
import Foundation
import GRDB
import Testing

@testable import CourierOutbox

/// Bad storage gives typed errors and loses nothing. No network is involved (the stub transport
/// is never reached), so these run once rather than per transport.
@Suite("Durable outbox: corrupt, locked, read-only and full files; migrations")
struct OutboxStorageTests {
    static let client = Client(configuration: .init(transport: StubTransport { _ in .status(.ok) }) { $0.debugOptions = .off })

    static func post() -> Endpoint<Data> {
        Endpoint<Data>(
            name: "send", method: .post, path: "https://api.example/messages",
            body: .data(Data(#"{"x":1}"#.utf8), contentType: "application/json"), decoding: .data)
    }

    /// An enqueue that returned survives a power cut only if its commit was fsynced: SQLite's
    /// `synchronous = FULL` on the connection that commits, in WAL mode. GRDB sets `NORMAL` when it
    /// turns WAL mode on, after the connection's own preparation, which had set `FULL`: commits
    /// were not synced (a crash of the process alone loses nothing either way, so the crash
    /// tests could not see it). An app's own `synchronous` pragma still wins.
    @Test(arguments: [([String](), 2), (["PRAGMA synchronous = EXTRA"], 3)])
    func theConnectionThatCommitsSyncsEveryCommit(_ pragmas: [String], _ expected: Int) throws {
        let path = OutboxTests.databasePath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var configuration = Outbox.Configuration()
        configuration.pragmas = pragmas
        let outbox = try Outbox(path: path, client: Self.client, configuration: configuration)
        try outbox.enqueue(Self.post())
        let (synchronous, journal) = try outbox.store.pool.writeWithoutTransaction { db in
            (try Int.fetchOne(db, sql: "PRAGMA synchronous"), try String.fetchOne(db, sql: "PRAGMA journal_mode"))
        }
        #expect(synchronous == expected)
        #expect(journal == "wal")
        #expect(try outbox.items().count == 1)
    }

    /// The file holds request bodies, headers and answers: readable by every user of the machine
    /// (0644 under the usual umask) it gave them away.
    @Test
    func aNewOutboxAndItsJournalAreReadableByTheirOwnerOnly() throws {
        let path = OutboxTests.databasePath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let outbox = try Outbox(path: path, client: Self.client)
        try outbox.enqueue(Self.post())
        for suffix in ["", "-wal"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: path + suffix)
            let permissions = try #require(attributes[.posixPermissions] as? NSNumber).intValue
            #expect(permissions & 0o077 == 0, "\(suffix): \(String(permissions, radix: 8))")
        }
    }

    @Test
    func aFileThatIsNotADatabaseIsCorrupt() throws {
        let path = OutboxTests.databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: OutboxError.self) { _ = try Outbox(path: path, client: Self.client) }
        #expect(error?.kind == .corrupt)
    }

    @Test
    func aDirectoryInPlaceOfTheFileCannotBeOpened() throws {
        let path = OutboxTests.databasePath()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let error = #expect(throws: OutboxError.self) { _ = try Outbox(path: path, client: Self.client) }
        #expect(error?.kind == .cannotOpen)
    }

    @Test
    func aDatabaseHeldByAnotherConnectionIsLockedAndTheEnqueueStoresNothing() throws {
        let path = OutboxTests.databasePath()
        var configuration = Outbox.Configuration()
        configuration.busyTimeout = .milliseconds(200)
        let outbox = try Outbox(path: path, client: Self.client, configuration: configuration)
        try outbox.enqueue(Self.post())
        // Another process's connection (here another SQLite connection) holds the write lock.
        var holder = GRDB.Configuration()
        holder.allowsUnsafeTransactions = true
        let other = try DatabaseQueue(path: path, configuration: holder)
        try other.inDatabase { db in try db.execute(sql: "BEGIN EXCLUSIVE") }
        let error = #expect(throws: OutboxError.self) { try outbox.enqueue(Self.post()) }
        #expect(error?.kind == .locked)
        #expect(error?.nothingStored == true)
        try other.inDatabase { db in try db.execute(sql: "COMMIT") }
        #expect(try outbox.items().count == 1)
        try outbox.enqueue(Self.post())
        #expect(try outbox.items().count == 2)
    }

    @Test
    func aReadOnlyDatabaseRefusesTheEnqueueWithATypedError() throws {
        // The suite runs as root in CI, for whom file permissions do not stop a write; SQLite's
        // own read-only switch makes every write fail as a read-only file would.
        let path = OutboxTests.databasePath()
        _ = try Outbox(path: path, client: Self.client)
        var configuration = Outbox.Configuration()
        configuration.pragmas = ["PRAGMA query_only = ON"]
        let error = #expect(throws: OutboxError.self) { _ = try Outbox(path: path, client: Self.client, configuration: configuration) }
        #expect(error?.kind == .readOnly)
    }

    @Test
    func aFullDatabaseRefusesTheEnqueueAndKeepsWhatItHad() throws {
        let path = OutboxTests.databasePath()
        var configuration = Outbox.Configuration()
        configuration.pragmas = ["PRAGMA max_page_count = 16"]
        let outbox = try Outbox(path: path, client: Self.client, configuration: configuration)
        try outbox.enqueue(Self.post())
        let big = Endpoint<Data>(
            name: "big", method: .post, path: "https://api.example/upload",
            body: .data(Data(count: 256 * 1024), contentType: "application/octet-stream"), decoding: .data)
        let error = #expect(throws: OutboxError.self) { try outbox.enqueue(big) }
        #expect(error?.kind == .full)
        #expect(try outbox.items().map(\.name) == ["send"])
    }

    @Test
    func aStreamedBodyCannotBeStored() throws {
        let outbox = try Outbox(path: OutboxTests.databasePath(), client: Self.client)
        let stream = Endpoint<Data>(
            name: "stream", method: .post, path: "https://api.example/up",
            body: .body(.stream(AsyncStream<Data> { $0.finish() }, length: nil)), decoding: .data)
        let error = #expect(throws: OutboxError.self) { try outbox.enqueue(stream) }
        #expect(error?.kind == .invalidRequest)
        #expect(try outbox.items().isEmpty)
    }

    @Test
    func aDatabaseFromTheFirstSchemaIsMigratedWithItsItems() throws {
        let path = OutboxTests.databasePath()
        let old = try DatabaseQueue(path: path)
        try OutboxStore.migrator.migrate(old, upTo: "v1")
        try old.write { db in
            try db.execute(
                sql: """
                    INSERT INTO item (queue, name, method, url, headers, body, idempotency_key, state, max_attempts, created_at, next_attempt_at)
                    VALUES ('default', 'legacy', 'POST', 'https://api.example/old', '[["content-type","application/json"]]', X'7B7D', 'k-legacy', 'pending', 10, 0, 0)
                    """)
            // Stored with `maxAttempts: .max` before the limit was capped: read as corrupt then.
            try db.execute(
                sql: """
                    INSERT INTO item (queue, name, method, url, headers, body, idempotency_key, state, max_attempts, created_at, next_attempt_at)
                    VALUES ('forever', 'legacy', 'POST', 'https://api.example/old', '[]', X'7B7D', 'k-forever', 'pending', 9223372036854775807, 0, 0)
                    """)
        }
        try old.close()
        let outbox = try Outbox(path: path, client: Self.client)
        let items = try outbox.items()
        #expect(items.map(\.name) == ["legacy", "legacy"])
        #expect(items.first?.idempotencyKey == "k-legacy")
        #expect(items.last?.maxAttempts == Int(Int32.max))
        let applied = try outbox.store.pool.read { db in try OutboxStore.migrator.appliedIdentifiers(db) }
        #expect(applied == ["v1", "v2-batches", "v3-service", "v4-own-name"])
        let columns = try outbox.store.pool.read { db in try db.columns(in: "item").map(\.name) }
        #expect(columns.contains("batch"))
        #expect(columns.contains("service"))
        // An item stored before the column kept its name as the endpoint's own.
        #expect(try outbox.store.heads { _ in 1 }["default"]?.first?.hasOwnName == true)
    }

    @Test(arguments: [
        ("attempts", "'x'"), ("attempts", "1e30"), ("attempts", "1.5"), ("attempts", "9223372036854775807"), ("attempts", "-1"),
        ("created_at", "'soon'"), ("next_attempt_at", "X'FF'"), ("max_attempts", "'many'"), ("queue", "X'FF'"),
        // Sent without its fields, or as another method, it would be another request than the one stored.
        ("headers", "'x'"), ("method", "'GE T'"), ("state", "'flying'"),
    ])
    func aStoredValueThatCannotBeReadIsCorruptNeverACrash(_ column: String, _ value: String) async throws {
        // GRDB's non-optional row subscript traps on a value of the wrong type, and an attempt
        // count near Int.max would overflow the next attempt's number: a file written by something
        // else must give kind `corrupt`, and deliver nothing it cannot read.
        let path = OutboxTests.databasePath()
        let stub = StubTransport { _ in .status(.ok) }
        let client = Client(configuration: .init(transport: stub) { $0.debugOptions = .off })
        let outbox = try Outbox(path: path, client: client)
        let id = try outbox.enqueue(Self.post())
        let other = try DatabaseQueue(path: path)
        // (The columns are NOT NULL: a value of the wrong type, or bytes that are not UTF-8 text.)
        try await other.write { db in try db.execute(sql: "UPDATE item SET \(column) = \(value) WHERE id = ?", arguments: [id.rawValue]) }
        try other.close()
        let error = #expect(throws: OutboxError.self) { _ = try outbox.items() }
        #expect(error?.kind == .corrupt)
        #expect(throws: OutboxError.self) { _ = try outbox.item(id) }
        // Delivery skips the unreadable item's queue instead of sending it or spinning.
        await outbox.deliverAll()
        #expect(stub.requests.isEmpty)
    }

    @Test
    func aWriteThatFailsIsTriedAgainAfterAWaitNotInALoop() async throws {
        // The disk refuses writes (full, or the file made read-only) while reads still work: the
        // item is due, and every attempt to mark it in flight fails. The loop waits between
        // attempts (it spun at full speed, asking the disk again at once, and `deliverAll` with it).
        let path = OutboxTests.databasePath()
        let stub = StubTransport { _ in .status(.ok) }
        let client = Client(configuration: .init(transport: stub) { $0.debugOptions = .off })
        let outbox = try Outbox(path: path, client: client)
        _ = try outbox.enqueue(Self.post())
        let other = try DatabaseQueue(path: path)
        try await other.write { db in
            try db.execute(
                sql: """
                    CREATE TRIGGER refuse BEFORE UPDATE OF state ON item WHEN NEW.state = 'inFlight'
                    BEGIN SELECT RAISE(ABORT, 'disk full'); END
                    """)
        }
        try other.close()
        outbox.start()
        #expect(await eventually { outbox.writeFailures.current.count >= 3 })
        await outbox.stop()
        let failures = outbox.writeFailures.current
        #expect(failures.count >= 3)
        // (The first wait may end at once: the enqueue's wake-up is still there to take.)
        if failures.count >= 3 { #expect(failures[2] - failures[1] >= .milliseconds(900)) }
        #expect(stub.requests.isEmpty)
    }

    /// Two delivery loops (`start()` and `deliverAll()`) read the same head. The first takes
    /// its items, sends them as a batch, and puts them back in line after a failure; the second,
    /// going on from what it read before, must not take them into a batch of its own under
    /// another key (the server may have applied the first): they may go only with their batch.
    /// An item found expired (or left without its batch rule) is ended only while still pending:
    /// `start()` and `deliverAll()` may read it at once. Unguarded, the second loop's mark changed
    /// it again (reported dead twice to `completions()`), and a loop that found it expired after
    /// the other took it in flight made it dead under the delivery being made, whose answer was
    /// then not recorded.
    @Test
    func anEndFoundOnAStaleReadChangesOnlyAPendingItem() throws {
        let path = OutboxTests.databasePath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let outbox = try Outbox(path: path, client: Self.client)
        let id = try outbox.enqueue(Self.post(), queue: "q")
        let read = try #require(try outbox.store.heads { _ in 1 }["q"])
        #expect(try outbox.store.begin(read.map { ($0.id, $0.attempts, $0.batch) }, batch: nil))
        func expire() throws -> [OutboxItemID] {
            try outbox.store.finish([id], state: .dead, error: "expired", result: nil, retryAt: nil, now: Date(), from: .pending)
        }
        // Taken in flight by one loop; the other, on its earlier read, finds it expired.
        #expect(try expire().isEmpty)
        #expect(try outbox.item(id)?.state == .inFlight)
        let delivered = try outbox.store.finish(
            [id], state: .delivered, error: nil, result: nil, retryAt: nil, now: Date(), from: .inFlight)
        #expect(delivered == [id])
        #expect(try expire().isEmpty)
        #expect(try outbox.item(id)?.state == .delivered)
        // A pending item is ended once: the second mark changes nothing, so nothing is reported twice.
        let other = try outbox.enqueue(Self.post(), queue: "r")
        for expected in [[other], []] {
            let marked = try outbox.store.finish(
                [other], state: .dead, error: "expired", result: nil, retryAt: nil, now: Date(), from: .pending)
            #expect(marked == expected)
        }
    }

    @Test
    func itemsChangedSinceTheyWereReadAreNotTaken() throws {
        let path = OutboxTests.databasePath()
        let outbox = try Outbox(path: path, client: Self.client)
        for _ in 0..<2 { try outbox.enqueue(Self.post(), queue: "q") }
        let read = try #require(try outbox.store.heads { _ in 2 }["q"])
        #expect(read.map(\.attempts) == [0, 0])
        let asRead = read.map { ($0.id, $0.attempts, $0.batch) }
        #expect(try outbox.store.begin(asRead, batch: "batch-first"))
        try outbox.store.finish(read.map(\.id), state: .pending, error: "status 503", result: nil, retryAt: Date(), now: Date())
        #expect(try outbox.store.begin(asRead, batch: "batch-second") == false)
        #expect(try outbox.items().map(\.state) == [.pending, .pending])
        #expect(try outbox.items().map(\.attempts) == [1, 1])
        #expect(try outbox.store.heads { _ in 2 }["q"]?.map(\.batch) == ["batch-first", "batch-first"])
        // Only the batch differs (a delivery the client cancelled takes its attempt back, and
        // leaves the batch it was sent in): not taken either.
        try outbox.store.finish(read.map(\.id), state: .pending, error: nil, result: nil, retryAt: Date(), now: Date(), uncounted: true)
        #expect(try outbox.store.heads { _ in 2 }["q"]?.map(\.attempts) == [0, 0])
        #expect(try outbox.store.begin(asRead, batch: "batch-second") == false)
        // Read again, as they are now, they are taken (with their batch).
        let now = try #require(try outbox.store.heads { _ in 2 }["q"])
        #expect(now.map(\.batch) == ["batch-first", "batch-first"])
        #expect(now.map(\.attempts) == [0, 0])
        #expect(try outbox.store.begin(now.map { ($0.id, $0.attempts, $0.batch) }, batch: "batch-first"))
        #expect(try outbox.items().map(\.state) == [.inFlight, .inFlight])
    }

    /// A batch key that is not text (a file written by something else) cannot be told from
    /// none: the item is corrupt, held in its queue, never sent as an item of no batch (under a
    /// new key) and never a loop that tries to take it for ever.
    @Test
    func aBatchKeyThatIsNotTextHoldsItsQueue() async throws {
        let path = OutboxTests.databasePath()
        let stub = StubTransport { _ in .status(.ok) }
        let client = Client(configuration: .init(transport: stub) { $0.debugOptions = .off })
        let outbox = try Outbox(path: path, client: client)
        let id = try outbox.enqueue(Self.post(), queue: "q")
        let kept = try outbox.enqueue(Self.post(), queue: "other")
        try await OutboxTests.alter(path, "UPDATE item SET batch = X'FF', attempts = 1 WHERE id = ?", item: id)
        await outbox.deliverAll()
        #expect(stub.requests.count == 1)
        #expect(try outbox.item(kept)?.state == .delivered)
        #expect(try outbox.item(id)?.state == .pending)
    }

    @Test
    func oneUnreadableCompletionHidesNoOther() async throws {
        // Completions left from before a restart are read row by row: one written by something
        // else is left out (`items()` reports it corrupt); the others still come.
        let path = OutboxTests.databasePath()
        let stub = StubTransport { _ in .status(.ok) }
        let client = Client(configuration: .init(transport: stub) { $0.debugOptions = .off })
        let outbox = try Outbox(path: path, client: client)
        let ids = try (0..<2).map { _ in try outbox.enqueue(Self.post()) }
        await outbox.deliverAll()
        let other = try DatabaseQueue(path: path)
        try await other.write { db in try db.execute(sql: "UPDATE item SET method = 'GE T' WHERE id = ?", arguments: [ids[0].rawValue]) }
        try other.close()
        var completions = outbox.completions().makeAsyncIterator()
        #expect(await completions.next()?.id == ids[1])
        #expect(throws: OutboxError.self) { _ = try outbox.items() }
    }

    @Test
    func anAttemptLimitBeyondWhatIsStoredIsCappedNotAFrozenQueue() async throws {
        // `maxAttempts: .max` ("for ever") is kept as the largest count an item may have
        // (2^31 - 1), not stored as given and then refused as corrupt at every read.
        let stub = StubTransport { _ in .status(.ok) }
        let client = Client(configuration: .init(transport: stub) { $0.debugOptions = .off })
        let outbox = try Outbox(path: OutboxTests.databasePath(), client: client)
        let id = try outbox.enqueue(Self.post(), maxAttempts: .max)
        #expect(try outbox.item(id)?.maxAttempts == Int(Int32.max))
        await outbox.deliverAll()
        #expect(try outbox.item(id)?.state == .delivered)
        #expect(stub.requests.count == 1)
    }

    @Test
    func anItemInterruptedDuringItsLastAttemptIsDeadAfterARestart() async throws {
        // The attempt is counted when it begins; a process that died during an item's last
        // allowed attempt leaves it in flight. Reopened, it is dead, not sent again (an item
        // whose sending kills the process would otherwise be sent at every launch); one with
        // attempts left is sent again.
        let path = OutboxTests.databasePath()
        let stub = StubTransport { _ in .status(.ok) }
        let client = Client(configuration: .init(transport: stub) { $0.debugOptions = .off })
        let first = try Outbox(path: path, client: client)
        let last = try first.enqueue(Self.post(), queue: "a", maxAttempts: 2)
        let more = try first.enqueue(Self.post(), queue: "b", maxAttempts: 3)
        // A batch whose items have limits of 2 and 5: it ends whole at its smallest.
        let batched = try [2, 5].map { try first.enqueue(Self.post(), queue: "c", maxAttempts: $0) }
        // One whose items were tried apart before they were batched (4 of 10, 1 of 3): its
        // attempts (4) reached its smallest limit (3), as the running outbox counts them.
        let uneven = try [10, 3].map { try first.enqueue(Self.post(), queue: "d", maxAttempts: $0) }
        let other = try DatabaseQueue(path: path)
        try await other.write { db in
            try db.execute(
                sql: "UPDATE item SET state = 'inFlight', attempts = 2 WHERE id IN (?, ?)", arguments: [last.rawValue, more.rawValue])
            try db.execute(sql: "UPDATE item SET state = 'inFlight', attempts = 2, batch = 'batch-c' WHERE queue = 'c'")
            try db.execute(
                sql:
                    "UPDATE item SET state = 'inFlight', attempts = CASE WHEN id = ? THEN 4 ELSE 1 END, batch = 'batch-d' WHERE queue = 'd'",
                arguments: [uneven[0].rawValue])
        }
        try other.close()
        let reopened = try Outbox(path: path, client: client)
        let dead = try #require(try reopened.item(last))
        #expect(dead.state == .dead)
        #expect(dead.lastError?.contains("interrupted during its last allowed attempt (2 of 2)") == true)
        #expect(try reopened.item(more)?.state == .pending)
        let batch = try batched.map { try #require(try reopened.item($0)) }
        #expect(batch.map(\.state) == [.dead, .dead])
        #expect(batch[1].lastError == "interrupted during the last allowed attempt of the batch it was sent in")
        #expect(try uneven.map { try reopened.item($0)?.state } == [.dead, .dead])
        await reopened.deliverAll()
        #expect(try reopened.item(more)?.state == .delivered)
        #expect(try reopened.item(last)?.state == .dead)
        #expect(stub.requests.count == 1)
    }

    @Test
    func aCallAWireProtocolBoxesIsRefusedAndARESTOneIsSentAsStored() async throws {
        // The outbox replays the stored logical request; a JSON-RPC call needs a fresh envelope
        // (and id) per attempt, so it is refused with a clear error instead of sent unboxed.
        let stub = StubTransport { _ in .json(#"{"ok":true}"#) }
        let client = Client(
            configuration: .init(transport: stub) {
                $0.debugOptions = .off
                $0.defaultWireProtocol = JSONRPCProtocol()
            })
        let outbox = try Outbox(path: OutboxTests.databasePath(), client: client)
        let refused = #expect(throws: OutboxError.self) { try outbox.enqueue(Self.post()) }
        #expect(refused?.kind == .invalidRequest)
        var rest = Self.post()
        rest.wire = RESTProtocol()
        let id = try outbox.enqueue(rest)
        await outbox.deliverAll()
        #expect(try outbox.item(id)?.state == .delivered)
        // Delivered as stored: not wrapped in an envelope by the client's default protocol.
        #expect(stub.requests.first?.body?.bytes == Data(#"{"x":1}"#.utf8))
    }

    @Test
    func aRetryAfterDateCenturiesAwayIsCappedNotATrap() throws {
        var configuration = Outbox.Configuration()
        configuration.maxDelay = .seconds(300)
        let outbox = try Outbox(path: OutboxTests.databasePath(), client: Self.client, configuration: configuration)
        #expect(outbox.delay(attempt: 1, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT") == .seconds(300))
        #expect(outbox.delay(attempt: 1, retryAfter: "18446744073709551615") == .seconds(300))
        #expect(outbox.delay(attempt: 1, retryAfter: "7") == .seconds(7))
        #expect(outbox.delay(attempt: 60, retryAfter: "-5") <= .seconds(300))
    }

    /// RFC 9110 §5.3: a `Retry-After` sent twice arrives joined ("7, 7"); the outbox reads it as
    /// the retry stage does, the repeated value being that value (a date holds a comma itself).
    @Test
    func aRetryAfterSentTwiceIsItsOneValueAndTwoDifferentOnesAreNone() throws {
        var configuration = Outbox.Configuration()
        configuration.baseDelay = .seconds(1)
        configuration.maxDelay = .seconds(300)
        let outbox = try Outbox(path: OutboxTests.databasePath(), client: Self.client, configuration: configuration)
        #expect(outbox.delay(attempt: 1, retryAfter: "7, 7") == .seconds(7))
        #expect(outbox.delay(attempt: 1, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT, Fri, 31 Dec 9999 23:59:59 GMT") == .seconds(300))
        // Different values: no value, so the backoff (at most the base delay on a first attempt).
        #expect(outbox.delay(attempt: 1, retryAfter: "7, 200") <= .seconds(1))
    }
}
