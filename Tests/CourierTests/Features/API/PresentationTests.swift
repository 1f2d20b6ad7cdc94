import Courier
import CourierTestServer
import Foundation
import Testing

@Suite("Errors carry a presentation, and the presenter coalesces them")
struct PresentationTests {
    @Test(arguments: TransportKind.allCases)
    func standardClassifierPresentsEachKindSensibly(_ kind: TransportKind) async throws {
        let server = try await apiServer(JSONRPCTestServer())
        let servers = ServerDirectory(
            urls: ["shop": [.develop: server.baseURL.appendingPathComponent("env")]], buildDefault: .develop, isReleaseBuild: false)
        try await withClient(
            kind, server: server,
            configure: {
                $0.servers = servers
                $0.wireProtocols = ["shop": .envelope]
            }
        ) { client in
            let business = await expectCourierError { _ = try await client.send(Endpoint<Profile>(path: "/expired").service("shop")) }
            let unauthorized = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/status/401")) }
            let serverError = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/status/500")) }
            let handle = client.start(Endpoint<Article>(path: "/stall"))
            handle.cancel()
            let cancelled = await expectCourierError { _ = try await handle.value }
            #expect(business?.presentation == .toast)
            #expect(unauthorized?.presentation == .reLogin)
            #expect(serverError?.presentation == .alert)
            #expect(cancelled?.presentation == .silent)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func classifierIsConfigurable(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(
            kind, server: server,
            configure: {
                $0.errorClassifier = ErrorClassifier { $0.status?.code == 500 ? .toast : ErrorClassifier.standard.classify($0) }
            }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/status/500")) }
            #expect(error?.presentation == .toast)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func tenConcurrentIdenticalBusinessErrorsShowOneAlert(_ kind: TransportKind) async throws {
        let server = try await apiServer(JSONRPCTestServer())
        let servers = ServerDirectory(
            urls: ["shop": [.develop: server.baseURL.appendingPathComponent("env")]], buildDefault: .develop, isReleaseBuild: false)
        let shown = Locked<[ErrorPresenter.Shown]>([])
        let queue = DispatchQueue(label: "ui")
        let presenter = ErrorPresenter(queue: queue) { item in shown.withLock { $0.append(item) } }
        try await withClient(
            kind, server: server,
            configure: {
                $0.servers = servers
                $0.wireProtocols = ["shop": .envelope]
            }
        ) { client in
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<10 {
                    group.addTask {
                        do {
                            _ = try await client.send(Endpoint<Profile>(path: "/expired").service("shop").deduplication(.disabled))
                        } catch let error as CourierError {
                            presenter.report(error)
                        } catch {}
                    }
                }
            }
            #expect(server.requests.count == 10)
            queue.sync {}
            #expect(shown.current.count == 1)
            #expect(shown.current.first?.error.message == "Your session has expired, please sign in again")
            // Once dismissed, the same error may be shown again.
            presenter.dismiss(shown.current[0].id)
            var again = CourierError(.business, "Your session has expired, please sign in again")
            again.code = "1001"
            again.presentation = .toast
            #expect(presenter.report(again))
        }
    }

    @Test
    func reLoginIsRaisedOnceUntilResolved() {
        let presenter = ErrorPresenter(queue: DispatchQueue(label: "ui")) { _ in }
        var first = CourierError(.httpStatus, "401")
        first.presentation = .reLogin
        var second = CourierError(.authenticationRequired, "token refresh failed")
        second.presentation = .reLogin
        #expect(presenter.report(first))
        #expect(!presenter.report(second))
        presenter.resolveReLogin()
        #expect(presenter.report(second))
        var silent = CourierError(.cancelled, "cancelled")
        silent.presentation = .silent
        #expect(!presenter.report(silent))
    }

    @Test
    func presentationsNeverDismissedAreForgottenOldestFirstPastTheLimit() {
        // Toasts hide themselves, and an app may never call `dismiss` for them: each distinct
        // message (a server's, with a request id in it) was kept as on screen for the life of the
        // process, and an identical error was never shown again.
        let presenter = ErrorPresenter(queue: DispatchQueue(label: "ui")) { _ in }
        func toast(_ number: Int) -> CourierError {
            var error = CourierError(.business, "quota used up (request \(number))")
            error.presentation = .toast
            return error
        }
        var alert = CourierError(.httpStatus, "server error")
        alert.presentation = .alert
        #expect(presenter.report(alert))
        #expect(presenter.report(toast(0)))
        #expect(!presenter.report(toast(0)))
        for number in 1..<(ErrorPresenter.maxOnScreen - 1) { #expect(presenter.report(toast(number))) }
        // At the limit, all still count as on screen.
        #expect(!presenter.report(toast(0)))
        #expect(!presenter.report(toast(ErrorPresenter.maxOnScreen - 2)))
        // One more: the oldest is taken as gone, and may be shown again; the newest may not.
        #expect(presenter.report(toast(ErrorPresenter.maxOnScreen)))
        #expect(presenter.report(toast(0)))
        #expect(!presenter.report(toast(ErrorPresenter.maxOnScreen)))
        // The alert, older than every toast, is still on screen: toasts go first.
        #expect(!presenter.report(alert))
    }
}
