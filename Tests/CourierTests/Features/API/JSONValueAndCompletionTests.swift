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

    /// An amount with more digits than a `Double` has and an integer beyond `Int` (RFC 8259 §6
    /// leaves a number's precision to the parties): every wire path hands them on through
    /// `JSONValue`, and a `Double` in between rounded them without a word.
    struct Money: Codable, Sendable, Equatable {
        var amount: Decimal
        var big: UInt64
    }

    /// An answer nested a few hundred levels deep (under the 512 levels Foundation's parser
    /// allows) fails to decode with kind `decoding` instead of recursing once per level: on a
    /// thread with a small stack (512 KiB on Apple platforms' concurrency pool) that overflows.
    /// Nesting up to the limit still decodes, through the envelope protocol's own levels too.
    @Test(arguments: TransportKind.allCases)
    func jsonNestedTooDeepFailsTypedAndJSONWithinTheLimitDecodes(_ kind: TransportKind) async throws {
        @Sendable func nested(_ depth: Int) -> String { String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth) }
        let server = try await http1Server { request in
            let depth = Int(request.path.split(separator: "/").last ?? "") ?? 1
            return request.path.hasPrefix("/envelope") ? .json(#"{"code":0,"data":\#(nested(depth))}"#) : .json(nested(depth))
        }
        try await withClient(kind, server: server) { client in
            let deepest = try await client.send(Endpoint<JSONValue>(path: "/plain/63"))
            var levels = 0
            var value = deepest
            while case .array(let inner) = value, let first = inner.first {
                levels += 1
                value = first
            }
            #expect(levels == 63)
            #expect(value == .integer(1))
            for path in ["/plain/64", "/plain/300", "/plain/500", "/envelope/63", "/envelope/400"] {
                let error = await expectCourierError { _ = try await client.send(Endpoint<JSONValue>(path: path)) }
                #expect(error?.kind == .decoding, "\(path)")
            }
            let enveloped = EnvelopeProtocol()
            let inEnvelope = try await client.send(Endpoint<JSONValue>(path: "/envelope/62").wire(enveloped))
            #expect(inEnvelope != .null)
            let tooDeep = await expectCourierError { _ = try await client.send(Endpoint<JSONValue>(path: "/envelope/400").wire(enveloped)) }
            #expect(tooDeep?.kind == .decoding)
        }
    }

    @Test
    func numbersAreKeptAsWritten() throws {
        let text = #"[0.1234567890123456789,12345678901234567891,0.1,-5.5,1e300,7]"#
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(value[0] == .decimal(Decimal(string: "0.1234567890123456789")!))
        #expect(value[1] == .decimal(Decimal(string: "12345678901234567891")!))
        #expect(value[2] == .number(0.1))
        #expect(value[3] == .number(-5.5))
        #expect(value[4] == .number(1e300))
        #expect(value[5] == .integer(7))
        // Encoded again, the same digits: what a value is decoded from afterwards.
        let encoded = String(decoding: try value.encoded(), as: UTF8.self)
        #expect(encoded.contains("0.1234567890123456789"))
        #expect(encoded.contains("12345678901234567891"))
        #expect(try JSONDecoder().decode(JSONValue.self, from: value.encoded()) == value)
    }

    @Test(arguments: TransportKind.allCases)
    func anEnvelopesAndAJSONRPCResultsNumbersArriveAsTheServerWroteThem(_ kind: TransportKind) async throws {
        let data = #"{"amount":0.1234567890123456789,"big":12345678901234567891}"#
        let server = try await http1Server { request in
            switch request.path {
            case "/env": return .json(#"{"code":0,"msg":"ok","data":"# + data + "}")
            case "/rpc":
                // The request's own id, whatever number the client gave it.
                let id = (try? JSONDecoder().decode(JSONValue.self, from: request.body))?["id"]?.intValue ?? 0
                return .json(#"{"jsonrpc":"2.0","id":\#(id),"result":"# + data + "}")
            default: return .json(data)
            }
        }
        try await withClient(kind, server: server) { client in
            let plain = try await client.send(Endpoint<Money>(path: "/plain"))
            #expect(plain == Money(amount: Decimal(string: "0.1234567890123456789")!, big: 12_345_678_901_234_567_891))
            #expect(try await client.send(Endpoint<Money>(path: "/env").wire(EnvelopeProtocol())) == plain)
            var call = Endpoint<Money>.rpc("get", params: ["amount": Decimal(string: "0.1234567890123456789")!]).wire(JSONRPCProtocol())
            call.path = "/rpc"
            #expect(try await client.send(call) == plain)
            // The params went out as written too.
            let sent = try #require(server.requests.last?.body)
            #expect(String(decoding: sent, as: UTF8.self).contains("0.1234567890123456789"))
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
            let probe = LifetimeProbe()
            let handle = client.send(Endpoint<Article>(path: "/stall"), queue: queue) { [token = probe.token()] _ in
                withExtendedLifetime(token) { calls.withLock { $0 += 1 } }
            }
            #expect(await eventually { server.requests.count == 1 })
            handle.cancel()
            #expect(await eventually { server.abandonedCount == 1 })
            // The completion is released once its delivery has run (or been dropped): any call
            // would have come before.
            #expect(await eventually { probe.isReleased })
            #expect(calls.current == 0)
        }
    }
}
