import Courier
import Foundation
import GRDB
import HTTPTypes

/// The outbox's SQLite file, through GRDB: schema, migrations and every query.
final class OutboxStore: Sendable {
    let pool: DatabasePool

    /// Opens (creating if needed) and migrates the database at `path`; with `recovers`, items
    /// found in flight are put back in line (see below).
    init(path: String, busyTimeout: TimeInterval, pragmas: [String], recovers: Bool = true) throws(OutboxError) {
        var configuration = GRDB.Configuration()
        configuration.busyMode = .timeout(busyTimeout)
        configuration.label = "courier.outbox"
        let extra = pragmas
        configuration.prepareDatabase { db in
            for pragma in extra { try db.execute(sql: pragma) }
        }
        Self.createOwnerOnly(path)
        do {
            self.pool = try DatabasePool(path: path, configuration: configuration)
            // Every commit reaches the disk before it returns (the WAL is fsynced): an enqueue
            // that returned survives a crash and a power cut. Set on the writer (the one
            // connection that commits) after the pool is open: GRDB sets `synchronous = NORMAL`
            // when it turns WAL mode on, after `prepareDatabase` ran. The configured pragmas
            // (`Outbox.Configuration.pragmas`, set by tests) are applied again after it, so one
            // that sets `synchronous` still wins.
            try self.pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                for pragma in extra { try db.execute(sql: pragma) }
            }
            try Self.migrator.migrate(self.pool)
            guard recovers else { return }
            // An item in flight when the process died was interrupted: it is sent again, unless
            // that was its last attempt (counted when it began). An item whose sending ends the
            // process every time (a watchdog's kill mid-upload) then stops at its `maxAttempts`
            // instead of being sent at every launch. A batch ends whole, as it does while running
            // (at its smallest limit): its other items sent again alone would be a new batch.
            try self.pool.write { db in
                try db.execute(
                    sql: """
                        UPDATE item SET state = 'dead', finished_at = ?,
                            last_error = CASE WHEN attempts >= max_attempts
                                THEN 'interrupted during its last allowed attempt (' || attempts || ' of ' || max_attempts || ')'
                                ELSE 'interrupted during the last allowed attempt of the batch it was sent in' END
                        WHERE state = 'inFlight' AND (attempts >= max_attempts OR batch IN (
                            SELECT batch FROM item WHERE state = 'inFlight' AND batch IS NOT NULL
                            GROUP BY batch HAVING MAX(attempts) >= MIN(max_attempts)))
                        """,
                    arguments: [Date().timeIntervalSince1970])
                try db.execute(sql: "UPDATE item SET state = 'pending' WHERE state = 'inFlight'")
            }
        } catch {
            throw Self.map(error, "opening the outbox at \(path)")
        }
    }

    /// Creates the database file, if it is not there, readable and writable by its owner only
    /// (0600): it holds request bodies, headers and answers. SQLite makes the `-wal` and `-shm`
    /// files with the database file's permissions; a file that exists keeps its own.
    private static func createOwnerOnly(_ path: String) {
        guard !path.isEmpty, path != ":memory:", !path.hasPrefix("file:") else { return }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
    }

    /// The schema, one versioned migration at a time (GRDB's migrator records which have run).
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE item (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        queue TEXT NOT NULL,
                        reference TEXT UNIQUE,
                        name TEXT NOT NULL,
                        method TEXT NOT NULL,
                        url TEXT NOT NULL,
                        headers TEXT NOT NULL,
                        body BLOB,
                        idempotency_key TEXT NOT NULL UNIQUE,
                        state TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        max_attempts INTEGER NOT NULL,
                        created_at REAL NOT NULL,
                        expires_at REAL,
                        next_attempt_at REAL NOT NULL,
                        last_error TEXT,
                        result_status INTEGER,
                        result_headers TEXT,
                        result_body BLOB,
                        finished_at REAL,
                        acknowledged INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX item_by_queue ON item(queue, state, id);
                    """)
        }
        migrator.registerMigration("v2-batches") { db in
            // Items delivered together in one request share a batch id.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN batch TEXT")
        }
        migrator.registerMigration("v3-service") { db in
            // The endpoint's service: its middleware (authentication, signing) runs at delivery.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN service TEXT")
        }
        migrator.registerMigration("v4-own-name") { db in
            // Whether the name was the endpoint's own or made from its method and path (which may
            // hold ids): monitors label an unnamed one `unnamed`, at delivery too. Items stored
            // before kept their name as the endpoint's.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN has_own_name INTEGER NOT NULL DEFAULT 1")
            // An attempt limit stored as given before it was capped (`.max`) is read as corrupt,
            // which held its queue: capped here as `enqueue` caps it now.
            try db.execute(
                sql: "UPDATE item SET max_attempts = 2147483647 WHERE typeof(max_attempts) = 'integer' AND max_attempts > 2147483647")
        }
        return migrator
    }

    // MARK: - Writing

    struct NewItem: Sendable {
        var queue: String
        var reference: String?
        var name: String
        var method: String
        var url: String
        var headers: [[String]]
        var body: Data?
        var idempotencyKey: String
        var maxAttempts: Int
        var createdAt: Date
        var expiresAt: Date?
        /// The endpoint's service, if it names one.
        var service: String?
        /// Whether `name` is the endpoint's own (not made from its method and path).
        var hasOwnName = true
    }

    /// Stores an item; with a reference already stored, returns that item's id and stores nothing.
    func insert(_ item: NewItem) throws(OutboxError) -> OutboxItemID {
        do {
            return try self.pool.write { db -> OutboxItemID in
                if let reference = item.reference,
                    let existing = try Int64.fetchOne(db, sql: "SELECT id FROM item WHERE reference = ?", arguments: [reference])
                {
                    return OutboxItemID(rawValue: existing)
                }
                // An endpoint's own idempotency key names one intent, like a reference.
                if let existing = try Int64.fetchOne(
                    db, sql: "SELECT id FROM item WHERE idempotency_key = ?", arguments: [item.idempotencyKey])
                {
                    return OutboxItemID(rawValue: existing)
                }
                let headers = String(decoding: try JSONEncoder().encode(item.headers), as: UTF8.self)
                try db.execute(
                    sql: """
                        INSERT INTO item (queue, reference, name, method, url, headers, body, idempotency_key, state, max_attempts,
                                          created_at, expires_at, next_attempt_at, service, has_own_name)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        item.queue, item.reference, item.name, item.method, item.url, headers, item.body, item.idempotencyKey,
                        item.maxAttempts, item.createdAt.timeIntervalSince1970, item.expiresAt?.timeIntervalSince1970,
                        item.createdAt.timeIntervalSince1970, item.service, item.hasOwnName ? 1 : 0,
                    ]
                )
                return OutboxItemID(rawValue: db.lastInsertedRowID)
            }
        } catch {
            throw Self.map(error, "storing the item")
        }
    }

    /// Marks the items as being sent (one more attempt each), durably, before anything goes on
    /// the wire — all of them, or none when any is no longer pending as it was read, with the
    /// attempts and batch given (another delivery loop took it first: `start()` and
    /// `deliverAll()` at once; or took it, sent it in a batch and put it back in line meanwhile,
    /// when it may go only with that batch). Returns whether they were taken.
    @discardableResult
    func begin(_ items: [(id: OutboxItemID, attempts: Int, batch: String?)], batch: String?) throws(OutboxError) -> Bool {
        do {
            return try self.pool.write { db -> Bool in
                for item in items {
                    try db.execute(
                        sql: """
                            UPDATE item SET state = 'inFlight', attempts = attempts + 1, batch = ?
                            WHERE id = ? AND state = 'pending' AND attempts = ? AND batch IS ?
                            """,
                        arguments: [batch, item.id.rawValue, item.attempts, item.batch]
                    )
                    // Not as read: roll the whole transaction back, so no item of it is taken.
                    guard db.changesCount == 1 else { throw NotTaken() }
                }
                return true
            }
        } catch is NotTaken {
            return false
        } catch {
            throw Self.map(error, "marking items in flight")
        }
    }

    /// Thrown inside ``begin(_:batch:)``'s transaction to roll it back.
    private struct NotTaken: Error {}

    /// Records how the items' attempt ended.
    ///
    /// `uncounted`: the attempt ``begin(_:batch:)`` counted did not happen as far as the item is
    /// concerned (its delivery was stopped or cancelled on the way), so it is taken back.
    /// `from`: only items in that state are changed — in flight, for an attempt's outcome (one
    /// recorded late must not undo what happened to an item since); pending, for one found
    /// expired on a read that another loop may have acted on since (taken in flight, delivered,
    /// or marked dead already, which would be reported twice). Returns the items changed.
    @discardableResult
    func finish(
        _ ids: [OutboxItemID], state: OutboxItem.State, error: String?, result: OutboxItem.Result?, retryAt: Date?, now: Date,
        uncounted: Bool = false, from: OutboxItem.State? = nil
    ) throws(OutboxError) -> [OutboxItemID] {
        do {
            // A delivery replaces what earlier attempts left: its answer is the result, and its
            // error (what became of the body, if anything) the last word. Otherwise a field not
            // given keeps the earlier attempt's.
            func field(_ name: String) -> String { state == .delivered ? "\(name) = ?" : "\(name) = COALESCE(?, \(name))" }
            let sql = """
                UPDATE item SET state = ?, \(field("last_error")), \(field("result_status")),
                    \(field("result_headers")), \(field("result_body")),
                    next_attempt_at = COALESCE(?, next_attempt_at), finished_at = ?, attempts = MAX(0, attempts - ?)
                WHERE id = ? AND (? IS NULL OR state = ?)
                """
            let headers = try result.map { result in
                String(decoding: try JSONEncoder().encode(result.headers.map { [$0.name.canonicalName, $0.value] }), as: UTF8.self)
            }
            return try self.pool.write { db -> [OutboxItemID] in
                var changed: [OutboxItemID] = []
                for id in ids {
                    try db.execute(
                        sql: sql,
                        arguments: [
                            state.rawValue, error, result?.status, headers, result?.body, retryAt?.timeIntervalSince1970,
                            state == .delivered || state == .dead ? now.timeIntervalSince1970 : nil, uncounted ? 1 : 0, id.rawValue,
                            from?.rawValue, from?.rawValue,
                        ]
                    )
                    if db.changesCount == 1 { changed.append(id) }
                }
                return changed
            }
        } catch {
            throw Self.map(error, "recording a delivery")
        }
    }

    /// Sends a dead item again: pending, attempts reset, due now.
    /// Puts a dead item back in line; an item of a batch that was sent brings back that batch's
    /// other dead items with it, so the batch goes again whole, with its body and its key (the
    /// server may have applied it; one item alone under that key would be the key reused with
    /// another body, and under a new key a second application).
    func revive(_ id: OutboxItemID, now: Date) throws(OutboxError) {
        let changed: Int
        do {
            changed = try self.pool.write { db in
                try db.execute(
                    sql:
                        """
                        UPDATE item SET state = 'pending', attempts = 0, next_attempt_at = ?, finished_at = NULL, expires_at = NULL,
                            acknowledged = 0, result_status = NULL, result_headers = NULL, result_body = NULL
                        WHERE state = 'dead' AND (id = ? OR batch = (SELECT batch FROM item WHERE id = ? AND state = 'dead'))
                        """,
                    arguments: [now.timeIntervalSince1970, id.rawValue, id.rawValue]
                )
                return db.changesCount
            }
        } catch {
            throw Self.map(error, "retrying item \(id)")
        }
        if changed == 0 { throw OutboxError(.notFound, "no dead item with id \(id)") }
    }

    /// Marks a completed (delivered or dead) item acknowledged; `notFound` for any other.
    func acknowledge(_ id: OutboxItemID) throws(OutboxError) {
        let changed: Int
        do {
            changed = try self.pool.write { db in
                try db.execute(
                    sql: "UPDATE item SET acknowledged = 1 WHERE id = ? AND state IN ('delivered', 'dead')", arguments: [id.rawValue])
                return db.changesCount
            }
        } catch {
            throw Self.map(error, "acknowledging item \(id)")
        }
        if changed == 0 { throw OutboxError(.notFound, "no delivered or dead item with id \(id)") }
    }

    /// Deletes finished items the app acknowledged: delivered ones finished before
    /// `deliveredBefore`, dead ones finished before `deadBefore`. Returns how many went.
    func prune(deliveredBefore: Date, deadBefore: Date) throws(OutboxError) -> Int {
        do {
            return try self.pool.write { db in
                try db.execute(
                    sql:
                        "DELETE FROM item WHERE (state = 'delivered' AND acknowledged = 1 AND finished_at < ?) OR (state = 'dead' AND acknowledged = 1 AND finished_at < ?)",
                    arguments: [deliveredBefore.timeIntervalSince1970, deadBefore.timeIntervalSince1970]
                )
                return db.changesCount
            }
        } catch {
            throw Self.map(error, "pruning")
        }
    }

    // MARK: - Reading

    func item(_ id: OutboxItemID) throws(OutboxError) -> OutboxItem? {
        try self.read { db in try Row.fetchOne(db, sql: "SELECT * FROM item WHERE id = ?", arguments: [id.rawValue]).map(Self.item(from:)) }
    }

    func items(state: OutboxItem.State?, limit: Int = Int.max) throws(OutboxError) -> [OutboxItem] {
        try self.read { db in
            if let state {
                return try Row.fetchAll(
                    db, sql: "SELECT * FROM item WHERE state = ? ORDER BY id LIMIT ?", arguments: [state.rawValue, limit]
                ).map(Self.item(from:))
            }
            return try Row.fetchAll(db, sql: "SELECT * FROM item ORDER BY id LIMIT ?", arguments: [limit]).map(Self.item(from:))
        }
    }

    /// Completed (delivered or dead) items the app has not acknowledged, oldest first.
    /// Completed items the app has not acknowledged, oldest first; one that cannot be read is
    /// left out (it would hide every other completion), as ``items(state:)`` reports it corrupt.
    func unacknowledged() throws(OutboxError) -> [OutboxItem] {
        try self.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM item WHERE state IN ('delivered', 'dead') AND acknowledged = 0 ORDER BY finished_at, id"
            ).compactMap { try? Self.item(from: $0) }
        }
    }

    /// Whether an item waits behind an item of its queue that is in flight.
    func hasPendingBehindInFlight() throws(OutboxError) -> Bool {
        try self.read { db in
            try Bool.fetchOne(
                db,
                sql:
                    "SELECT EXISTS (SELECT 1 FROM item WHERE state = 'pending' AND queue IN (SELECT queue FROM item WHERE state = 'inFlight'))"
            ) ?? false
        }
    }

    /// The head of each queue that still has work and none in flight: its oldest pending items, at
    /// most `limit(queue)` (read with their bodies: a queue that does not batch needs one). A
    /// queue whose item is on its way (taken by another delivery loop) is left alone until it is
    /// back: the items of one queue go one at a time, in order.
    func heads(limit: (String) -> Int) throws(OutboxError) -> [String: [StoredRequest]] {
        try self.read { db in
            var heads: [String: [StoredRequest]] = [:]
            // One indexed lookup per queue (item_by_queue), however many items wait.
            let sql =
                "SELECT DISTINCT queue FROM item WHERE state = 'pending' AND queue NOT IN (SELECT queue FROM item WHERE state = 'inFlight')"
            for queue in try String.fetchAll(db, sql: sql) {
                let rows = try Row.fetchAll(
                    db, sql: "SELECT * FROM item WHERE queue = ? AND state = 'pending' ORDER BY id LIMIT ?",
                    arguments: [queue, max(1, limit(queue))]
                )
                // A row that cannot be read (kind `corrupt`, which `items()` reports) holds its
                // queue: the items behind it are not sent past it; those before it go. Other
                // queues go on.
                var requests: [StoredRequest] = []
                var stopped = false
                for row in rows {
                    guard let request = try? Self.request(from: row) else {
                        stopped = true
                        break
                    }
                    requests.append(request)
                }
                // A batch sent before goes whole or not at all: one of it unreadable holds it.
                guard !requests.isEmpty, !(stopped && requests.contains { $0.batch != nil }) else { continue }
                heads[queue] = requests
            }
            return heads
        }
    }

    /// The pending items of a batch sent before, in order: all of them, however many a queue's
    /// head holds now.
    func pendingItems(inBatch batch: String) throws(OutboxError) -> [StoredRequest] {
        try self.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM item WHERE batch = ? AND state = 'pending' ORDER BY id", arguments: [batch])
                .map(Self.request(from:))
        }
    }

    /// An item as it is sent.
    struct StoredRequest: Sendable {
        var id: OutboxItemID
        var queue: String
        var name: String
        var method: String
        var url: String
        var headers: [[String]]
        var body: Data?
        var idempotencyKey: String
        var attempts: Int
        var maxAttempts: Int
        var expiresAt: Date?
        var nextAttemptAt: Date
        var createdAt: Date
        /// The batch it was last sent in, if any: a retry sends that batch again, whole.
        var batch: String?
        /// The endpoint's service, if it named one.
        var service: String?
        /// Whether `name` was the endpoint's own.
        var hasOwnName = true

        /// Whether its `expiresAfter` has passed at `now`.
        func hasExpired(at now: Date) -> Bool { self.expiresAt.map { $0 <= now } ?? false }
    }

    private func read<T>(_ body: (Database) throws -> T) throws(OutboxError) -> T {
        do {
            return try self.pool.read(body)
        } catch {
            throw Self.map(error, "reading the outbox")
        }
    }

    /// A column's value, or `nil` when it is NULL or not a `T` (a file edited by hand, or written
    /// by something else). GRDB's non-optional subscript traps on such a value; this never does.
    private static func value<T: DatabaseValueConvertible>(_ row: Row, _ column: String) -> T? {
        T.fromDatabaseValue(row[column] as DatabaseValue)
    }

    /// A column the schema requires, or kind `corrupt` naming the item and the column.
    private static func required<T: DatabaseValueConvertible>(_ row: Row, _ column: String) throws(OutboxError) -> T {
        guard let value: T = Self.value(row, column) else {
            let id: Int64? = Self.value(row, "id")
            throw OutboxError(.corrupt, "item \(id.map(String.init) ?? "?") has no readable \(column)")
        }
        return value
    }

    /// A date column: a finite number of seconds since 1970.
    private static func date(_ row: Row, _ column: String) throws(OutboxError) -> Date {
        let seconds: Double = try Self.required(row, column)
        guard seconds.isFinite, abs(seconds) < 1e12 else { throw OutboxError(.corrupt, "item has an impossible \(column): \(seconds)") }
        return Date(timeIntervalSince1970: seconds)
    }

    private static func optionalDate(_ row: Row, _ column: String) -> Date? {
        (Self.value(row, column) as Double?).flatMap { $0.isFinite && abs($0) < 1e12 ? Date(timeIntervalSince1970: $0) : nil }
    }

    /// An attempt count: an integer (`1.5` would be read as 1, and never match the stored value
    /// when the item is taken), 0 up to `Int32.max` (a larger one could overflow the next
    /// attempt's number).
    private static func count(_ row: Row, _ column: String) throws(OutboxError) -> Int {
        guard case .int64 = (row[column] as DatabaseValue).storage else {
            throw OutboxError(.corrupt, "item has an impossible \(column): not an integer")
        }
        let count: Int = try Self.required(row, column)
        guard (0...Int(Int32.max)).contains(count) else { throw OutboxError(.corrupt, "item has an impossible \(column): \(count)") }
        return count
    }

    /// The batch an item was sent in: none, or its key as text (anything else could not be told
    /// from none, and the item is taken only as it was read).
    private static func batch(_ row: Row) throws(OutboxError) -> String? {
        switch (row["batch"] as DatabaseValue).storage {
        case .null: return nil
        case .string(let key): return key
        default: throw OutboxError(.corrupt, "item has an impossible batch")
        }
    }

    /// A stored method, which must be a method token: sent as something else, it would be
    /// another request than the one stored.
    private static func method(_ row: Row) throws(OutboxError) -> HTTPRequest.Method {
        let text: String = try Self.required(row, "method")
        guard let method = HTTPRequest.Method(text) else { throw OutboxError(.corrupt, "item has an impossible method") }
        return method
    }

    /// The stored header fields, as name and value pairs: unreadable ones are corrupt, never an
    /// empty list (the request would go without them).
    private static func headers(_ row: Row) throws(OutboxError) -> [[String]] {
        let text: String = try Self.required(row, "headers")
        guard let pairs = try? JSONDecoder().decode([[String]].self, from: Data(text.utf8)) else {
            throw OutboxError(.corrupt, "item has header fields that cannot be read")
        }
        return pairs
    }

    private static func request(from row: Row) throws(OutboxError) -> StoredRequest {
        StoredRequest(
            id: OutboxItemID(rawValue: try Self.required(row, "id")), queue: try Self.required(row, "queue"),
            name: try Self.required(row, "name"),
            method: try Self.method(row).rawValue, url: try Self.required(row, "url"),
            headers: try Self.headers(row),
            body: Self.value(row, "body"), idempotencyKey: try Self.required(row, "idempotency_key"),
            attempts: try Self.count(row, "attempts"), maxAttempts: try Self.count(row, "max_attempts"),
            expiresAt: Self.optionalDate(row, "expires_at"),
            nextAttemptAt: try Self.date(row, "next_attempt_at"),
            createdAt: try Self.date(row, "created_at"),
            batch: try Self.batch(row),
            service: Self.value(row, "service"),
            hasOwnName: (Self.value(row, "has_own_name") as Int?).map { $0 != 0 } ?? true
        )
    }

    private static func item(from row: Row) throws(OutboxError) -> OutboxItem {
        var result: OutboxItem.Result?
        if let status: Int = Self.value(row, "result_status") {
            var fields = HTTPFields()
            let text: String = Self.value(row, "result_headers") ?? "[]"
            for pair in (try? JSONDecoder().decode([[String]].self, from: Data(text.utf8))) ?? [] where pair.count == 2 {
                if let name = HTTPField.Name(pair[0]) { fields.append(HTTPField(name: name, value: pair[1])) }
            }
            result = OutboxItem.Result(status: status, headers: fields, body: Self.value(row, "result_body") ?? Data())
        }
        let method = try Self.method(row)
        // Read for the check alone: an item whose fields cannot be read is corrupt wherever it is read.
        _ = try Self.headers(row)
        let stateText: String = try Self.required(row, "state")
        guard let state = OutboxItem.State(rawValue: stateText) else { throw OutboxError(.corrupt, "item has an impossible state") }
        return OutboxItem(
            id: OutboxItemID(rawValue: try Self.required(row, "id")), queue: try Self.required(row, "queue"),
            reference: Self.value(row, "reference"),
            name: try Self.required(row, "name"), method: method, url: try Self.required(row, "url"),
            idempotencyKey: try Self.required(row, "idempotency_key"), state: state,
            attempts: try Self.count(row, "attempts"), maxAttempts: try Self.count(row, "max_attempts"),
            createdAt: try Self.date(row, "created_at"), expiresAt: Self.optionalDate(row, "expires_at"),
            nextAttemptAt: try Self.date(row, "next_attempt_at"), lastError: Self.value(row, "last_error"), result: result,
            finishedAt: Self.optionalDate(row, "finished_at"),
            acknowledged: (Self.value(row, "acknowledged") as Int? ?? 0) != 0
        )
    }

    /// A storage failure as an ``OutboxError`` of the right kind.
    static func map(_ error: any Error, _ doing: String) -> OutboxError {
        if let error = error as? OutboxError { return error }
        guard let database = error as? DatabaseError else { return OutboxError(.storage, "\(doing): \(error)") }
        let text = "\(doing): \(database.message ?? "SQLite error \(database.extendedResultCode.rawValue)")"
        switch database.resultCode {
        case .SQLITE_CORRUPT, .SQLITE_NOTADB: return OutboxError(.corrupt, text)
        case .SQLITE_BUSY, .SQLITE_LOCKED: return OutboxError(.locked, text)
        case .SQLITE_READONLY: return OutboxError(.readOnly, text)
        case .SQLITE_FULL: return OutboxError(.full, text)
        case .SQLITE_CANTOPEN: return OutboxError(.cannotOpen, text)
        default: return OutboxError(.storage, text)
        }
    }
}
