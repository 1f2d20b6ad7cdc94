import Courier
import CourierTestServer
import Foundation
import Testing

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
