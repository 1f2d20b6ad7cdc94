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

    /// HTTP/2 over TLS needs AsyncHTTPClient: URLSession on Linux does not speak HTTP/2.
    @Test
    func aStalledHTTP2StreamTimesOutWhileTheConnectionCarriesOtherTraffic() async throws {
        let server = try await tlsServer { request in
            if request.path == "/stall" {
                return .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(30)))
            }
            return await Routes.standard(request)
        }
        try await withClient(.asyncHTTPClient, server: server) { client in
            let stalled = client.start(Endpoint<Article>(path: "/stall", timeout: .seconds(3)).retry(.never))
            // Other streams on the same connection keep it busy while the stalled one waits.
            var versions: Set<HTTPVersion> = []
            for index in 0..<20 {
                versions.insert(try await client.response(Endpoint<Article>(path: "/json?n=\(index)")).version)
            }
            #expect(versions == [.http2])
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

/// Identity at the seams: what makes two requests the same, for deduplication and the cache.
@Suite("Logical-request identity: what may share an answer and what may not")
struct LogicalIdentityTests {
    @Test(arguments: TransportKind.allCases)
    func closuresAsEndpointMiddlewareAreNeverShared(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            await gate.wait()
            return .json(#"{"id":1,"title":"\#(request.header("authorization") ?? "-")"}"#)
        }
        try await withClient(kind, server: server) { client in
            func signed(_ user: String) -> Endpoint<Article> {
                Endpoint<Article>(
                    path: "/me",
                    middleware: [
                        ClosureMiddleware { request, next in
                            var request = request
                            request.head.headerFields[.authorization] = "Bearer \(user)"
                            return try await next(request)
                        }
                    ])
            }
            let alice = client.start(signed("alice"))
            let bob = client.start(signed("bob"))
            #expect(await eventually { server.requests.count == 2 })
            await gate.open()
            let (a, b) = (try await alice.value, try await bob.value)
            #expect(a.title == "Bearer alice")
            #expect(b.title == "Bearer bob")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func endpointsThatDifferInAnyHeaderOrInAcceptedStatusesAreNotShared(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            await gate.wait()
            return .json(
                #"{"id":1,"title":"\#(request.header("x-tenant") ?? "-")"}"#, status: request.header("x-tenant") == "gone" ? 404 : 200)
        }
        try await withClient(kind, server: server) { client in
            let red = client.start(Endpoint<Article>(path: "/t", headers: [HTTPField.Name("X-Tenant")!: "red"]))
            let blue = client.start(Endpoint<Article>(path: "/t", headers: [HTTPField.Name("X-Tenant")!: "blue"]))
            let lenient = client.start(
                Endpoint<Article>(path: "/t", headers: [HTTPField.Name("X-Tenant")!: "gone"], acceptedStatuses: 200..<500))
            let strict = client.start(Endpoint<Article>(path: "/t", headers: [HTTPField.Name("X-Tenant")!: "gone"]))
            #expect(await eventually { server.requests.count == 4 })
            await gate.open()
            do {
                let got = try await red.value.title
                #expect(got == "red")
            }
            do {
                let got = try await blue.value.title
                #expect(got == "blue")
            }
            do {
                let got = try await lenient.response.status.code
                #expect(got == 404)
            }
            let error = await expectCourierError { _ = try await strict.value }
            #expect(error?.status?.code == 404)
            #expect(client.deduplicationCounts.coalesced == 0)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStoredStatusIsServedOnlyToEndpointsThatAcceptIt(_ kind: TransportKind) async throws {
        // 404 is heuristically cacheable (RFC 9111 §4.2.2); here it is explicitly fresh for a minute.
        let server = try await http1Server { _ in .text("gone", status: 404, headers: [("Cache-Control", "max-age=60")]) }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let lenient = Endpoint<String>(path: "/maybe", acceptedStatuses: 200..<500, decoding: .string)
            let first = try await client.response(lenient)
            let second = try await client.response(lenient)
            #expect(first.status.code == 404)
            #expect(second.source == .cache)
            // An endpoint that accepts only 2xx is never answered with the stored 404 as a success.
            let error = await expectCourierError { _ = try await client.send(Endpoint<String>(path: "/maybe", decoding: .string)) }
            #expect(error?.status?.code == 404)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func twoJSONRPCOperationsWithTheSameParamsNeverShareACachedAnswer(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            let object = (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any] ?? [:]
            let method = object["method"] as? String ?? "?"
            let id = object["id"] as? Int ?? 0
            return .json(#"{"jsonrpc":"2.0","result":"\#(method)","id":\#(id)}"#)
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            func call(_ method: String) -> Endpoint<String> {
                var endpoint = Endpoint<String>.rpc(method, params: ["id": 1])
                endpoint.path = "/rpc"
                endpoint.cachePolicy = .cacheFor(.seconds(60)).allowingAnyMethod()
                return endpoint
            }
            do {
                let got = try await client.send(call("getUser"))
                #expect(got == "getUser")
            }
            do {
                let got = try await client.send(call("getOrders"))
                #expect(got == "getOrders")
            }
            let again = try await client.response(call("getUser"))
            #expect(again.value == "getUser")
            #expect(again.source == .cache)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aJoinersErrorNamesTheJoinersOwnRequest(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { _ in
            await gate.wait()
            return .text("broken", status: 500)
        }
        try await withClient(kind, server: server) { client in
            let first = client.start(Endpoint<Article>(name: "first", path: "/broken"))
            #expect(await eventually { server.requests.count == 1 })
            let joiner = client.start(Endpoint<Article>(name: "joiner", path: "/broken"))
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 })
            await gate.open()
            let a = await expectCourierError { _ = try await first.value }
            let b = await expectCourierError { _ = try await joiner.value }
            #expect(a?.context?.endpoint == "first")
            #expect(b?.context?.endpoint == "joiner")
            #expect(a?.context?.requestID != b?.context?.requestID)
            #expect(b?.context?.stage == "status-check")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStreamDroppedUnreadFreesItsSlotAndStopsItsBody(_ kind: TransportKind) async throws {
        // 32 MiB in 64 KiB chunks, 50 ms apart: about 25 s unless the client goes away.
        let server = try await http1Server { request in
            request.path == "/big-chunked"
                ? ScriptedResponse(status: 200, body: Data(count: 32 << 20)).with(.chunked(chunkSize: 64 << 10, delay: .milliseconds(50)))
                : await Routes.standard(request)
        }
        try await withClient(kind, server: server, configure: { $0.scheduling = SchedulerConfiguration(maxConcurrentRequests: 1) }) {
            client in
            do {
                let stream = try await client.stream(Endpoint<Data>(path: "/big-chunked", decoding: .data))
                #expect(stream.status.code == 200)
                #expect(client.traffic.inFlight == 1)
            }
            // The 32 MiB body was never read: the slot is free and the server stops sending.
            do {
                let got = try await client.send(Endpoint<Article>(path: "/json")).id
                #expect(got == 1)
            }
            #expect(await eventually { client.traffic.inFlight == 0 })
            #expect(await eventually { server.abandonedCount >= 1 })
        }
    }
}

/// HTTP/2 needs AsyncHTTPClient here: URLSession on Linux does not speak HTTP/2.
@Suite("Retries of streams the server refused")
struct RefusedStreamTests {
    @Test
    func aRefusedStreamIsRetriedEvenForAPostAndOtherResetsAreNot() async throws {
        let counter = PathCounter()
        let server = try await tlsServer { request in
            let n = counter.hit(request.path)
            switch request.path {
            case "/refused", "/refused-once":
                // RFC 9113 §8.7: REFUSED_STREAM means nothing was processed, so any method may be retried.
                return n == 1 ? ScriptedResponse(behaviour: .resetStream(errorCode: 0x7)) : .json(#"{"id":1,"title":"accepted"}"#)
            default:
                // INTERNAL_ERROR: the server may have acted on it; a POST is not sent again.
                return ScriptedResponse(behaviour: .resetStream(errorCode: 0x2))
            }
        }
        try await withClient(.asyncHTTPClient, server: server) { client in
            let accepted = try await client.response(Endpoint<Article>(method: .post, path: "/refused", body: .json(["a": 1])))
            #expect(accepted.value.title == "accepted")
            #expect(accepted.version == .http2)
            #expect(counter["/refused"] == 2)
            // The second attempt is the retry stage's, not the transport's: without retries it fails.
            let unretried = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(method: .post, path: "/refused-once", body: .json(["a": 1])).retry(.never))
            }
            #expect(unretried?.kind == .transport)
            #expect(counter["/refused-once"] == 1)
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(method: .post, path: "/internal", body: .json(["a": 1])))
            }
            #expect(error?.kind == .transport)
            #expect(counter["/internal"] == 1)
        }
    }
}

/// The public surface: what `import Courier` gives, and configuration closures that may throw.
@Suite("Public surface")
struct PublicSurfaceTests {
    @Test
    func trustCanBeCalledInsideTheConfigurationClosure() async throws {
        let server = try await tlsServer()
        let configuration = try AsyncHTTPClientTransport.Configuration {
            try $0.trust(pemCertificates: Certificates.shared.caPEMBytes)
        }
        let transport = AsyncHTTPClientTransport(configuration: configuration)
        let client = try Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.timeout = .seconds(30)
                try $0.trust(check: true)
            })
        let article = try await client.send(Endpoint<Article>(path: "/json"))
        #expect(article.id == 1)
        // A closure that throws makes the initialiser throw, with the closure's error.
        #expect(throws: (any Error).self) {
            _ = try AsyncHTTPClientTransport.Configuration { try $0.trust(pemCertificates: Array("not a certificate".utf8)) }
        }
        try await transport.shutdown()
        try await server.stop()
    }
}

extension Client.Configuration {
    /// A throwing step inside a configuration closure, as an app's own setup might have.
    fileprivate mutating func trust(check: Bool) throws {
        guard check else { throw CourierError(.invalidRequest, "not trusted") }
    }
}

/// Streamed bodies: the per-stream idle timeout (`bodyIdleTimeout`).
@Suite("Streamed bodies end when they stall")
struct StreamIdleTests {
    @Test(arguments: TransportKind.allCases)
    func aStreamThatStallsEndsAfterTheIdleTimeoutOverHTTP1(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in
            .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(30)))
        }
        try await withClient(kind, server: server, configure: { $0.bodyIdleTimeout = .seconds(1) }) { client in
            let stream = try await client.stream(Endpoint<Data>(path: "/stall", decoding: .data))
            let error = await expectCourierError { for try await _ in stream.body {} }
            #expect(error?.kind == .timeout)
        }
    }

    /// HTTP/2 needs AsyncHTTPClient: URLSession on Linux does not speak it.
    @Test
    func aStalledHTTP2StreamEndsWhileItsConnectionStaysBusy() async throws {
        let server = try await tlsServer { request in
            request.path == "/stall"
                ? .json(#"{"id":1,"title":"never finished"}"#).with(.stallMidBody(afterBytes: 5, .seconds(30)))
                : await Routes.standard(request)
        }
        try await withClient(.asyncHTTPClient, server: server, configure: { $0.bodyIdleTimeout = .seconds(2) }) { client in
            let stream = try await client.stream(Endpoint<Data>(path: "/stall", decoding: .data))
            #expect(stream.version == .http2)
            let reader = Task { () -> CourierError? in
                do {
                    for try await _ in stream.body {}
                    return nil
                } catch {
                    return error as? CourierError
                }
            }
            for index in 0..<20 {
                _ = try await client.send(Endpoint<Article>(path: "/json?n=\(index)"))
            }
            let error = await reader.value
            #expect(error?.kind == .timeout)
            #expect(Set(server.requests.map(\.connectionID)).count == 1)
        }
    }
}
