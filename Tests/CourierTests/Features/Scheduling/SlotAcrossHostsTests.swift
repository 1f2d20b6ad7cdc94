import CourierTestServer
import Foundation
import Testing

@testable import Courier

/// Where the scheduler slot of a request is while a redirect (or a retry after one) takes it to
/// another host. Per-host limits are there for the host a request talks to: a request redirected
/// to a download host must not keep one of the API host's slots while it downloads, nor talk to
/// the download host beyond that host's limit. (Before: the slot stayed with the first host for
/// the whole exchange.)
@Suite("Scheduler slots follow a request from host to host")
struct SlotAcrossHostsTests {
    /// The per-host key of a test server (`127.0.0.1:PORT`), as ``TrafficSnapshot/inFlightByHost`` names it.
    static func host(_ server: TestServer) -> String { "127.0.0.1:\(server.port)" }

    /// One request per host; the origin redirects `/to?url=` to the other server, which holds
    /// `/slow/blocker…` until the gate opens.
    static func servers() async throws -> (origin: TestServer, other: TestServer, gate: Gate) {
        let gate = Gate()
        return (try await http1Server(), try await trafficServer(gate: gate), gate)
    }

    /// A middleware that sends each request twice (hedging), the second once `secondWhen` holds,
    /// and answers with the first.
    static func hedging(secondWhen ready: @escaping @Sendable () -> Bool = { true }) -> ClosureMiddleware {
        ClosureMiddleware { request, next in
            async let first = next(request)
            _ = await eventually(ready)
            async let second = next(request)
            let (answer, spare) = try await (first, second)
            await spare.body.discard()
            return answer
        }
    }

    static func onePerHost(_ configuration: inout Client.Configuration) {
        configuration.scheduling = .init(maxConcurrentRequests: 8, maxRequestsPerHost: 1, agingInterval: .seconds(3600))
    }

    @Test(arguments: TransportKind.allCases)
    func aRedirectToAnotherHostGivesTheFirstHostsSlotBackAndTakesOneOfTheOthers(_ kind: TransportKind) async throws {
        let (origin, other, gate) = try await Self.servers()
        let target = other.baseURL.appendingPathComponent("slow/blocker-1").absoluteString
        try await withClient(kind, server: origin, configure: Self.onePerHost) { client in
            let redirected = client.start(Endpoint<Article>(path: "/to", query: ["url": target]))
            #expect(await eventually { other.requests.count == 1 })
            // Held at the other host: that host's slot is taken, the origin's is free.
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            // So a request to the origin goes out and comes back meanwhile.
            let echo = client.start(Endpoint<Echo>(path: "/echo"))
            #expect(await eventually { origin.requests.count == 2 })
            // And one straight to the other host waits for the redirected request's slot.
            let direct = client.start(Endpoint<Article>(path: other.baseURL.appendingPathComponent("slow/blocker-2").absoluteString))
            #expect(await eventually { client.traffic.queued == 1 })
            #expect(other.requests.count == 1)
            await gate.open()
            _ = try await redirected.value
            _ = try await echo.value
            _ = try await direct.value
            #expect(other.requests.map(\.path) == ["/slow/blocker-1", "/slow/blocker-2"])
            // Every slot taken was given back, each to its own host.
            #expect(client.traffic.inFlightByHost.isEmpty)
            #expect(client.traffic.queued == 0)
        }
        try await other.stop()
    }

    /// The redirected request waits for the other host's slot in the queue; cancelled there, it
    /// leaves without a slot to give back, and the other host's holder keeps its own.
    @Test(arguments: TransportKind.allCases)
    func aRedirectedRequestCancelledWhileItWaitsForTheOtherHostsSlotHoldsNone(_ kind: TransportKind) async throws {
        let (origin, other, gate) = try await Self.servers()
        try await withClient(kind, server: origin, configure: Self.onePerHost) { client in
            let holder = client.start(Endpoint<Article>(path: other.baseURL.appendingPathComponent("slow/blocker-1").absoluteString))
            #expect(await eventually { other.requests.count == 1 })
            let target = other.baseURL.appendingPathComponent("slow/blocker-2").absoluteString
            let redirected = client.start(Endpoint<Article>(path: "/to", query: ["url": target]))
            #expect(await eventually { origin.requests.count == 1 && client.traffic.queued == 1 })
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            redirected.cancel()
            let error = await expectCourierError { _ = try await redirected.value }
            #expect(error?.kind == .cancelled)
            // The shared request may have been queued but not yet parked in the scheduler when
            // cancelled: it leaves the queue once it parks.
            #expect(await eventually { client.traffic.queued == 0 })
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            await gate.open()
            _ = try await holder.value
            #expect(client.traffic.inFlightByHost.isEmpty)
            #expect(other.requests.count == 1)
        }
        try await other.stop()
    }

    /// The same wait ended by the request's deadline: kind `timeout`, no slot given back twice,
    /// nothing sent to the other host. A request that deduplication does not share runs in a task
    /// the deadline cancels and waits for, so its slots are settled when it throws; a shared one's
    /// waiter hears of the deadline first and the shared request unwinds after, so that case waits
    /// for the queue to empty. The deadline is long enough for the request to have queued first.
    @Test(arguments: TransportKind.allCases, [false, true])
    func aRedirectedRequestWhoseDeadlinePassesWhileItWaitsForTheOtherHostsSlotHoldsNone(
        _ kind: TransportKind, shared: Bool
    ) async throws {
        let (origin, other, gate) = try await Self.servers()
        try await withClient(kind, server: origin, configure: Self.onePerHost) { client in
            let holder = client.start(Endpoint<Article>(path: other.baseURL.appendingPathComponent("slow/blocker-1").absoluteString))
            #expect(await eventually { other.requests.count == 1 })
            let target = other.baseURL.appendingPathComponent("slow/blocker-2").absoluteString
            var endpoint = Endpoint<Article>(path: "/to", query: ["url": target], timeout: .seconds(15))
            if !shared { endpoint.deduplication = .disabled }
            let redirected = client.start(endpoint)
            #expect(await eventually { origin.requests.count == 1 && client.traffic.queued == 1 })
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            let error = await expectCourierError { _ = try await redirected.value }
            #expect(error?.kind == .timeout)
            if shared {
                #expect(await eventually { client.traffic.queued == 0 })
            } else {
                #expect(client.traffic.queued == 0)
            }
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            #expect(origin.requests.count == 1)
            await gate.open()
            _ = try await holder.value
            #expect(client.traffic.inFlightByHost.isEmpty)
            #expect(other.requests.count == 1)
        }
        try await other.stop()
    }

    /// A retry after an attempt that a redirect took to another host goes to the first host again,
    /// with the first host's slot: the slots balance whatever the path.
    @Test(arguments: TransportKind.allCases)
    func aRetryAfterARedirectTakesTheFirstHostsSlotAgain(_ kind: TransportKind) async throws {
        try await Self.sentAgainAfterARedirect(kind) {
            $0.retry = RetryPolicy(maxAttempts: 2, baseDelay: .milliseconds(1), maxDelay: .milliseconds(1))
        }
    }

    /// A middleware that sends the request again itself (here: once more after a 503) sends it
    /// from the top, past the retry stage: that attempt too takes the first host's slot back.
    @Test(arguments: TransportKind.allCases)
    func aMiddlewaresOwnResendAfterARedirectTakesTheFirstHostsSlotAgain(_ kind: TransportKind) async throws {
        try await Self.sentAgainAfterARedirect(kind) {
            $0.retry = RetryPolicy(maxAttempts: 1)
            $0.middleware = [
                ClosureMiddleware { request, next in
                    let first = try await next(request)
                    guard first.status == .serviceUnavailable else { return first }
                    await first.body.discard()
                    return try await next(request)
                }
            ]
        }
    }

    /// A middleware that gives up on an attempt while it waits for the other host's slot (the
    /// attempt's task cancelled) and sends the request again: the new attempt takes the origin's
    /// slot, then waits for the other host's as the first did. It held none: it went out to both
    /// hosts past their limits (the other host got a second request while its one slot was busy).
    /// `shared`: the middleware is the client's, so the request is one deduplication shares (an
    /// endpoint's closure middleware keeps it apart), and the shared request's ticket follows.
    @Test(arguments: TransportKind.allCases, [false, true])
    func anAttemptSentAfterOneGaveUpWaitingForTheOtherHostsSlotWaitsForOneToo(_ kind: TransportKind, shared: Bool) async throws {
        let (origin, other, gate) = try await Self.servers()
        let target = other.baseURL.appendingPathComponent("slow/blocker-2").absoluteString
        let queued = SlotLog()
        let giveUpOnce = ClosureMiddleware { request, next in
            guard request.head.path?.hasPrefix("/to") == true else { return try await next(request) }
            do {
                // Cancelled, and waited for, when the scope ends.
                async let _ = next(request)
                _ = await eventually { queued.queuedAt.contains(Self.host(other)) }
            }
            return try await next(request)
        }
        try await withClient(
            kind, server: origin,
            configure: {
                Self.onePerHost(&$0)
                $0.eventMonitors = [queued]
                if shared { $0.middleware = [giveUpOnce] }
            }
        ) { client in
            let holder = client.start(Endpoint<Article>(path: other.baseURL.appendingPathComponent("slow/blocker-1").absoluteString))
            #expect(await eventually { other.requests.count == 1 })
            var endpoint = Endpoint<Article>(path: "/to", query: ["url": target])
            if !shared { endpoint.middleware = [giveUpOnce] }
            let redirected = client.start(endpoint)
            // The first attempt queued for the other host and gave up; the second queues there too.
            #expect(await eventually { queued.queuedAt.count == 2 && client.traffic.queued == 1 }, "\(queued.queuedAt)")
            #expect(origin.requests.count == 2)
            #expect(other.requests.count == 1)
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            await gate.open()
            _ = try await holder.value
            _ = try await redirected.value
            #expect(other.requests.count == 2)
            #expect(client.traffic.inFlightByHost.isEmpty)
        }
        try await other.stop()
    }

    /// The origin redirects to the other host, which answers its first request 503 and the next
    /// one 200; `sendAgain` configures what sends the request again after the 503. Each attempt
    /// takes the origin's slot, then the other host's.
    static func sentAgainAfterARedirect(_ kind: TransportKind, sendAgain: @escaping (inout Client.Configuration) -> Void) async throws {
        let other = try await http1Server(numbering: { _, number in
            number == 1 ? .text("busy", status: 503) : .json(#"{"id":7,"title":"ok"}"#)
        })
        let origin = try await http1Server()
        let target = other.baseURL.appendingPathComponent("article").absoluteString
        let slots = SlotLog()
        try await withClient(
            kind, server: origin,
            configure: {
                Self.onePerHost(&$0)
                sendAgain(&$0)
                $0.eventMonitors = [slots]
            }
        ) { client in
            let article = try await client.send(Endpoint<Article>(path: "/to", query: ["url": target]))
            #expect(article.id == 7)
            #expect(origin.requests.count == 2)
            #expect(other.requests.count == 2)
            #expect(client.traffic.inFlightByHost.isEmpty)
            let (o, x) = (Self.host(origin), Self.host(other))
            // Origin, then the other host (the 503), back to the origin, the other again.
            #expect(slots.events == ["+\(o)", "-\(o)", "+\(x)", "-\(x)", "+\(o)", "-\(o)", "+\(x)", "-\(x)"])
        }
        try await other.stop()
    }

    /// A middleware that sends two attempts at once (hedging) gives one slot: when both are
    /// redirected, only one of them moves it, and every slot taken is given back once.
    @Test(arguments: TransportKind.allCases)
    func twoAttemptsSentAtOnceAndRedirectedGiveBackEachSlotOnce(_ kind: TransportKind) async throws {
        let origin = try await http1Server()
        let other = try await http1Server()
        let target = other.baseURL.appendingPathComponent("echo").absoluteString
        let slots = SlotLog()
        try await withClient(
            kind, server: origin,
            configure: {
                Self.onePerHost(&$0)
                // Sends each request twice at once and answers with the first (hedging).
                $0.middleware = [Self.hedging()]
                $0.eventMonitors = [slots]
            }
        ) { client in
            for round in 0..<5 {
                let echo = try await client.send(Endpoint<Echo>(path: "/to", query: ["url": target + "?round=\(round)"]))
                #expect(echo.uri == "/echo?round=\(round)")
            }
            #expect(other.requests.count == 10)
            #expect(client.traffic.inFlightByHost.isEmpty)
            let (o, x) = (Self.host(origin), Self.host(other))
            for host in [o, x] {
                #expect(slots.events.filter { $0 == "+\(host)" }.count == slots.events.filter { $0 == "-\(host)" }.count)
            }
            #expect(slots.events.filter { $0 == "+\(o)" }.count == 5)
        }
        try await other.stop()
    }

    /// The same, with the second attempt sent once the first is already held at the other host:
    /// the second shares the slot where the first has it, rather than taking the first host's
    /// back as a request sent again from the top would. (Before: it took the origin's slot back
    /// from under the first, which went on at the other host without one; seen as a sixth
    /// origin slot in five rounds of the test above.)
    @Test(arguments: TransportKind.allCases)
    func anAttemptSentBesideOneAlreadyRedirectedLeavesTheSlotWhereItIs(_ kind: TransportKind) async throws {
        let (origin, other, gate) = try await Self.servers()
        let target = other.baseURL.appendingPathComponent("slow/blocker-1").absoluteString
        let slots = SlotLog()
        try await withClient(
            kind, server: origin,
            configure: {
                Self.onePerHost(&$0)
                // The second leaves once the first is held at the other host.
                $0.middleware = [Self.hedging(secondWhen: { other.requests.count == 1 })]
                $0.eventMonitors = [slots]
            }
        ) { client in
            let redirected = client.start(Endpoint<Article>(path: "/to", query: ["url": target]))
            #expect(await eventually { other.requests.count == 2 })
            let (o, x) = (Self.host(origin), Self.host(other))
            // Both attempts are at the other host, on its one slot; the origin's stays free.
            #expect(origin.requests.count == 2)
            #expect(client.traffic.inFlightByHost == [x: 1])
            #expect(slots.events == ["+\(o)", "-\(o)", "+\(x)"])
            await gate.open()
            _ = try await redirected.value
            #expect(client.traffic.inFlightByHost.isEmpty)
            #expect(slots.events == ["+\(o)", "-\(o)", "+\(x)", "-\(x)"])
        }
        try await other.stop()
    }

    /// A middleware that sends the request to another authority than the endpoint's (here the
    /// endpoint names `localhost`, the middleware `127.0.0.1`) and a redirect on that same host:
    /// the hop stays on the host, so the slot stays where it is. (Compared with the slot's host,
    /// taken before the middleware, the hop looked like a move: a slot given back and taken again.)
    @Test(arguments: TransportKind.allCases)
    func aRedirectOnTheHostAMiddlewareChoseKeepsTheSlot(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let slots = SlotLog()
        try await withClient(
            kind, server: server,
            configure: {
                Self.onePerHost(&$0)
                $0.middleware = [
                    ClosureMiddleware { request, next in
                        var request = request
                        request.head.authority = "127.0.0.1:\(server.port)"
                        return try await next(request)
                    }
                ]
                $0.eventMonitors = [slots]
            }
        ) { client in
            let echo = try await client.send(Endpoint<Echo>(path: "http://localhost:\(server.port)/redirect/1"))
            #expect(echo.uri == "/echo")
            #expect(server.requests.map(\.path) == ["/redirect/1", "/echo"])
            #expect(slots.events == ["+localhost:\(server.port)", "-localhost:\(server.port)"])
            #expect(client.traffic.inFlightByHost.isEmpty)
        }
    }

    /// A shared (deduplicated) request that a redirect sent to the other host's queue is raised
    /// there when a caller of a higher priority joins it: the deduplicator follows it to its new
    /// ticket, and it queues at its callers' highest priority.
    @Test(arguments: TransportKind.allCases)
    func aSharedRequestQueuedForTheOtherHostIsRaisedByAJoiner(_ kind: TransportKind) async throws {
        let (origin, other, gate) = try await Self.servers()
        try await withClient(kind, server: origin, configure: Self.onePerHost) { client in
            let holder = client.start(Endpoint<Article>(path: other.baseURL.appendingPathComponent("slow/blocker-1").absoluteString))
            #expect(await eventually { other.requests.count == 1 })
            let target = other.baseURL.appendingPathComponent("slow/blocker-2").absoluteString
            let endpoint = Endpoint<Article>(path: "/to", query: ["url": target])
            let low = client.start(endpoint, priority: .low)
            #expect(await eventually { client.traffic.queuedByPriority == [.low: 1] })
            let high = client.start(endpoint, priority: .veryHigh)
            #expect(await eventually { client.traffic.queuedByPriority == [.veryHigh: 1] })
            #expect(client.deduplicationCounts.coalesced == 1)
            await gate.open()
            _ = try await holder.value
            let a = try await low.value
            let b = try await high.value
            #expect(a.title == b.title)
            #expect(origin.requests.count == 1)
            #expect(other.requests.count == 2)
            #expect(client.traffic.inFlightByHost.isEmpty)
            // The raise went to the ticket that queued, not to one no longer in the scheduler.
            #expect(client.parts.scheduler.pendingPriorityChanges == 0)
        }
        try await other.stop()
    }

    /// A download redirected to a file host holds that host's slot while its body comes, and the
    /// API host's is free meanwhile.
    @Test(arguments: TransportKind.allCases)
    func aDownloadRedirectedToAnotherHostHoldsThatHostsSlot(_ kind: TransportKind) async throws {
        let origin = try await http1Server()
        let other = try await http1Server()
        let target = other.baseURL.appendingPathComponent("echo").absoluteString
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("slots-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let slots = SlotLog()
        try await withClient(
            kind, server: origin,
            configure: {
                Self.onePerHost(&$0)
                $0.eventMonitors = [slots]
            }
        ) { client in
            let result = try await client.download(
                Endpoint<Data>(path: "/to", query: ["url": target], decoding: .data),
                to: DownloadDestination(directory: directory, fileName: "echo.json")
            ).value
            #expect(try Data(contentsOf: result.url).isEmpty == false)
            #expect(client.traffic.inFlightByHost.isEmpty)
            let (o, x) = (Self.host(origin), Self.host(other))
            #expect(slots.events == ["+\(o)", "-\(o)", "+\(x)", "-\(x)"])
        }
        try await other.stop()
    }

    /// A host the request was redirected to, whose connection closed before it answered, is not
    /// taken for an HTTP/2 host because the first host answered over HTTP/2: the protocol of the
    /// last answer is credited to the slot's host only when the slot never moved. (Before, it
    /// raised that host's limit from 1 to 100.) AsyncHTTPClient only: the first host speaks
    /// HTTP/2 over TLS with the test CA, which URLSession on Linux trusts only in the private
    /// namespace of URLSessionTLSTests.
    @Test
    func aHostThatFailedBeforeAnsweringIsNotCreditedWithTheFirstHostsHTTP2() async throws {
        let gate = Gate()
        let other = try await http1Server { request in
            if request.path == "/drop" { return .text("").with(.closeBeforeResponding) }
            await gate.wait()
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let origin = try await tlsServer { request in
            request.path == "/go"
                ? .text("", status: 302, headers: [("Location", "http://127.0.0.1:\(other.port)/drop")]) : await Routes.standard(request)
        }
        try await withClient(
            .asyncHTTPClient, server: origin,
            configure: {
                $0.scheduling = .init(maxConcurrentRequests: 64, maxRequestsPerHost: 1, agingInterval: .seconds(3600))
                $0.redirects.allowsInsecureDowngrade = true
                $0.retry = RetryPolicy(maxAttempts: 1)
            }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/go")) }
            #expect(error?.kind == .transport)
            #expect(client.traffic.inFlightByHost.isEmpty)
            let handles = (1...3).map { client.start(Endpoint<Article>(method: .post, path: "http://127.0.0.1:\(other.port)/slow/\($0)")) }
            #expect(await eventually { client.traffic.inFlight + client.traffic.queued == 3 })
            // Still HTTP/1.1's limit there: one at a time.
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            #expect(client.traffic.queued == 2)
            await gate.open()
            for handle in handles { _ = try await handle.value }
        }
        try await other.stop()
    }

    /// A streamed body read from the other host holds that host's slot until it ends.
    @Test(arguments: TransportKind.allCases)
    func aStreamRedirectedToAnotherHostHoldsThatHostsSlotUntilItsBodyEnds(_ kind: TransportKind) async throws {
        let origin = try await http1Server()
        let other = try await http1Server()
        let target = other.baseURL.appendingPathComponent("echo").absoluteString
        try await withClient(kind, server: origin, configure: Self.onePerHost) { client in
            let streamed = try await client.stream(Endpoint<Data>(path: "/to", query: ["url": target], decoding: .data))
            #expect(client.traffic.inFlightByHost == [Self.host(other): 1])
            var bytes = 0
            for try await chunk in streamed.body { bytes += chunk.count }
            #expect(bytes > 0)
            #expect(await eventually { client.traffic.inFlightByHost.isEmpty })
        }
        try await other.stop()
    }
}

/// The slots a request takes (`+host`) and gives back (`-host`), in order.
final class SlotLog: EventMonitor, Sendable {
    private let log = Locked<[String]>([])
    var events: [String] { self.log.current }
    func slotAcquired(_ request: RequestEvent, host: String) { self.log.withLock { $0.append("+\(host)") } }
    func slotReleased(_ request: RequestEvent, host: String) { self.log.withLock { $0.append("-\(host)") } }
    private let queues = Locked<[String]>([])
    /// The hosts a request queued for, in order.
    var queuedAt: [String] { self.queues.current }
    func requestQueued(_ request: RequestEvent, host: String) { self.queues.withLock { $0.append(host) } }
}
