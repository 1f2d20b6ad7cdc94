import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import CourierTesting
import Foundation
import GRDB
import HTTPTypes
import Testing

@testable import CourierOutbox

@Suite("Durable outbox: killed at random moments, nothing lost, nothing applied twice")
struct OutboxCrashTests {
    /// Starts the built `courier` executable and, after `killAfter`, kills it with SIGKILL.
    /// Returns whether it ran to the end (exit status 0) before the kill.
    static func run(_ arguments: [String], killAfter: Duration?) async throws -> Bool {
        let child = try ChildProcess(executable: courierExecutable().path, arguments: arguments)
        // Timed on a thread of its own: on a loaded machine the tasks of the other suites can
        // hold the cooperative pool long past the moment the kill is due.
        return try await onOwnThread {
            let started = ContinuousClock.now
            while child.isRunning {
                if let killAfter, ContinuousClock.now - started >= killAfter {
                    child.kill(SIGKILL)
                    while child.isRunning { usleep(5_000) }
                    return false
                }
                usleep(2_000)
            }
            return child.terminationStatus == 0
        }
    }

    /// How many items the outbox file holds (read while no process has it open).
    static func count(_ path: String) throws -> Int {
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        return try queue.read { db in (try? Int.fetchOne(db, sql: "SELECT COUNT(*) FROM item")) ?? 0 }
    }

    // AsyncHTTPClient only: the child is the `courier` executable, built on that transport (the
    // outbox's behaviour on both transports is the suite above).
    @Test
    func aThousandPostsSurviveTwentyKillsAndAreAppliedExactlyOnce() async throws {
        let api = IdempotentServer()
        let server = try await http1Server { request in
            // A little work per request, so kills land while requests are in flight.
            try? await Task.sleep(for: .milliseconds(2))
            return await api.respond(request)
        }
        let path = OutboxTests.databasePath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let url = server.baseURL.absoluteString + "/apply"
        var kills = 0
        var enqueueKills = 0
        var stored: [Int] = []
        // Enqueue 1,000 items (spread over 4 queues, one every millisecond, as an app producing
        // them), killed at random moments; the references make a rerun store only what is missing.
        let enqueue = [
            "outbox", "enqueue", "--db", path, "POST", url, "--count", "1000", "--reference", "item", "--queues", "4", "--interval-ms", "1",
        ]
        // The kill comes later each time one landed before anything was stored (a slow start on
        // a loaded machine), so the kills fall while items are being stored.
        var earliest: Int64 = 200
        while true {
            let killAfter: Duration? = enqueueKills < 6 ? .milliseconds(Int64.random(in: earliest...(earliest + 500))) : nil
            if try await Self.run(enqueue, killAfter: killAfter) { break }
            enqueueKills += 1
            kills += 1
            let count = try Self.count(path)
            if count == (stored.last ?? 0) { earliest += 300 }
            stored.append(count)
        }
        // Each kill landed while items were being stored: some were, not all.
        #expect(stored.contains { $0 > 0 && $0 < 1000 }, "item counts after each kill: \(stored)")
        #expect(stored == stored.sorted())
        // Deliver, killed at random moments, until at least 20 kills in all.
        var deliveryKills = 0
        while kills < 20 || deliveryKills < 10 {
            if try await Self.run(["outbox", "run", "--db", path], killAfter: .milliseconds(Int64.random(in: 20...150))) { break }
            deliveryKills += 1
            kills += 1
        }
        #expect(try await Self.run(["outbox", "run", "--db", path], killAfter: nil))
        #expect(kills >= 20)

        let client = Client(configuration: .init(transport: StubTransport { _ in .status(.ok) }) { $0.debugOptions = .off })
        let outbox = try Outbox(path: path, client: client)
        let items = try outbox.items()
        #expect(items.count == 1000)
        #expect(Set(items.compactMap(\.reference)).count == 1000)
        #expect(items.allSatisfy { $0.state == .delivered })
        let state = api.state.current
        // Every item reached the server, each under the one key it was stored with (a resend
        // after a kill reused it), so each was applied once.
        #expect(state.applied.count == 1000)
        #expect(Set(state.applied).count == 1000)
        #expect(Set(state.seen) == Set(items.map(\.idempotencyKey)))
        // What the kills cost: requests the server saw more than once (answered without applying).
        print(
            "outbox crash test: \(kills) kills (\(enqueueKills) during enqueue, items stored at each: \(stored), \(deliveryKills) during delivery), \(state.seen.count) requests for 1000 items, \(state.seen.count - 1000) resent after a kill, \(items.filter { $0.attempts > 1 }.count) items took more than one attempt"
        )
        try await server.stop()
    }
}
