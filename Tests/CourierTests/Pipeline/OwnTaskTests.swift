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

    // MARK: - The request's own task meets the waits below the deadline stage

    @Test(arguments: TransportKind.allCases)
    func aStartedRequestsDeadlineEndsAStallingRedirectHop(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            guard request.path == "/start" else {
                await gate.wait()
                return .json(Self.article)
            }
            return ScriptedResponse(status: 302, headers: [("Location", "/held")])
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            var endpoint = Endpoint<Article>(path: "/start", timeout: .milliseconds(500))
            endpoint.deduplication = .disabled
            let handle = client.start(endpoint)
            let error = await expectCourierError { _ = try await handle.value }
            #expect(error?.kind == .timeout)
            #expect(!handle.isCancelled)
            // The second hop was sent, and it was that wait the deadline ended.
            #expect(server.requests.map(\.path) == ["/start", "/held"])
            await gate.open()
            #expect(await eventually { client.parts.lifecycle.runningCount == 0 && client.traffic.inFlight == 0 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStartedRequestTimingOutInTheSchedulersQueueIsNeverSent(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/blocker" { await gate.wait() }
            return .json(Self.article)
        }
        try await withClient(
            kind, server: server,
            configure: {
                $0.retry = .never
                $0.scheduling = SchedulerConfiguration(maxConcurrentRequests: 8, maxRequestsPerHost: 1)
            }
        ) { client in
            let blocker = client.start(Self.post("/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            let queued = client.start(Self.post("/queued", timeout: .milliseconds(300)))
            let error = await expectCourierError { _ = try await queued.value }
            #expect(error?.kind == .timeout)
            #expect(!queued.isCancelled)
            #expect(await eventually { client.traffic.queuedByPriority.values.reduce(0, +) == 0 })
            await gate.open()
            _ = try await blocker.value
            // The slot the blocker let go goes to the next request at once; the timed-out one,
            // which would have had it first, never reached the server.
            let after = try await client.start(Self.post("/after")).value
            #expect(after.id == 1)
            #expect(server.requests.map(\.path) == ["/blocker", "/after"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancelAllEndsAStartedRequestsRetryBackoffAndNoSecondAttemptIsSent(_ kind: TransportKind) async throws {
        // Both paths ask for a 10 s backoff; /control answers its second attempt. It is sent
        // after `cancelAll`, so once its retry arrived, the cancelled request's retry (due
        // earlier) would have arrived too had the backoff not ended.
        let controlAttempts = Locked(0)
        let server = try await http1Server { request in
            guard request.path == "/control" else { return .text("busy", status: 503, headers: [("Retry-After", "10")]) }
            let attempt = controlAttempts.withLock {
                $0 += 1
                return $0
            }
            return attempt == 1 ? .text("busy", status: 503, headers: [("Retry-After", "10")]) : .json(Self.article)
        }
        let monitor = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            var policy = RetryPolicy.standard
            policy.idempotentMethods.insert(.post)
            let handle = client.start(Self.post("/busy").retry(policy))
            #expect(await eventually { monitor.names.contains("retrying") })
            #expect(client.cancelAll(reason: "signing out") == 1)
            let error = await expectCourierError { _ = try await handle.value }
            #expect(error?.kind == .cancelled)
            #expect(error?.message == "signing out")
            #expect(!handle.isCancelled)
            let control = try await client.start(Self.post("/control").retry(policy)).value
            #expect(control.id == 1)
            #expect(server.requests.filter { $0.path == "/control" }.count == 2)
            #expect(server.requests.filter { $0.path == "/busy" }.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancelAllReachesACompletionHandlerRequestInFlight(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/held" { await gate.wait() }
            return .json(Self.article)
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let reported = Locked<Result<Article, CourierError>?>(nil)
            let handle = client.send(Self.post("/held"), queue: .global()) { result in reported.withLock { $0 = result } }
            #expect(await eventually { server.requests.contains { $0.path == "/held" } })
            #expect(client.cancelAll(reason: "signing out") == 1)
            #expect(await eventually(seconds: 10) { reported.current != nil })
            guard case .failure(let error) = reported.current else {
                Issue.record("the completion handler was told \(String(describing: reported.current))")
                return
            }
            #expect(error.kind == .cancelled)
            #expect(error.message == "signing out")
            #expect(!handle.isCancelled)
            // The held exchange was closed on the wire.
            #expect(await eventually { server.abandonedCount == 1 })
            await gate.open()
            #expect(await eventually { client.parts.lifecycle.runningCount == 0 && client.traffic.inFlight == 0 })
        }
    }
}
