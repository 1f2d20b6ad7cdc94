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

    /// Two switches made at once leave the store and the directory agreeing: the choice saved
    /// last is the one requests use. (Before, the second switch could save and take effect while
    /// the first was still saving, and the first then took effect over it, with the store
    /// holding the second.)
    @Test
    func twoSwitchesAtOnceLeaveTheStoreAndTheDirectoryAgreeing() async throws {
        let store = HeldStore()
        let servers = ServerDirectory(urls: urls, buildDefault: .develop, isReleaseBuild: false, store: store)
        let first = onThread { try? servers.switchEnvironment(to: .test) }
        #expect(await eventually { store.saved == [.test] })
        let second = onThread { try? servers.switchEnvironment(to: .release) }
        // The second switch goes as far as it can while the first one's save is held: through
        // its own save before the fix, no further than the wait for the first switch after it.
        // Either way, it has had its chance once this returns.
        _ = await eventually(seconds: 2) { store.saved.count == 2 }
        store.release()
        await first.value
        await second.value
        #expect(store.saved == [.test, .release])
        #expect(servers.activeEnvironment == .release)
        #expect(store.load() == servers.activeEnvironment)
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

/// An environment store whose first save waits until ``release()`` (or ten seconds), after
/// recording what it saves.
private final class HeldStore: EnvironmentStore, @unchecked Sendable {
    private let condition = NSCondition()
    private var saves: [ServerEnvironment?] = []
    private var released = false

    var saved: [ServerEnvironment?] { self.condition.withLock { self.saves } }

    func load() -> ServerEnvironment? { self.condition.withLock { self.saves.last ?? nil } }

    func save(_ environment: ServerEnvironment?) throws {
        self.condition.lock()
        defer { self.condition.unlock() }
        self.saves.append(environment)
        guard self.saves.count == 1 else { return }
        let limit = Date(timeIntervalSinceNow: 10)
        while !self.released, self.condition.wait(until: limit) {}
    }

    func release() {
        self.condition.withLock {
            self.released = true
            self.condition.broadcast()
        }
    }
}

/// Runs blocking `work` on a thread of its own (never on the cooperative pool, which it could
/// fill), and returns a task that ends when the work has.
private func onThread(_ work: @escaping @Sendable () -> Void) -> Task<Void, Never> {
    let (done, finished) = AsyncStream.makeStream(of: Void.self)
    Thread {
        work()
        finished.finish()
    }.start()
    return Task { for await _ in done {} }
}
