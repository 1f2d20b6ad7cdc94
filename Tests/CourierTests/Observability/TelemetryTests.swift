import Courier
import CourierTelemetry
import CourierTestServer
import CourierTesting
import Foundation
import HTTPTypes
import InMemoryTracing
import MetricsTestKit
import Testing
import Tracing

/// An in-memory tracer that propagates its context as W3C Trace Context (`traceparent`), as an
/// OpenTelemetry tracer does; ids have the W3C lengths (32 and 16 hex digits).
struct W3CInMemoryTracer: Tracer {
    typealias Span = InMemorySpan
    let inner: InMemoryTracer

    init() {
        let next = Locked<UInt64>(0)
        @Sendable func hex(_ digits: Int) -> String {
            let value = next.withLock {
                $0 += 1
                return $0
            }
            let text = String(value, radix: 16)
            return String(repeating: "0", count: digits - text.count) + text
        }
        self.inner = InMemoryTracer(idGenerator: .init(nextTraceID: { "4bf92f35" + hex(24) }, nextSpanID: { "a" + hex(15) }))
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> InstrumentationContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> InMemorySpan {
        self.inner.startSpan(operationName, context: context(), ofKind: kind, at: instant(), function: function, file: fileID, line: line)
    }

    func forceFlush() {}

    func inject<Carrier, Inject: Injector>(_ context: InstrumentationContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        guard let span = context.inMemorySpanContext else { return }
        injector.inject("00-\(span.traceID)-\(span.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout InstrumentationContext, using extractor: Extract)
    where Extract.Carrier == Carrier {}

    var finishedSpans: [FinishedInMemorySpan] { self.inner.finishedSpans }
}

@Suite("Metrics and tracing monitors: bounded labels, span trees, trace context on the wire")
struct TelemetryTests {
    @Test(arguments: TransportKind.allCases)
    func requestsAreCountedByOutcomeAndSourceWithBoundedLabels(_ kind: TransportKind) async throws {
        let calls = Locked(0)
        let server = try await http1Server { request in
            if request.path == "/flaky" {
                let call = calls.withLock {
                    $0 += 1
                    return $0
                }
                if call == 1 { return .text("busy", status: 503, headers: [("Retry-After", "0")]) }
            }
            if request.path.hasPrefix("/status/") { return await Routes.standard(request) }
            return .json(#"{"id":1,"title":"x"}"#, headers: [("Cache-Control", "max-age=600")])
        }
        let metrics = TestMetrics()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [MetricsMonitor(factory: metrics)]
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
            }
        ) { client in
            _ = try await client.send(Endpoint<Article>(name: "article", path: "/json", query: [URLQueryItem(name: "id", value: "12345")]))
            _ = try await client.send(Endpoint<Article>(name: "article", path: "/json", query: [URLQueryItem(name: "id", value: "12345")]))
            _ = try? await client.send(Endpoint<Article>(name: "missing", path: "/status/404").retry(.never))
            _ = try? await client.send(Endpoint<Article>(name: "broken", path: "/status/500").retry(.never))
            _ = try await client.send(Endpoint<Article>(name: "flaky", path: "/flaky"))
            let post = Endpoint<Article>(
                name: "create", method: .post, path: "/create", body: .data(Data(#"{"title":"new"}"#.utf8), contentType: "application/json")
            )
            _ = try await client.send(post)
        }
        func total(_ dimensions: [(String, String)]) -> Int64 {
            metrics.counterTotal(label: "courier_requests_total", dimensions: dimensions)
        }
        #expect(total([("endpoint", "article"), ("method", "GET"), ("outcome", "success"), ("source", "network")]) == 1)
        #expect(total([("endpoint", "article"), ("method", "GET"), ("outcome", "success"), ("source", "cache")]) == 1)
        #expect(total([("endpoint", "missing"), ("method", "GET"), ("outcome", "http_4xx"), ("source", "network")]) == 1)
        #expect(total([("endpoint", "broken"), ("method", "GET"), ("outcome", "http_5xx"), ("source", "network")]) == 1)
        #expect(metrics.counterTotal(label: "courier_retries_total", dimensions: [("endpoint", "flaky")]) == 1)
        #expect(metrics.counterTotal(label: "courier_request_body_bytes", dimensions: [("endpoint", "create")]) == 15)
        #expect(
            metrics.counterTotal(label: "courier_response_body_bytes", dimensions: [("endpoint", "article"), ("source", "network")]) == 20)
        let timers = metrics.timers(label: "courier_request_duration")
        #expect(timers.reduce(0) { $0 + $1.values.count } == 6)
        #expect(timers.allSatisfy { $0.values.allSatisfy { $0 > 0 } })
        // The gauges are back to zero, and every label is bounded: no URL, query, id or port.
        for meter in metrics.meters(label: "courier_requests_in_flight") { #expect(meter.lastValue == 0) }
        #expect(!metrics.meters(label: "courier_requests_in_flight").isEmpty)
        let everyValue = metrics.counters.flatMap(\.dimensions).map(\.1) + metrics.timers.flatMap(\.dimensions).map(\.1)
        #expect(!everyValue.contains { $0.contains("/") || $0.contains("?") || $0.contains("12345") })
    }

    @Test(arguments: TransportKind.allCases)
    func anEndpointWithoutANameIsLabelledByItsMethodNeverByItsPath(_ kind: TransportKind) async throws {
        // An unnamed endpoint's default name is `METHOD path`: ids and, for an absolute URL, a
        // query with a token. Metrics count it as `unnamed`, spans are named by the method
        // (OpenTelemetry's rule without a low-cardinality name), and the name shown in logs
        // loses the query and any password.
        let server = try await http1Server()
        let metrics = TestMetrics()
        let tracer = W3CInMemoryTracer()
        try await withClient(
            kind, server: server, configure: { $0.eventMonitors = [MetricsMonitor(factory: metrics), TracingMonitor(tracer: tracer)] }
        ) { client in
            for id in [41, 42] { _ = try await client.send(Endpoint<Article>(path: "/json?user=\(id)&token=abc")) }
            _ = try await client.send(Endpoint<Article>(path: server.baseURL.absoluteString + "/json?api_key=S3CRET"))
        }
        #expect(
            metrics.counterTotal(
                label: "courier_requests_total",
                dimensions: [("endpoint", "unnamed"), ("method", "GET"), ("outcome", "success"), ("source", "network")]) == 3)
        let everyValue = metrics.counters.flatMap(\.dimensions).map(\.1) + metrics.timers.flatMap(\.dimensions).map(\.1)
        #expect(!everyValue.contains { $0.contains("json") || $0.contains("abc") || $0.contains("S3CRET") || $0.contains("41") })
        let spans = tracer.finishedSpans
        #expect(!spans.isEmpty)
        #expect(spans.allSatisfy { !$0.operationName.contains("json") && !$0.operationName.contains("S3CRET") })
        #expect(spans.allSatisfy { $0.attributes.get("courier.endpoint") == nil })
        #expect(Endpoint<Article>(path: "/json?token=abc").name == "GET /json")
        #expect(Endpoint<Article>(path: "https://ann:pw@api.example/v1/items?key=k#top").name == "GET https://api.example/v1/items")
        var renamed = Endpoint<Article>(path: "/json")
        renamed.name = "article"
        #expect(renamed.hasOwnName)
    }

    @Test(arguments: TransportKind.allCases)
    func queuedRequestsRaiseAndLowerTheQueueGauge(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/held" { await gate.wait() }
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let metrics = TestMetrics()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [MetricsMonitor(factory: metrics)]
                $0.scheduling = SchedulerConfiguration(maxConcurrentRequests: 1, maxRequestsPerHost: 1)
            }
        ) { client in
            let held = client.start(Endpoint<Article>(path: "/held"))
            #expect(await eventually { server.requests.count == 1 })
            let waiting = client.start(Endpoint<Article>(path: "/next"))
            let host = "127.0.0.1:\(server.port)"
            #expect(await eventually { (try? metrics.expectMeter("courier_requests_queued", [("host", host)]).lastValue) == 1 })
            #expect(try metrics.expectMeter("courier_requests_in_flight", [("host", host)]).lastValue == 1)
            await gate.open()
            _ = try await held.value
            _ = try await waiting.value
            #expect(try metrics.expectMeter("courier_requests_queued", [("host", host)]).lastValue == 0)
            #expect(try metrics.expectMeter("courier_requests_in_flight", [("host", host)]).lastValue == 0)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestIsASpanUnderTheCallersWithOneChildPerAttemptAndTraceparentOnTheWire(_ kind: TransportKind) async throws {
        let calls = Locked(0)
        let server = try await http1Server { request in
            let call = calls.withLock {
                $0 += 1
                return $0
            }
            if call == 1 { return .text("busy", status: 503, headers: [("Retry-After", "0")]) }
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let tracer = W3CInMemoryTracer()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [TracingMonitor(tracer: tracer)] }) { client in
            try await tracer.withSpan("screen.load") { _ in
                _ = try await client.send(Endpoint<Article>(name: "article", path: "/article?token=t-secret"))
            }
        }
        let spans = tracer.finishedSpans
        let parent = try #require(spans.first { $0.operationName == "screen.load" })
        let request = try #require(spans.first { $0.operationName == "article" })
        let attempts = spans.filter { $0.operationName == "GET" }
        #expect(request.parentSpanID == parent.spanID)
        #expect(request.traceID == parent.traceID)
        #expect(attempts.count == 2)
        #expect(attempts.allSatisfy { $0.parentSpanID == request.spanID && $0.kind == .client })
        #expect(attempts.map { $0.attributes.get("http.response.status_code")?.toSpanAttribute() } == [.int64(503), .int64(200)])
        #expect(attempts[0].attributes.get("http.request.resend_count") == nil)
        #expect(attempts[1].attributes.get("http.request.resend_count")?.toSpanAttribute() == .int64(1))
        #expect(attempts[0].attributes.get("error.type")?.toSpanAttribute() == .string("503"))
        #expect(attempts[0].attributes.get("http.request.method")?.toSpanAttribute() == .string("GET"))
        #expect(attempts[0].attributes.get("server.address")?.toSpanAttribute() == .string("127.0.0.1"))
        #expect(attempts[0].attributes.get("server.port")?.toSpanAttribute() == .int64(Int64(server.port)))
        #expect(
            attempts[0].attributes.get("url.full")?.toSpanAttribute() == .string("http://127.0.0.1:\(server.port)/article?token=REDACTED"))
        #expect(request.attributes.get("http.response.status_code")?.toSpanAttribute() == .int64(200))
        #expect(request.events.map(\.name) == ["retry"])
        // Each attempt carried its own span's context: the server saw W3C traceparent headers.
        let sent = server.requests.map { $0.header("traceparent") }
        #expect(sent == attempts.map { "00-\($0.traceID)-\($0.spanID)-01" })
        #expect(sent.allSatisfy { ($0 ?? "").range(of: "^00-[0-9a-f]{32}-[0-9a-f]{16}-01$", options: .regularExpression) != nil })
    }

    /// OpenTelemetry's HTTP client conventions: `http.request.resend_count` counts every resend,
    /// redirects included. It was the attempt number plus the hop, and the hop starts again at 0
    /// on a retry, so two attempt spans of one request both said 1.
    @Test(arguments: TransportKind.allCases)
    func eachAttemptSpanCountsTheResendsBeforeIt(_ kind: TransportKind) async throws {
        let nextCalls = Locked(0)
        let server = try await http1Server { request in
            if request.path == "/start" { return ScriptedResponse(status: 302, headers: [("Location", "/next")]) }
            let call = nextCalls.withLock {
                $0 += 1
                return $0
            }
            return call == 1 ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : .json(#"{"id":1,"title":"x"}"#)
        }
        let tracer = W3CInMemoryTracer()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [TracingMonitor(tracer: tracer)] }) { client in
            _ = try await client.send(Endpoint<Article>(name: "article", path: "/start"))
        }
        #expect(server.requests.map(\.path) == ["/start", "/next", "/start", "/next"])
        let attempts = tracer.finishedSpans.filter { $0.operationName == "GET" }
        let counts = attempts.map { span -> Int64 in
            guard case .int64(let count) = span.attributes.get("http.request.resend_count")?.toSpanAttribute() else { return 0 }
            return count
        }
        #expect(counts.sorted() == [0, 1, 2, 3])
        // Each hop and retry carried its own span's context, not one a previous hop was sent with.
        let sent = server.requests.compactMap { $0.header("traceparent") }
        #expect(Set(sent) == Set(attempts.map { "00-\($0.traceID)-\($0.spanID)-01" }))
        #expect(Set(sent).count == 4)
    }

    /// OpenTelemetry's HTTP client conventions: `server.address` is the host without an IPv6
    /// literal's brackets, `server.port` the port; `url.full` keeps the brackets (a URL needs them).
    @Test(arguments: TransportKind.allCases)
    func anIPv6HostIsNamedWithoutBracketsInTheSpan(_ kind: TransportKind) async throws {
        let server = try await TestServer.start(.http1, host: "::1", handler: Routes.standard)
        let (transport, shutdown) = makeTransport(kind)
        let tracer = W3CInMemoryTracer()
        let client = Client(
            configuration: .init(transport: transport, baseURL: URL(string: "http://[::1]:\(server.port)")!) {
                $0.eventMonitors = [TracingMonitor(tracer: tracer)]
            })
        do {
            if kind == .urlSession {
                // FoundationNetworking on Linux refuses IPv6 literal hosts (NSURLErrorBadURL):
                // a typed error, nothing sent, and the attempt's span is named all the same.
                let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(name: "article", path: "/json")) }
                #expect(error?.kind == .invalidRequest)
                #expect(error?.message.contains("IPv6") == true)
                #expect(server.requests.isEmpty)
            } else {
                let article = try await client.send(Endpoint<Article>(name: "article", path: "/json"))
                #expect(article.id == 1)
                #expect(server.requests.count == 1)
            }
        } catch {
            try? await shutdown()
            try? await server.stop()
            throw error
        }
        try await shutdown()
        try await server.stop()
        // One attempt: a URL the platform refuses is not sent again.
        let attempts = tracer.finishedSpans.filter { $0.operationName == "GET" }
        #expect(attempts.count == 1)
        let attempt = try #require(attempts.first)
        #expect(attempt.attributes.get("server.address")?.toSpanAttribute() == .string("::1"))
        #expect(attempt.attributes.get("server.port")?.toSpanAttribute() == .int64(Int64(server.port)))
        #expect(attempt.attributes.get("url.full")?.toSpanAttribute() == .string("http://[::1]:\(server.port)/json"))
    }

    /// A middleware that sends the request twice at once (hedging) makes two attempts of one
    /// request: each gets its own span, ended by its own response, and its own `traceparent` on
    /// the wire (the second took the first's place: the first span was never ended, and both
    /// attempts could carry the second's context).
    @Test(arguments: TransportKind.allCases)
    func twoAttemptsOfOneRequestAtOnceHaveASpanEach(_ kind: TransportKind) async throws {
        let arrived = Locked(0)
        let server = try await http1Server { _ in
            arrived.withLock { $0 += 1 }
            // Both attempts are open before either is answered.
            _ = await eventually { arrived.current >= 2 }
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let tracer = W3CInMemoryTracer()
        let monitor = TracingMonitor(tracer: tracer)
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [monitor]
                $0.middleware = [SlotAcrossHostsTests.hedging()]
            }
        ) { client in
            let article = try await client.send(Endpoint<Article>(name: "hedged", path: "/json"))
            #expect(article.id == 1)
        }
        let attempts = tracer.finishedSpans.filter { $0.operationName == "GET" }
        #expect(attempts.count == 2)
        #expect(Set(attempts.map(\.spanID)).count == 2)
        let sent = server.requests.compactMap { $0.header("traceparent") }
        #expect(sent.count == 2)
        #expect(Set(sent).count == 2)
        #expect(monitor.entryCount == 0)
    }

    @Test(arguments: TransportKind.allCases)
    func deduplicatedCallersShareOneNetworkSpanAndLinkToIt(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { _ in
            await gate.wait()
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let tracer = W3CInMemoryTracer()
        let events = CountingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [TracingMonitor(tracer: tracer), events] }) { client in
            let first = client.start(Endpoint<Article>(name: "shared", path: "/shared"))
            #expect(await eventually { server.requests.count == 1 })
            let second = client.start(Endpoint<Article>(name: "shared", path: "/shared"))
            let third = client.start(Endpoint<Article>(name: "shared", path: "/shared"))
            #expect(await eventually { events.count("joined") == 2 })
            await gate.open()
            _ = try await first.value
            _ = try await second.value
            _ = try await third.value
        }
        let spans = tracer.finishedSpans
        let network = spans.filter { $0.operationName == "GET" }
        #expect(network.count == 1)
        let callers = spans.filter { $0.operationName == "shared" }
        #expect(callers.count == 3)
        let attempt = try #require(network.first)
        let leader = callers.filter { $0.spanID == attempt.parentSpanID }
        #expect(leader.count == 1)
        let joiners = callers.filter { $0.spanID != attempt.parentSpanID }
        #expect(joiners.count == 2)
        for joiner in joiners {
            #expect(joiner.links.compactMap { $0.context.inMemorySpanContext?.spanID } == [attempt.spanID])
            #expect(joiner.attributes.get("courier.deduplicated")?.toSpanAttribute() == .bool(true))
        }
        #expect(server.requests.first?.header("traceparent") == "00-\(attempt.traceID)-\(attempt.spanID)-01")
    }

    @Test(arguments: TransportKind.allCases)
    func aSharedRequestWhoseFirstCallerLeftStillEndsItsSpanAndForgetsIt(_ kind: TransportKind) async throws {
        // The leader's end removed the entry holding the open network span: that span never
        // ended, and the attempt's later events made an entry nothing removed.
        let gate = Gate()
        let server = try await http1Server { _ in
            await gate.wait()
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let tracer = W3CInMemoryTracer()
        let monitor = TracingMonitor(tracer: tracer)
        let events = CountingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor, events] }) { client in
            let first = client.start(Endpoint<Article>(name: "shared", path: "/shared"))
            #expect(await eventually { server.requests.count == 1 })
            let second = client.start(Endpoint<Article>(name: "shared", path: "/shared"))
            #expect(await eventually { events.count("joined") == 1 })
            first.cancel()
            _ = await expectCourierError { _ = try await first.value }
            await gate.open()
            _ = try await second.value
            #expect(await eventually { tracer.inner.finishedSpans.contains { $0.operationName == "GET" } })
            #expect(await eventually { monitor.entryCount == 0 })
        }
        #expect(tracer.inner.activeSpans.isEmpty)
    }

    @Test(arguments: TransportKind.allCases)
    func aDownloadOfTwoRoundsEndsItsSpanAndForgetsIt(_ kind: TransportKind) async throws {
        // Each round of a download was a request started anew: a round whose range was answered
        // with the whole body again (the second round then asks for all of it) left its span
        // open and its entry behind.
        let origin = FileOrigin(cutFirstAfter: 400_000, answersAnotherRange: true)
        let folder = temporaryDirectory("traced-download")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        let tracer = W3CInMemoryTracer()
        let monitor = TracingMonitor(tracer: tracer)
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let destination = DownloadDestination(directory: folder, fileName: "traced.bin")
            let endpoint = Endpoint<Data>(name: "file", path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.status.code == 200)
            #expect(server.requests.count == 3)
            #expect(await eventually { monitor.entryCount == 0 })
        }
        #expect(tracer.inner.activeSpans.isEmpty)
        #expect(tracer.inner.finishedSpans.filter { $0.operationName == "file" }.count == 2)
    }

    @Test(arguments: TransportKind.allCases)
    func aFailedRequestsSpansSayWhatWentWrong(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let tracer = W3CInMemoryTracer()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [TracingMonitor(tracer: tracer)] }) { client in
            _ = try? await client.send(Endpoint<Article>(name: "gone", path: "/status/404").retry(.never))
            _ = try? await client.send(Endpoint<Article>(name: "cut", path: "/close-before").retry(.never))
        }
        let spans = tracer.finishedSpans
        let gone = try #require(spans.first { $0.operationName == "gone" })
        #expect(gone.status?.code == .error)
        #expect(gone.attributes.get("error.type")?.toSpanAttribute() == .string("404"))
        let cut = try #require(spans.first { $0.operationName == "cut" })
        #expect(cut.status?.code == .error)
        #expect(cut.attributes.get("error.type")?.toSpanAttribute() == .string("transport"))
        #expect(cut.errors.count == 1)
        // No span is left open.
        #expect(tracer.inner.activeSpans.isEmpty)
    }

    /// A redirect sets the host a slot is for: a server that sends each response to a new host
    /// would add two series per host for ever. The first `maxHosts` hosts get their own; later
    /// ones share `other`, where their increments and decrements meet. (Monitor-level: the
    /// monitor alone decides the series, whatever the transport.)
    @Test
    func hostSeriesStopGrowingAtTheLimit() throws {
        let metrics = TestMetrics()
        let monitor = MetricsMonitor(factory: metrics)
        let client = Client(configuration: .init(transport: StubTransport { _ in .status(.ok) }, baseURL: URL(string: "http://api.test")!))
        let event = RequestEvent(request: try client.makeRequest(for: Endpoint<Data>(path: "/x", decoding: .data)))
        let hosts = (0..<(MetricsMonitor.maxHosts + 40)).map { "h\($0).attacker.test" }
        for host in hosts { monitor.slotAcquired(event, host: host) }
        #expect(metrics.meters(label: "courier_requests_in_flight").count == MetricsMonitor.maxHosts + 1)
        #expect(try metrics.expectMeter("courier_requests_in_flight", [("host", "other")]).lastValue == 40)
        #expect(try metrics.expectMeter("courier_requests_in_flight", [("host", hosts[0])]).lastValue == 1)
        for host in hosts { monitor.slotReleased(event, host: host) }
        for meter in metrics.meters(label: "courier_requests_in_flight") { #expect(meter.lastValue == 0) }
        #expect(metrics.meters(label: "courier_requests_in_flight").count == MetricsMonitor.maxHosts + 1)
    }
}
