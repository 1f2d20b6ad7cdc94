import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import InMemoryLogging
import Logging
import Testing

@testable import Courier

@Suite("The pipeline: one stage list, whole-exchange deadlines, errors with context")
struct PipelineTests {
    @Test
    func theStageListIsTheDocumentedOrder() {
        let client = Client(configuration: .init(transport: URLSessionTransport()))
        #expect(
            client.pipeline.stageNames == [
                "classify", "build", "observe", "lifecycle", "deadline", "decode", "constrained", "cache-lookup", "deduplication",
                "cache-store",
                "schedule", "wire", "status-check", "body", "content-decoding", "client-middleware", "endpoint-middleware",
                "retry", "redirect", "cookies", "transport",
            ])
    }

    /// A stage whose feature the configuration leaves off (no cookie jar, no cache store, no
    /// client middleware, deduplication off) stays in the list but is not linked; switched on,
    /// each is linked in its place.
    @Test
    func stagesWhoseFeatureIsOffAreListedButNotLinked() {
        let all = [
            "classify", "build", "observe", "lifecycle", "deadline", "decode", "constrained", "cache-lookup", "deduplication",
            "cache-store",
            "schedule", "wire", "status-check", "body", "content-decoding", "client-middleware", "endpoint-middleware",
            "retry", "redirect", "cookies", "transport",
        ]
        let plain = Client(configuration: .init(transport: URLSessionTransport()))
        #expect(plain.pipeline.stageNames == all)
        #expect(
            plain.pipeline.linkedStageNames
                == all.filter { !["cache-lookup", "cache-store", "client-middleware", "cookies"].contains($0) })
        let bare = Client(configuration: .init(transport: URLSessionTransport()) { $0.deduplication.isEnabled = false })
        #expect(
            bare.pipeline.linkedStageNames
                == all.filter { !["cache-lookup", "deduplication", "cache-store", "client-middleware", "cookies"].contains($0) })
        let full = Client(
            configuration: .init(transport: URLSessionTransport()) {
                $0.cache.store = MemoryCacheStore()
                $0.cookies = CookieJar()
                $0.middleware = [PolicyGate()]
            })
        #expect(full.pipeline.linkedStageNames == all)
    }

    @Test
    func theDocCArticleListsTheStagesInTheOrderOfTheCode() throws {
        let article = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Courier/Courier.docc/Pipeline.md")
        let rows = try String(contentsOf: article, encoding: .utf8).split(separator: "\n").filter {
            $0.hasPrefix("| ") && $0.contains("| `")
        }
        let documented = rows.compactMap { row in row.split(separator: "`").dropFirst().first.map(String.init) }
        let client = Client(configuration: .init(transport: URLSessionTransport()))
        #expect(documented == client.pipeline.stageNames)
        // The rows are numbered 1, 2, 3, … with no gap, repeat or fraction.
        let numbers = rows.map { $0.split(separator: "|").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" }
        #expect(numbers == (1...documented.count).map(String.init))
    }

    /// One stage per file: each file of `Pipeline/Stages/` declares one stage type, named after
    /// the file, and no stage type is declared anywhere else.
    @Test
    func eachStageIsOneTypeInAFileOfItsOwn() throws {
        let sources = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Courier")
        let stagePattern = try Regex(#"(?m)^\s*(?:final\s+)?(?:struct|class|enum)\s+(\w+)\s*:\s*[^{\n]*\bPipelineStage\b"#)
        var stagesFound: [String: String] = [:]
        let files =
            FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" } ?? []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: stagePattern) {
                let name = String(text[match.output[1].range!])
                stagesFound[name] = file.path
            }
        }
        #expect(stagesFound.count == 20)
        for (name, path) in stagesFound {
            #expect(path.hasSuffix("/Pipeline/Stages/\(name).swift"), "\(name) is declared in \(path)")
        }
        let stageFiles = try FileManager.default.contentsOfDirectory(atPath: sources.appendingPathComponent("Pipeline/Stages").path)
        #expect(Set(stageFiles) == Set(stagesFound.keys.map { "\($0).swift" }))
    }

    // MARK: - A deadline covers the whole exchange (item: deadline × body)

    @Test(arguments: TransportKind.allCases)
    func aBodyThatStallsAfterTheHeadTimesOutAtTheDeadlineOverHTTP1(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in
            .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(30)))
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "/stall", timeout: .seconds(2)).retry(.never))
            }
            #expect(error?.kind == .timeout)
            #expect(error?.context?.stage == "deadline")
        }
    }

    /// HTTP/2 over TLS: on URLSession where the test CA can be trusted (``TransportKind/overTLS``).
    @Test(arguments: TransportKind.overTLS)
    func aStalledHTTP2StreamTimesOutWhileTheConnectionCarriesOtherTraffic(_ kind: TransportKind) async throws {
        let server = try await tlsServer { request in
            if request.path == "/stall" {
                return .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(60)))
            }
            return await Routes.standard(request)
        }
        try await withClient(kind, server: server) { client in
            // The connection is up (and HTTP/2 negotiated) before the stalled request starts its
            // deadline: a handshake under ThreadSanitizer on a busy machine has taken over 10 s,
            // and the request must reach the server before its deadline passes.
            _ = try await client.response(Endpoint<Article>(path: "/json?n=first"))
            let stalled = client.start(Endpoint<Article>(path: "/stall", timeout: .seconds(12)).retry(.never))
            // The stalled request is on the wire first, so its connection is up (and HTTP/2
            // negotiated) before the others go: libcurl opened a second connection for a request
            // that came while the first was still in its handshake.
            #expect(await eventually { server.requests.contains { $0.path == "/stall" } })
            // Other streams on the same connection keep it busy while the stalled one waits.
            var versions: Set<HTTPVersion> = []
            for index in 0..<20 {
                versions.insert(try await client.response(Endpoint<Article>(path: "/json?n=\(index)")).version)
            }
            #expect(versions == [HTTP2Tests.reportedHTTP2(kind)])
            let error = await expectCourierError { _ = try await stalled.value }
            #expect(error?.kind == .timeout)
            #expect(Set(server.requests.map(\.connectionID)).count == 1)
        }
    }

    // MARK: - Errors with context

    @Test(arguments: TransportKind.allCases)
    func everyErrorNamesTheEndpointRequestAttemptURLAndStage(_ kind: TransportKind) async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .info
        let server = try await http1Server { request in
            request.path == "/busy" ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : await Routes.standard(request)
        }
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(name: "orders.list", path: "/busy", query: ["access_token": "s3cr3t"]))
            }
            let context = try #require(error?.context)
            #expect(error?.kind == .httpStatus)
            #expect(context.endpoint == "orders.list")
            #expect(context.stage == "status-check")
            #expect(context.attempt == 3)
            #expect(context.url.contains("access_token=REDACTED"))
            #expect(!context.description.contains("s3cr3t"))
            // Each retry is logged with its attempt number, under the request's id.
            let lines = handler.entries.map { "\($0.message)" }
            let retries = lines.filter { $0.hasPrefix("↻ ") }
            #expect(retries.count == 2)
            #expect(retries.first?.contains("attempt 2") == true)
            #expect(retries.last?.contains("attempt 3") == true)
            #expect(retries.allSatisfy { $0.contains("\(context.requestID)") && $0.contains("after status 503") })

            let decoding = await expectCourierError { _ = try await client.send(Endpoint<Article>(name: "bad", path: "/bad-json")) }
            #expect(decoding?.kind == .decoding)
            #expect(decoding?.context?.stage == "decode")
            #expect(decoding?.context?.attempt == 1)
        }
    }

    struct Refusal: Error, CustomStringConvertible {
        var description: String { "refused by policy" }
    }

    struct PolicyGate: Middleware {
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            throw Refusal()
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aMiddlewaresOwnErrorSurfacesAsItselfNamedAfterTheMiddleware(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [PolicyGate()] }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .middleware)
            #expect(error?.underlying is Refusal)
            #expect(error?.context?.stage == "PolicyGate")
            #expect(error?.message.contains("refused by policy") == true)
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aTransportFailureNamesTheTransportStage(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/close-before").retry(.never)) }
            #expect(error?.kind == .transport)
            #expect(error?.context?.stage == "transport")
        }
    }

    /// Stages fused into one async function still name their own errors (the innermost failing
    /// stage's name is kept): a failure from each of the two segments' stages, with the cache,
    /// cookies and deduplication on, so the links between the segments run as well.
    @Test(arguments: TransportKind.allCases)
    func everyStageNamesItsOwnErrorsWhetherFusedOrLinked(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            request.path == "/envelope" ? .json(#"{"code":42,"msg":"try later","data":null}"#) : await Routes.standard(request)
        }
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
                $0.cookies = CookieJar()
                $0.maxResponseSize = 1 << 20
            }
        ) { client in
            #expect(client.pipeline.linkedStageNames.contains("cookies"))
            // The first segment: classify … constrained.
            client.isConstrained = true
            let constrained = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(path: "/json", decoding: .data).prefetch())
            }
            #expect(constrained?.kind == .constrained)
            #expect(constrained?.context?.stage == "constrained")
            client.isConstrained = false
            let decoding = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/bad-json")) }
            #expect(decoding?.kind == .decoding)
            #expect(decoding?.context?.stage == "decode")
            // The second segment: schedule … transport.
            let business = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "/envelope").wire(EnvelopeProtocol()))
            }
            #expect(business?.kind == .business)
            #expect(business?.context?.stage == "wire")
            let large = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/big-announced", decoding: .data)) }
            #expect(large?.kind == .responseTooLarge)
            #expect(large?.context?.stage == "body")
            let missing = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/missing").retry(.never)) }
            #expect(missing?.kind == .httpStatus)
            #expect(missing?.context?.stage == "status-check")
            let transport = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/close-before").retry(.never)) }
            #expect(transport?.kind == .transport)
            #expect(transport?.context?.stage == "transport")
        }
    }

    // MARK: - Constrained mode applies to every kind of exchange

    @Test(arguments: TransportKind.allCases)
    func constrainedModeRefusesPrefetchDownloadsAndStreams(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await withClient(kind, server: server) { client in
            client.isConstrained = true
            let prefetch = Endpoint<Data>(path: "/json", decoding: .data).prefetch()
            let download = await expectCourierError {
                _ = try await client.download(prefetch, to: DownloadDestination(directory: directory, fileName: "p.json")).value
            }
            #expect(download?.kind == .constrained)
            let stream = await expectCourierError { _ = try await client.stream(prefetch) }
            #expect(stream?.kind == .constrained)
            #expect(server.requests.isEmpty)
            client.isConstrained = false
            _ = try await client.download(prefetch, to: DownloadDestination(directory: directory, fileName: "p.json")).value
            #expect(server.requests.count == 1)
        }
    }

    // MARK: - Retries on the wire

    @Test(arguments: TransportKind.allCases)
    func anIdempotencyKeyMakesAPostRetryable(_ kind: TransportKind) async throws {
        let counter = PathCounter()
        let server = try await http1Server { request in
            counter.hit(request.path) < 3
                ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : .json(#"{"id":1,"title":"third time"}"#)
        }
        try await withClient(kind, server: server) { client in
            let plain = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(method: .post, path: "/plain", body: .json(["a": 1])))
            }
            #expect(plain?.status?.code == 503)
            #expect(counter["/plain"] == 1)
            let keyed = try await client.send(
                Endpoint<Article>(method: .post, path: "/keyed", body: .json(["a": 1])).header("Idempotency-Key", "k-1"))
            #expect(keyed.title == "third time")
            #expect(counter["/keyed"] == 3)
            #expect(server.requests.filter { $0.path == "/keyed" }.allSatisfy { $0.header("idempotency-key") == "k-1" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aConnectionClosedBeforeAnyResponseByteIsRetriedForAGet(_ kind: TransportKind) async throws {
        let counter = PathCounter()
        let server = try await http1Server { request in
            counter.hit(request.path) == 1 ? ScriptedResponse(behaviour: .closeBeforeResponding) : .json(#"{"id":1,"title":"reconnected"}"#)
        }
        try await withClient(kind, server: server) { client in
            let article = try await client.send(Endpoint<Article>(path: "/flaky"))
            #expect(article.title == "reconnected")
            #expect(counter["/flaky"] >= 2)
        }
    }

    /// Retry × per-hop middleware × a nested client: on a retry, per-hop middleware that fetches
    /// something through another client whose connection is refused fails this attempt; that
    /// other request's failed connection is not this request's, so no further attempt is made
    /// (the policy would allow a third).
    @Test(arguments: TransportKind.allCases)
    func anotherRequestsFailedConnectionIsNotRetried(_ kind: TransportKind) async throws {
        let counter = PathCounter()
        let server = try await http1Server { request in
            _ = counter.hit(request.path)
            return .text("busy", status: 503)
        }
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }
        let inner = Client(
            configuration: .init(transport: makeTransport(kind).transport, baseURL: URL(string: "http://127.0.0.1:\(refusing.port)")!))
        let calls = Locked(0)
        let signer = NestedFetchSigner(calls: calls, inner: inner)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(
                    Endpoint<Article>(path: "/busy", middleware: [signer]).retry(RetryPolicy(maxAttempts: 3, baseDelay: .zero)))
            }
            #expect(error?.kind == .transport)
            #expect(counter["/busy"] == 1)
            #expect(calls.withLock { $0 } == 2)
        }
    }

    /// Per-hop middleware that passes the first attempt on and, on each later one, fetches
    /// through `inner` first (which fails).
    struct NestedFetchSigner: PerHopMiddleware {
        let calls: Locked<Int>
        let inner: Client

        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            let call = self.calls.withLock { count in
                count += 1
                return count
            }
            if call > 1 { _ = try await self.inner.send(Endpoint<Data>(path: "/key", decoding: .data).retry(.never)) }
            return try await next(request)
        }
    }

    /// Retry × middleware: only what the transport throws counts as a failed connection. A
    /// middleware that throws an error of kind `transport` itself (its own network call failed)
    /// is not sent again, though the same kind from the wire is (the test above).
    @Test(arguments: TransportKind.allCases)
    func aMiddlewaresOwnTransportErrorIsNotRetried(_ kind: TransportKind) async throws {
        let counter = PathCounter()
        let server = try await http1Server { request in
            _ = counter.hit(request.path)
            return .json(#"{"id":1,"title":"never asked"}"#)
        }
        let calls = Locked(0)
        let failing = ClosureMiddleware { _, _ in
            calls.withLock { $0 += 1 }
            throw CourierError(.transport, "the token service could not be reached")
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "/guarded", middleware: [failing]).retry(.standard))
            }
            #expect(error?.kind == .transport)
            #expect(error?.context?.stage == "ClosureMiddleware")
            #expect(calls.withLock { $0 } == 1)
            #expect(counter["/guarded"] == 0)
        }
    }
}
