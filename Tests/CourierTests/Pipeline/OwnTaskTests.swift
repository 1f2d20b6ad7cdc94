import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// A request `start` or `upload` runs in a task made for it alone: the deadline stage runs the
/// stages below it in that task, and ends them at the deadline or on `cancelAll` by cancelling
/// it, instead of starting a second task. Each end keeps the kind it had with the second task.
@Suite("A started request runs in its own task")
struct OwnTaskTests {
    private static let article = #"{"id":1,"title":"x"}"#

    private static func post(_ path: String, timeout: Duration? = nil) -> Endpoint<Article> {
        Endpoint<Article>(method: .post, path: path, body: .json(["n": 1]), timeout: timeout)
    }

    /// Runs `body` counting the tasks the deadline stage makes for the requests it starts.
    private static func countingTasks(_ body: () async throws -> Void) async throws -> Int {
        let made = Locked(0)
        try await Deadline.$tasksMade.withValue(made) { try await body() }
        return made.withLock { $0 }
    }

    @Test(arguments: TransportKind.allCases)
    func aStartedRequestOrUploadMakesNoSecondTask(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in .json(Self.article) }
        try await withClient(kind, server: server) { client in
            // A POST is not shared, so without its own task it would run in one the deadline
            // stage makes, as `send` does (checked last, so the count is seen to move).
            var values: [Int] = []
            let started = try await Self.countingTasks {
                values.append(try await client.start(Self.post("/a", timeout: .seconds(30))).value.id)
                values.append(try await client.start(Self.post("/b")).value.id)
                values.append(try await client.upload(Self.post("/c", timeout: .seconds(30))).value.value.id)
                values.append(try await client.send(Self.post("/e", timeout: .seconds(30)), queue: .global()) { _ in }.value.id)
            }
            #expect(started == 0)
            let sent = try await Self.countingTasks {
                values.append(try await client.send(Self.post("/d", timeout: .seconds(30))).id)
            }
            #expect(sent == 1)
            #expect(values.count == 5 && values.allSatisfy { $0 == 1 })
            #expect(server.requests.count == 5)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStartedRequestEndedByItsDeadlineOrCancelAllWasNotCancelledByItsCaller(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path.hasPrefix("/held") { await gate.wait() }
            return .json(Self.article)
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            // The deadline: kind `timeout`, as with a task of its own; the handle was not cancelled.
            let late = client.start(Self.post("/held/1", timeout: .milliseconds(300)))
            let timedOut = await expectCourierError { _ = try await late.value }
            #expect(timedOut?.kind == .timeout)
            #expect(!late.isCancelled)

            // `cancelAll` while the request waits for its head: kind `cancelled` with the reason.
            let inFlight = client.start(Self.post("/held/2"))
            #expect(await eventually { server.requests.contains { $0.path == "/held/2" } })
            #expect(client.cancelAll(reason: "signing out") == 1)
            let ended = await expectCourierError { _ = try await inFlight.value }
            #expect(ended?.kind == .cancelled)
            #expect(ended?.message == "signing out")
            #expect(!inFlight.isCancelled)

            // The caller's own cancel.
            let dropped = client.start(Self.post("/held/3"))
            #expect(await eventually { server.requests.contains { $0.path == "/held/3" } })
            dropped.cancel()
            let cancelled = await expectCourierError { _ = try await dropped.value }
            #expect(cancelled?.kind == .cancelled)
            #expect(dropped.isCancelled)

            // A request sent with a completion handler: its deadline is reported to the handler
            // (which only the caller's own cancel silences).
            let reported = Locked<CourierError?>(nil)
            let withCompletion = client.send(Self.post("/held/5", timeout: .milliseconds(300)), queue: .global()) { result in
                if case .failure(let error) = result { reported.withLock { $0 = error } }
            }
            #expect(await eventually(seconds: 10) { reported.current != nil })
            #expect(reported.current?.kind == .timeout)
            #expect(!withCompletion.isCancelled)

            // An upload's deadline.
            let upload = client.upload(Self.post("/held/4", timeout: .milliseconds(300)))
            let uploadTimedOut = await expectCourierError { _ = try await upload.value }
            #expect(uploadTimedOut?.kind == .timeout)

            await gate.open()
            // Nothing was left behind: no ticket, no slot; a new request goes through.
            #expect(await eventually { client.parts.lifecycle.runningCount == 0 && client.traffic.inFlight == 0 })
            let after = try await client.start(Self.post("/after")).value
            #expect(after.id == 1)
        }
    }
}
