import CourierAsyncHTTPClient
import CourierTestServer
import CourierTesting
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// A monitor that writes down every event, in order, as text.
final class RecordingMonitor: EventMonitor, Sendable {
    struct Entry: Sendable {
        var name: String
        var id: RequestID
        var detail = ""
    }

    private let recorded = Locked<[Entry]>([])
    let results = Locked<[RequestID: RequestResult]>([:])
    let extraFields: HTTPFields

    init(extraFields: HTTPFields = [:]) {
        self.extraFields = extraFields
    }

    var entries: [Entry] { self.recorded.current }
    var names: [String] { self.entries.map(\.name) }

    func names(of id: RequestID) -> [String] { self.entries.filter { $0.id == id }.map(\.name) }

    private func add(_ name: String, _ id: RequestID, _ detail: String = "") {
        self.recorded.withLock { $0.append(Entry(name: name, id: id, detail: detail)) }
    }

    func requestStarted(_ request: RequestEvent) { self.add("started", request.id) }
    func requestQueued(_ request: RequestEvent, host: String) { self.add("queued", request.id, host) }
    func requestDequeued(_ request: RequestEvent, host: String) { self.add("dequeued", request.id, host) }
    func slotAcquired(_ request: RequestEvent, host: String) { self.add("slot+", request.id, host) }
    func slotReleased(_ request: RequestEvent, host: String) { self.add("slot-", request.id, host) }
    func cacheHit(_ request: RequestEvent, source: ResponseSource, age: TimeInterval) { self.add("cacheHit", request.id, source.rawValue) }
    func cacheRevalidated(_ request: RequestEvent) { self.add("cacheRevalidated", request.id) }
    func cacheStored(_ request: RequestEvent) { self.add("cacheStored", request.id) }
    func deduplicationJoined(_ request: RequestEvent, sharing: RequestID) { self.add("joined", request.id, sharing.description) }
    func attemptStarted(_ attempt: AttemptEvent) { self.add("attempt", attempt.id, "\(attempt.attempt).\(attempt.hop)") }
    func fieldsToSend(with attempt: AttemptEvent) -> HTTPFields { self.extraFields }
    func responseReceived(_ attempt: AttemptEvent, response: HTTPResponse, version: HTTPVersion) {
        self.add("response", attempt.id, "\(response.status.code)")
    }
    func attemptFailed(_ attempt: AttemptEvent, error: CourierError) { self.add("attemptFailed", attempt.id, error.kind.description) }
    func redirected(_ request: RequestEvent, status: Int, location: String) { self.add("redirected", request.id, "\(status) \(location)") }
    func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String) {
        self.add("retrying", request.id, "\(attempt) \(reason)")
    }
    func authRefreshed(_ request: RequestEvent) { self.add("authRefreshed", request.id) }
    func decoded(_ request: RequestEvent, as type: String) { self.add("decoded", request.id, type) }
    func requestFinished(_ request: RequestEvent, result: RequestResult) {
        self.results.withLock { $0[request.id] = result }
        self.add("finished", request.id, result.source.rawValue)
    }
    func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.results.withLock { $0[request.id] = result }
        self.add("failed", request.id, error.kind.description)
    }
    func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.results.withLock { $0[request.id] = result }
        self.add("cancelled", request.id)
    }
}

@Suite("Event monitors see every pipeline event, in order, on both transports")
struct EventMonitorTests {
    @Test(arguments: TransportKind.allCases)
    func aPlainRequestRaisesItsEventsInTheOrderTheyHappen(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let monitor = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let article = try await client.send(Endpoint<Article>(name: "article", path: "/json"))
            #expect(article.id == 1)
            #expect(monitor.names == ["started", "slot+", "attempt", "response", "slot-", "decoded", "finished"])
            #expect(Set(monitor.entries.map(\.id)).count == 1)
            #expect(monitor.entries.first { $0.name == "decoded" }?.detail == "Article")
            let result = try #require(monitor.results.current.values.first)
            #expect(result.response?.status == .ok)
            #expect(result.bodySize == 24)
            #expect(result.body?.count == 24)
            #expect(result.source == .network)
            #expect(result.attempts == 1)
            #expect(result.delivery == .collected)
            #expect(result.version == .http1_1)
            // The fields as they went on the wire: the pipeline's Accept-Encoding, as the server got it.
            let sentEncoding = try #require(result.sentFields?[.acceptEncoding])
            #expect(sentEncoding == server.requests.last?.header("Accept-Encoding"))
            #expect(result.duration > .zero)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func everyInstalledMonitorSeesTheSameEvents(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let first = RecordingMonitor()
        let second = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [first, second] }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            _ = try? await client.send(Endpoint<Article>(path: "/status/500").retry(.never))
            #expect(first.names.count > 10)
            #expect(first.names == second.names)
            #expect(first.names.last == "failed")
            #expect(first.entries.last?.detail == CourierError.Kind.httpStatus.description)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func fieldsAMonitorAddsGoOnTheWireAndIntoTheResult(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let monitor = RecordingMonitor(extraFields: [
            HTTPField.Name("traceparent")!: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ])
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let echo = try await client.send(Endpoint<Echo>(path: "/echo"))
            #expect(echo.headers["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            let result = try #require(monitor.results.current.values.first)
            #expect(result.sentFields?[HTTPField.Name("traceparent")!] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        }
    }

    /// W3C Trace Context §3: `traceparent` and `tracestate` are one context. A caller forwarding
    /// its own had it replaced by the monitor's, and the monitor's `tracestate` sent beside the
    /// caller's `traceparent` when only one of them was set.
    @Test(arguments: TransportKind.allCases)
    func aCallersOwnTraceContextIsSentAsItIs(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let monitor = RecordingMonitor(extraFields: [
            HTTPField.Name("traceparent")!: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            HTTPField.Name("tracestate")!: "monitor=1",
        ])
        let callers = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let echo = try await client.send(Endpoint<Echo>(path: "/echo", headers: [HTTPField.Name("traceparent")!: callers]))
            #expect(echo.headers["traceparent"] == callers)
            #expect(echo.headers["tracestate"] == nil)
            // Without one of its own, the request carries the monitor's fields.
            let plain = try await client.send(Endpoint<Echo>(path: "/echo"))
            #expect(plain.headers["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            #expect(plain.headers["tracestate"] == "monitor=1")
        }
    }

    /// A caller's field of another name (its own `baggage`) does not stop a monitor's trace
    /// context, and one monitor's fields do not stop another's.
    @Test(arguments: TransportKind.allCases)
    func aCallersOtherFieldAndAnotherMonitorLeaveTheTraceContextOn(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let tracing = RecordingMonitor(extraFields: [
            HTTPField.Name("traceparent")!: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            HTTPField.Name("baggage")!: "monitor=1",
        ])
        let other = RecordingMonitor(extraFields: [
            HTTPField.Name("traceparent")!: "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"
        ])
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [tracing, other] }) { client in
            let echo = try await client.send(Endpoint<Echo>(path: "/echo", headers: [HTTPField.Name("baggage")!: "caller=1"]))
            #expect(echo.headers["baggage"] == "caller=1")
            #expect(echo.headers["traceparent"]?.hasPrefix("00-") == true)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func retriesAreAttemptsWithTheirNumbers(_ kind: TransportKind) async throws {
        let server = try await http1Server(numbering: { _, call in
            call == 1 ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : .json(#"{"id":1,"title":"ok"}"#)
        })
        let monitor = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/flaky"))
            let attempts = monitor.entries.filter { $0.name == "attempt" }.map(\.detail)
            #expect(attempts == ["1.0", "2.0"])
            #expect(monitor.entries.filter { $0.name == "response" }.map(\.detail) == ["503", "200"])
            #expect(monitor.entries.first { $0.name == "retrying" }?.detail == "2 status 503")
            #expect(monitor.results.current.values.first?.attempts == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func redirectsAreEventsAndEachHopIsAnAttempt(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let monitor = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            _ = try await client.send(Endpoint<Echo>(path: "/redirect/2"))
            #expect(monitor.entries.filter { $0.name == "attempt" }.map(\.detail) == ["1.0", "1.1", "1.2"])
            let redirects = monitor.entries.filter { $0.name == "redirected" }.map(\.detail)
            #expect(redirects.count == 2)
            #expect(redirects.allSatisfy { $0.hasPrefix("302 http://127.0.0.1:\(server.port)/") })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheEventsSayStoredHitAndRevalidated(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            if request.header("if-none-match") == "\"v1\"" {
                return ScriptedResponse(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=0")], body: Data())
            }
            if request.path == "/fresh" { return .json(#"{"id":1,"title":"fresh"}"#, headers: [("Cache-Control", "max-age=600")]) }
            return .json(#"{"id":2,"title":"tagged"}"#, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=0")])
        }
        let monitor = RecordingMonitor()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [monitor]
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
            }
        ) { client in
            _ = try await client.send(Endpoint<Article>(path: "/fresh"))
            _ = try await client.send(Endpoint<Article>(path: "/fresh"))
            _ = try await client.send(Endpoint<Article>(path: "/tagged"))
            _ = try await client.send(Endpoint<Article>(path: "/tagged"))
            let names = monitor.names.filter { $0.hasPrefix("cache") }
            #expect(names == ["cacheStored", "cacheHit", "cacheStored", "cacheRevalidated"])
            // The hit went nowhere near the scheduler or the transport.
            let hitID = try #require(monitor.entries.first { $0.name == "cacheHit" }?.id)
            #expect(monitor.names(of: hitID) == ["started", "cacheHit", "decoded", "finished"])
            #expect(monitor.results.current[hitID]?.source == .cache)
            #expect(monitor.results.current[hitID]?.sentFields == nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aJoinerIsToldWhichRequestItShares(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            await gate.wait()
            return .json(#"{"id":1,"title":"shared"}"#)
        }
        let monitor = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let first = client.start(Endpoint<Article>(path: "/shared"))
            #expect(await eventually { server.requests.count == 1 })
            let second = client.start(Endpoint<Article>(path: "/shared"))
            #expect(await eventually { monitor.names.contains("joined") })
            await gate.open()
            _ = try await first.value
            _ = try await second.value
            let joined = try #require(monitor.entries.first { $0.name == "joined" })
            let leader = try #require(monitor.entries.first { $0.name == "attempt" }?.id)
            #expect(joined.detail == leader.description)
            #expect(joined.id != leader)
            #expect(monitor.names(of: joined.id) == ["started", "joined", "decoded", "finished"])
            #expect(monitor.results.current[joined.id]?.source == .coalesced)
            #expect(monitor.names.filter { $0 == "attempt" }.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestThatWaitsForASlotIsQueuedThenDequeued(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/held" { await gate.wait() }
            return .json(#"{"id":1,"title":"x"}"#)
        }
        let monitor = RecordingMonitor()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [monitor]
                $0.scheduling = SchedulerConfiguration(maxConcurrentRequests: 1, maxRequestsPerHost: 1)
            }
        ) { client in
            let held = client.start(Endpoint<Article>(path: "/held"))
            #expect(await eventually { server.requests.count == 1 })
            let waiting = client.start(Endpoint<Article>(path: "/next"))
            #expect(await eventually { monitor.names.contains("queued") })
            await gate.open()
            _ = try await held.value
            _ = try await waiting.value
            let queuedID = try #require(monitor.entries.first { $0.name == "queued" }?.id)
            #expect(monitor.names(of: queuedID).prefix(4) == ["started", "queued", "dequeued", "slot+"])
            #expect(monitor.entries.first { $0.name == "queued" }?.detail == "127.0.0.1:\(server.port)")
            #expect((monitor.results.current[queuedID]?.queued ?? .zero) > .zero)
            // Every slot taken was given back.
            #expect(monitor.names.filter { $0 == "slot+" }.count == monitor.names.filter { $0 == "slot-" }.count)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCancelledRequestIsCancelledNotFailed(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let monitor = RecordingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let handle = client.start(Endpoint<Article>(path: "/stall"))
            #expect(await eventually { server.requests.count == 1 })
            handle.cancel()
            _ = try? await handle.value
            #expect(await eventually { monitor.names.contains("cancelled") })
            #expect(!monitor.names.contains("failed"))
            // The GET was shared (deduplication): its caller leaves at once, and the shared
            // exchange unwinds on its own task, giving its slot back soon after.
            #expect(await eventually { monitor.names.filter { $0 == "slot+" }.count == monitor.names.filter { $0 == "slot-" }.count })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anAuthenticatorsRefreshIsAnEventOfTheRequestThatWaitedForIt(_ kind: TransportKind) async throws {
        let oauth = OAuthServer()
        let server = try await http1Server(oauth.respond)
        let monitor = RecordingMonitor()
        let expired = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(-10))
        let tokenClient = Client(configuration: .init(transport: URLSessionTransport()))
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(
                url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "courier-tests", clientSecret: "client-secret"),
            tokenClient: tokenClient, store: InMemoryCredentialStore(expired)
        )
        try await withClient(
            kind, server: server,
            configure: {
                $0.middleware = [auth]
                $0.eventMonitors = [monitor]
            }
        ) { client in
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-1")
            let refreshed = monitor.entries.filter { $0.name == "authRefreshed" }
            #expect(refreshed.count == 1)
            #expect(refreshed.first?.id == monitor.entries.first?.id)
        }
    }

    @Test
    func withoutAMonitorNoEventIsBuiltAndOnlyAFixtureRecorderMakesRequestsCarryALogicalCopy() async throws {
        let stub = StubTransport { _ in .json(#"{"id":1,"title":"x"}"#) }
        let quiet = Client(configuration: .init(transport: stub, baseURL: URL(string: "https://api.example")!) { $0.debugOptions = .off })
        #expect(!quiet.parts.events.isActive)
        _ = try await quiet.send(Endpoint<Article>(path: "/a"))
        #expect(stub.requests.first?.logical == nil)
        let watched = Client(
            configuration: .init(transport: stub, baseURL: URL(string: "https://api.example")!) {
                $0.debugOptions = .off
                $0.eventMonitors = [RecordingMonitor()]
            })
        #expect(watched.parts.events.isActive)
        _ = try await watched.send(Endpoint<Article>(path: "/a"))
        #expect(stub.requests.last?.logical == nil)
        let recording = Client(
            configuration: .init(transport: stub, baseURL: URL(string: "https://api.example")!) {
                $0.debugOptions = .off
                $0.eventMonitors = [
                    FixtureRecorder(
                        directory: FileManager.default.temporaryDirectory.appendingPathComponent("courier-unused-\(UUID().uuidString)"))
                ]
            })
        _ = try await recording.send(Endpoint<Article>(path: "/a"))
        #expect(stub.requests.last?.logical?.pathAndQuery == "/a")
    }

    @Test(arguments: TransportKind.allCases)
    func aStreamFinishesAtItsHeadAndADownloadWhenItsFileIsInPlace(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let monitor = RecordingMonitor()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-events-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let stream = try await client.stream(Endpoint<Data>(path: "/chunked", decoding: .data))
            let streamID = try #require(monitor.entries.first?.id)
            // The head has arrived; the body has not been read: the request has "finished" as a stream.
            #expect(monitor.results.current[streamID]?.delivery == .streaming)
            #expect(monitor.results.current[streamID]?.body == nil)
            #expect(!monitor.names(of: streamID).contains("slot-"))
            var bytes = 0
            for try await chunk in stream.body { bytes += chunk.count }
            #expect(bytes > 0)
            // The slot is given back when the body ends.
            #expect(await eventually { monitor.names(of: streamID).contains("slot-") })

            let result = try await client.download(
                Endpoint<Data>(path: "/json", decoding: .data), to: DownloadDestination(directory: folder, fileName: "a.json")
            ).value
            #expect(result.byteCount == 24)
            let downloadID = try #require(monitor.entries.last { $0.name == "finished" }?.id)
            #expect(downloadID != streamID)
            #expect(monitor.results.current[downloadID]?.delivery == .downloaded(resumedAt: 0))
            #expect(monitor.results.current[downloadID]?.bodySize == 24)
            #expect(monitor.names(of: downloadID).filter { $0 == "finished" }.count == 1)
        }
    }
}
