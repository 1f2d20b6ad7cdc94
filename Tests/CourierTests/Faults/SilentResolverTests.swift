import Courier
import Foundation
import Testing

/// Deadlines × a name lookup that never answers: the caller gets kind `timeout` at its deadline
/// on both transports, with deduplication on (the caller waits as a waiter of a shared request)
/// and off (the exchange runs in a task of its own), however long the platform's lookup goes on.
///
/// Runs only under `scripts/test-silent-resolver.sh`, which points the resolver at a loopback
/// address that takes every query and answers none (in a private mount namespace, with a 12 s
/// timeout and one attempt), so every lookup lasts 12 s. The script fails if this suite was
/// skipped or did not pass; `.ci/run` runs it.
///
/// Found under load: a lookup left unanswered held both transports' callers 10 s past a 3 s
/// deadline (cancelling a FoundationNetworking task whose lookup is running waits for the lookup).
///
/// Serialized: one test counts the process's threads, which another's transports would change.
@Suite("Faults: a name lookup that never answers", .serialized)
struct SilentResolverTests {
    static let isActive = ProcessInfo.processInfo.environment["COURIER_TEST_SILENT_RESOLVER"] != nil

    @Test(
        .enabled(if: isActive, "needs the silent resolver of scripts/test-silent-resolver.sh"),
        arguments: TransportKind.allCases, [true, false])
    func aLookupThatNeverAnswersEndsAtTheDeadline(_ kind: TransportKind, deduplicated: Bool) async throws {
        let (transport, shutdown) = makeTransport(kind)
        let deadline = Duration.seconds(1)
        let client = Client(
            configuration: .init(transport: transport, baseURL: URL(string: "http://courier-silent-resolver.example:8080")!) {
                $0.timeout = deadline
                $0.retry = .never
                $0.deduplication = DeduplicationConfiguration(isEnabled: deduplicated)
            })
        let started = ContinuousClock.now
        let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/", decoding: .data)) }
        let took = ContinuousClock.now - started
        #expect(error?.kind == .timeout, "\(String(describing: error))")
        #expect(took >= deadline - .milliseconds(50), "\(took)")
        // The lookup lasts 12 s: a caller held by it gets its error no sooner.
        #expect(took < .seconds(6), "the caller waited for the lookup: \(took)")
        // The caller's slot is free again while the lookup may still run.
        #expect(await eventually(seconds: 5) { client.traffic.queued == 0 && client.traffic.inFlight == 0 })
        try await shutdown()
    }

    /// A lookup that never answers, cancelled at its deadline, × the next request on the same
    /// transport, to a host that needs no lookup.
    ///
    /// AsyncHTTPClient answers it at once. URLSession on Linux cannot: removing a task whose
    /// lookup runs holds FoundationNetworking's work queue until the lookup ends, and every
    /// request waits for that queue (measured: also with one session per host name, so the queue
    /// is shared by the process's sessions). There the next request ends at its own deadline with
    /// kind `timeout`, is not held past it, and once the lookup has ended a request is answered.
    ///
    /// With deduplication off the next request runs in a task of its own: found held 10.9 s past
    /// its 4 s deadline, as making and resuming its task blocked the thread it ran on. Tasks are
    /// now made and resumed on a control queue.
    @Test(
        .enabled(if: isActive, "needs the silent resolver of scripts/test-silent-resolver.sh"),
        arguments: TransportKind.allCases, [true, false])
    func theNextRequestIsNotHeldByACancelledLookup(_ kind: TransportKind, deduplicated: Bool) async throws {
        let server = try await http1Server()
        let configure: (inout Client.Configuration) -> Void = {
            $0.timeout = .seconds(1)
            $0.deduplication = DeduplicationConfiguration(isEnabled: deduplicated)
        }
        try await withClient(kind, server: server, configure: configure) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(path: "http://courier-silent-resolver.example:8080/", decoding: .data))
            }
            #expect(error?.kind == .timeout, "\(String(describing: error))")
            let next = Endpoint<Data>(path: "/json", timeout: .seconds(4), decoding: .data)
            let started = ContinuousClock.now
            switch kind {
            case .asyncHTTPClient:
                let body = try await client.send(next)
                #expect(!body.isEmpty)
                // The cancelled lookup lasts 11 s more: a request held by it is answered no sooner.
                #expect(ContinuousClock.now - started < .seconds(3), "the request waited for the cancelled lookup")
            case .urlSession:
                let held = await expectCourierError { _ = try await client.send(next) }
                let took = ContinuousClock.now - started
                #expect(held?.kind == .timeout, "\(String(describing: held))")
                #expect(took < .seconds(6), "the caller was held past its deadline: \(took)")
                // The lookup ends 12 s after it began; then the platform serves requests again.
                let body = try await client.send(Endpoint<Data>(path: "/json", timeout: .seconds(20), decoding: .data))
                #expect(!body.isEmpty)
            }
        }
    }

    /// A lookup that never answers, cancelled at its deadline, × 200 transports whose requests
    /// wait meanwhile: the waiting holds a handful of threads, not one per transport, and every
    /// request is answered once the lookup has ended.
    ///
    /// Found on a CI machine whose resolver stayed silent: each URLSession transport made its
    /// tasks on a queue of its own, so each transport waiting for FoundationNetworking's work
    /// queue (held by the cancelled lookup) held a thread; some 250 of them used up the threads
    /// the platform has for queues, none was left to run the work queue, and every request in
    /// the process hung for good. AsyncHTTPClient is not held by the lookup: its 200 requests are
    /// answered at once, on the event loops it already has.
    @Test(
        .enabled(if: isActive, "needs the silent resolver of scripts/test-silent-resolver.sh"),
        arguments: TransportKind.allCases)
    func transportsWaitingBehindALookupHoldFewThreads(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let (first, shutdownFirst) = makeTransport(kind)
        let lookup = Client(
            configuration: .init(transport: first, baseURL: URL(string: "http://courier-silent-resolver.example:8080")!) {
                $0.timeout = .seconds(1)
                $0.retry = .never
            })
        let error = await expectCourierError { _ = try await lookup.send(Endpoint<Data>(path: "/", decoding: .data)) }
        #expect(error?.kind == .timeout, "\(String(describing: error))")
        // On URLSession the cancelled lookup now holds the work queue for about 11 s more.
        let baseline = Self.threadCount()
        let count = 200
        var shutdowns: [@Sendable () async throws -> Void] = [shutdownFirst]
        let answered = Locked(0)
        let peak = Locked(baseline)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<count {
                let (transport, shutdown) = makeTransport(kind)
                shutdowns.append(shutdown)
                let client = Client(
                    configuration: .init(transport: transport, baseURL: server.baseURL) {
                        $0.timeout = .seconds(40)
                        $0.retry = .never
                    })
                group.addTask {
                    let body = try? await client.send(Endpoint<Data>(path: "/json", decoding: .data))
                    if body?.isEmpty == false { answered.withLock { $0 += 1 } }
                }
            }
            // Sampled until every request has been answered (or a thread per transport is seen:
            // then the test stops waiting, before the platform runs out of threads).
            let settled = await eventually(seconds: 40) {
                let threads = Self.threadCount()
                peak.withLock { $0 = max($0, threads) }
                return answered.withLock { $0 } == count || threads > baseline + count / 2
            }
            #expect(settled)
            if answered.withLock({ $0 }) < count { group.cancelAll() }
            await group.waitForAll()
        }
        #expect(answered.withLock { $0 } == count)
        #expect(peak.withLock { $0 } - baseline < 32, "threads: \(baseline) before, \(peak.withLock { $0 }) at most while waiting")
        for shutdown in shutdowns { try await shutdown() }
        try await server.stop()
    }

    /// Transfers × cancellation × a held work queue: a spooled upload cancelled while its task
    /// waits to be made (behind FoundationNetworking's work queue, which a cancelled lookup
    /// holds) ends with kind `cancelled` at once, never crashes the process, and leaves no file
    /// once the queue is free; the transport then sends the next upload whole.
    ///
    /// URLSession only: AsyncHTTPClient spools nothing and is not held by the lookup (above).
    @Test(.enabled(if: isActive, "needs the silent resolver of scripts/test-silent-resolver.sh"))
    func aSpooledUploadCancelledWhileItsTaskWaitsToBeMadeLeavesNoFile() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("courier-silent-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(4 << 20, seed: 21)
        let server = try await http1Server { request in .text("\(request.body.count)") }
        let transport = URLSessionTransport(scratchDirectory: scratch)
        let lookup = Client(
            configuration: .init(transport: transport, baseURL: URL(string: "http://courier-silent-resolver.example:8080")!) {
                $0.timeout = .seconds(1)
                $0.retry = .never
            })
        let error = await expectCourierError { _ = try await lookup.send(Endpoint<Data>(path: "/", decoding: .data)) }
        #expect(error?.kind == .timeout, "\(String(describing: error))")
        // The cancelled lookup now holds the work queue for about 11 s more.
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(60) })
        let sending = Task { try await client.send(streamedUpload(content)) }
        // Spooled whole: the task is now being made, behind the held queue.
        let spooled = await eventually(seconds: 5) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: scratch.path)) ?? []
            return names.count == 1
                && (try? FileManager.default.attributesOfItem(atPath: scratch.appendingPathComponent(names[0]).path)[.size] as? Int)
                    == content.count
        }
        #expect(spooled)
        #expect(server.requests.isEmpty)
        let cancelled = ContinuousClock.now
        sending.cancel()
        let ended = await expectCourierError { _ = try await sending.value }
        #expect(ended?.kind == .cancelled, "\(String(describing: ended))")
        // The caller is not held until the queue is free.
        #expect(ContinuousClock.now - cancelled < .seconds(5), "the caller waited for the work queue")
        // Once the lookup has ended, the task is made (or never made) and its file removed.
        #expect(await eventually(seconds: 30) { (try? FileManager.default.contentsOfDirectory(atPath: scratch.path))?.isEmpty == true })
        // Cancelled before it was started: it never even connected.
        #expect(server.connectionCount == 0)
        #expect(try await client.send(streamedUpload(content)) == "\(content.count)")
        // The cancelled upload never went out whole: the server got one upload, the last.
        #expect(server.requests.count == 1, "\(server.requests.map(\.bodyLength))")
        #expect(server.requests.last?.bodyLength == content.count)
        transport.shutdown()
        try await server.stop()
    }

    /// The threads of this process, as the kernel lists them.
    static func threadCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
    }
}
