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
}

@Suite("Untyped JSON and the completion-handler shim")
struct JSONValueAndCompletionTests {
    @Test(arguments: TransportKind.allCases)
    func jsonValueDecodesAnythingAndDropsNulls(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in .json(#"{"a":1,"b":null,"c":[1,null,{"d":null,"e":"x"}],"f":2.5,"g":true}"#) }
        try await withClient(kind, server: server) { client in
            let value = try await client.send(Endpoint<JSONValue>(path: "/any"))
            #expect(value["a"] == .integer(1))
            #expect(value["b"] == .null)
            #expect(value["f"] == .number(2.5))
            #expect(value["g"] == .bool(true))
            let clean = value.droppingNulls()
            #expect(
                clean
                    == .object([
                        "a": .integer(1), "c": .array([.integer(1), .object(["e": .string("x")])]), "f": .number(2.5), "g": .bool(true),
                    ]))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func completionIsDeliveredOnTheChosenQueue(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let queue = DispatchQueue(label: "delivery")
            let key = DispatchSpecificKey<String>()
            queue.setSpecific(key: key, value: "delivery")
            let outcome = Locked<(String?, String?)>((nil, nil))
            client.send(Endpoint<Article>(path: "/json"), queue: queue) { result in
                outcome.withLock { $0 = ((try? result.get())?.title, DispatchQueue.getSpecific(key: key)) }
            }
            #expect(await eventually { outcome.current.0 != nil })
            #expect(outcome.current.0 == "Hello")
            #expect(outcome.current.1 == "delivery")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func noCallbackAfterCancel(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let queue = DispatchQueue(label: "delivery")
            let calls = Locked(0)
            let handle = client.send(Endpoint<Article>(path: "/stall"), queue: queue) { _ in calls.withLock { $0 += 1 } }
            #expect(await eventually { server.requests.count == 1 })
            handle.cancel()
            #expect(await eventually { server.abandonedCount == 1 })
            try await Task.sleep(for: .milliseconds(200))
            queue.sync {}
            #expect(calls.current == 0)
        }
    }
}
