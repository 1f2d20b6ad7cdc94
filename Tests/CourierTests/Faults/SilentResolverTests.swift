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
@Suite("Faults: a name lookup that never answers")
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
    /// now made and resumed on the transport's control queue.
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
}
