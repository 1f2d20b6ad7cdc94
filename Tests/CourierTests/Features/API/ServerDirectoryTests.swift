import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@Suite("Servers × environments")
struct ServerDirectoryTests {
    let urls: [ServiceID: [ServerEnvironment: URL]] = [
        .main: [
            .develop: URL(string: "http://dev.example")!, .test: URL(string: "http://test.example")!,
            .release: URL(string: "https://api.example")!,
        ],
        "payments": [.develop: URL(string: "http://pay-dev.example")!, .release: URL(string: "https://pay.example")!],
    ]

    @Test
    func releaseBuildIsLockedToRelease() throws {
        let servers = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: true, store: InMemoryEnvironmentStore(.test))
        #expect(servers.activeEnvironment == .release)
        #expect(throws: CourierError.self) { try servers.switchEnvironment(to: .develop) }
        #expect(servers.activeEnvironment == .release)
        #expect(try servers.baseURL(for: .main).host == "api.example")
    }

    @Test
    func aSavedEnvironmentNoServiceHasAnyMoreIsForgotten() throws {
        // A choice saved by an older build, for an environment this build has no URL for, would
        // make every request fail; switching to it is refused, and so is starting in it.
        let servers = ServerDirectory(
            urls: urls, buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore(ServerEnvironment("staging")))
        #expect(servers.activeEnvironment == .develop)
        #expect(try servers.baseURL(for: .main).host == "dev.example")
        let known = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore(.test))
        #expect(known.activeEnvironment == .test)
    }

    @Test
    func persistedManualSwitchWinsOverTheBuildDefault() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-env-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let first = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: false, store: FileEnvironmentStore(url: file))
        #expect(first.activeEnvironment == .develop)
        try first.switchEnvironment(to: .test)
        #expect(first.activeEnvironment == .test)
        let saved = try JSONDecoder().decode([String: String].self, from: Data(contentsOf: file))
        #expect(saved == ["environment": "test"])
        // A new launch reads the switch back.
        let second = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: false, store: FileEnvironmentStore(url: file))
        #expect(second.activeEnvironment == .test)
        try second.switchEnvironment(to: nil)
        #expect(second.activeEnvironment == .develop)
    }

    @Test
    func missingServiceOrEnvironmentIsAnInvalidRequestNotACrash() async throws {
        let servers = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: false)
        #expect(throws: CourierError.self) { try servers.baseURL(for: "bbs") }
        #expect(throws: CourierError.self) { try servers.baseURL(for: "payments", in: .test) }
        #expect(throws: CourierError.self) { try servers.switchEnvironment(to: .hotfix) }
        let client = Client(configuration: .init(transport: URLSessionTransport()) { $0.servers = servers })
        let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/x").service("bbs")) }
        #expect(error?.kind == .invalidRequest)
        #expect(error?.message.contains("bbs") == true)
    }

    @Test
    func listsServicesAndEnvironmentsForADebugMenu() {
        let servers = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: false)
        #expect(servers.services == ["main", "payments"])
        #expect(servers.environments == [.develop, .test, .release])
    }

    @Test(arguments: TransportKind.allCases)
    func switchingAffectsRequestsStartedAfterwardsNeverOneInFlight(_ kind: TransportKind) async throws {
        let develop = try await http1Server { request in
            .json(#"{"id":1,"title":"develop"}"#).with(request.path == "/slow" ? .stall(.milliseconds(300)) : .normal)
        }
        let test = try await http1Server { _ in .json(#"{"id":2,"title":"test"}"#) }
        let servers = ServerDirectory(
            urls: [.main: [.develop: develop.baseURL, .test: test.baseURL]], buildDefault: .develop, isReleaseBuild: false)
        try await withClient(kind, server: develop, configure: { $0.servers = servers }) { client in
            let inFlight = client.start(Endpoint<Article>(path: "/slow").service(.main))
            #expect(await eventually { develop.requests.count == 1 })
            try servers.switchEnvironment(to: .test)
            let after = try await client.send(Endpoint<Article>(path: "/next").service(.main))
            #expect(after.title == "test")
            let inFlightValue = try await inFlight.value
            #expect(inFlightValue.title == "develop")
        }
        try await test.stop()
    }
}

/// Per-service stacks: middleware, header fields, timeout, retry and cache policies declared once
/// per service, on both transports, with environments still switching.
@Suite("Per-service defaults")
struct ServiceDefaultsTests {
    struct Stamp: Middleware, Hashable {
        let name: String
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            var request = request
            request.head.headerFields.append(HTTPField(name: HTTPField.Name("X-Stamp")!, value: self.name))
            return try await next(request)
        }
    }

    /// Two services on two servers; each server echoes the path, X-Api and X-Stamp it got, and
    /// `/flaky` fails once with 503, `/slow` answers after 20 s.
    static func handler(_ label: String) -> TestServer.Handler {
        let failed = Locked(false)
        return { request in
            let firstFlaky =
                request.path == "/flaky"
                && failed.withLock { done in
                    defer { done = true }
                    return !done
                }
            if firstFlaky { return .text("busy", status: 503) }
            let response = ScriptedResponse.text(
                "\(label) \(request.path) api=\(request.header("X-Api") ?? "-") stamp=\(request.headers.filter { $0.0.lowercased() == "x-stamp" }.map(\.1).joined(separator: ","))"
            )
            return request.path == "/slow" ? response.with(.stall(.seconds(20))) : response
        }
    }

    @Test(arguments: TransportKind.allCases)
    func eachServiceGetsItsOwnStackAndTheEndpointsSettingsWin(_ kind: TransportKind) async throws {
        let news = try await http1Server(Self.handler("news"))
        let payments = try await http1Server(Self.handler("payments"))
        let paymentsTest = try await http1Server(Self.handler("payments-test"))
        let servers = ServerDirectory(
            urls: [
                "news": [.develop: news.baseURL], "reports": [.develop: news.baseURL],
                "payments": [.develop: payments.baseURL, .test: paymentsTest.baseURL],
            ],
            buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore()
        )
        try await withClient(
            kind, server: news,
            configure: {
                $0.servers = servers
                $0.middleware = [Stamp(name: "client")]
                $0.retry = .never
                $0.serviceDefaults["payments"] = ServiceDefaults(
                    middleware: [Stamp(name: "payments")], headers: [HTTPField.Name("X-Api")!: "2"],
                    retry: RetryPolicy(maxAttempts: 2, baseDelay: .milliseconds(1))
                )
                // Only the service whose calls should be short gets a short timeout (a loaded machine
                // must not make the other calls time out).
                $0.serviceDefaults["reports"] = ServiceDefaults(timeout: .seconds(1))
                $0.serviceDefaults["news"] = ServiceDefaults(headers: [HTTPField.Name("X-Api")!: "1"])
            }
        ) { client in
            func call(_ service: ServiceID, _ path: String, headers: HTTPFields = [:]) -> Endpoint<String> {
                Endpoint<String>(path: path, headers: headers, decoding: .string).service(service)
            }
            // Middleware: the client's, then the service's; header fields from the service.
            #expect(try await client.send(call("payments", "/charge")) == "payments /charge api=2 stamp=client,payments")
            #expect(try await client.send(call("news", "/list")) == "news /list api=1 stamp=client")
            // The endpoint's own field replaces the service's.
            #expect(
                try await client.send(call("payments", "/charge", headers: [HTTPField.Name("X-Api")!: "3"]))
                    == "payments /charge api=3 stamp=client,payments")
            // The service's retry policy: one 503, then the answer.
            #expect(try await client.send(call("payments", "/flaky")) == "payments /flaky api=2 stamp=client,payments")
            // The reports service's 1 s timeout ends a 20 s answer (the client's default is 60 s).
            let timedOut = await expectCourierError { _ = try await client.send(call("reports", "/slow")) }
            #expect(timedOut?.kind == .timeout)
            // Environments keep switching under the defaults.
            try servers.switchEnvironment(to: .test)
            #expect(try await client.send(call("payments", "/charge")) == "payments-test /charge api=2 stamp=client,payments")
            // makeRequest shows the same logical request the pipeline builds.
            #expect(try client.makeRequest(for: call("payments", "/charge")).head.headerFields[HTTPField.Name("X-Api")!] == "2")
        }
        try await payments.stop()
        try await paymentsTest.stop()
    }
}
