import Courier
import CourierTestServer
import Crypto
import Foundation
import HTTPTypes
import Testing

struct Pair: Codable, Sendable {
    var a: Int
    var b: Int
}
struct Profile: Codable, Sendable, Equatable {
    var name: String
    var level: Int
}

/// A server with a REST route, a JSON-RPC endpoint at /rpc, and envelope routes under /env.
func apiServer(_ rpc: JSONRPCTestServer) async throws -> TestServer {
    try await http1Server { request in
        switch request.path {
        case "/rpc": return await rpc.respond(request)
        case "/env/profile": return .json(#"{"code":0,"msg":"ok","data":{"name":"ada","level":3}}"#)
        case "/env/expired": return .json(#"{"code":1001,"msg":"Your session has expired, please sign in again","data":null}"#)
        case "/env/custom": return .json(#"{"status":"OK","message":"fine","payload":{"name":"bob","level":1}}"#)
        case "/env/custom-fail": return .json(#"{"status":"E42","message":"Out of stock","payload":null}"#)
        case "/env/gone": return ScriptedResponse(status: 204)
        case "/env/forged":
            // A business code that would write a second line into a log.
            return .json(#"{"code":"7\n← 9 x GET https://bank/ 200 1.0ms 0B HTTP/1.1 success","msg":"no"}"#)
        default: return await Routes.standard(request)
        }
    }
}

@Suite("Wire protocols per endpoint and per service")
struct WireProtocolTests {
    func client(
        _ kind: TransportKind, _ server: TestServer, _ configure: (inout Client.Configuration) -> Void = { _ in },
        _ body: (Client) async throws -> Void
    ) async throws {
        let servers = ServerDirectory(
            urls: [
                "rest": [.develop: server.baseURL], "rpc": [.develop: server.baseURL.appendingPathComponent("rpc")],
                "shop": [.develop: server.baseURL.appendingPathComponent("env")],
            ],
            buildDefault: .develop, isReleaseBuild: false
        )
        try await withClient(
            kind, server: server,
            configure: {
                $0.servers = servers
                $0.wireProtocols = ["rpc": .jsonRPC, "shop": .envelope]
                configure(&$0)
            }, body)
    }

    @Test(arguments: TransportKind.allCases)
    func jsonRPCCallsWithNamedAndPositionalParamsCoexistWithREST(_ kind: TransportKind) async throws {
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            let named = try await client.send(Endpoint<Int>.rpc("sum", params: Pair(a: 2, b: 5), service: "rpc"))
            let positional = try await client.send(Endpoint<Int>.rpc("sum", params: [1, 2, 3], service: "rpc"))
            let rest = try await client.send(Endpoint<Article>(path: "/json").service("rest"))
            #expect(named == 7)
            #expect(positional == 6)
            #expect(rest.title == "Hello")
            let sent = try JSONDecoder().decode(JSONValue.self, from: rpc.rawBodies.current[0])
            #expect(sent["jsonrpc"] == .string("2.0"))
            #expect(sent["method"] == .string("sum"))
            #expect(sent["params"] == .object(["a": .integer(2), "b": .integer(5)]))
            #expect(sent["id"]?.intValue != nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBodyThatCannotBeBoxedIsAnInvalidRequestAndNothingIsSent(_ kind: TransportKind) async throws {
        // JSON-RPC params must be JSON: a form body cannot go in the envelope. That is the
        // request's fault, found before anything is sent — kind `invalidRequest`, not `transport`.
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            var endpoint = Endpoint<Int>(
                method: .post, path: "", body: .data(Data("a=b".utf8), contentType: "application/x-www-form-urlencoded")
            ).service("rpc")
            endpoint.operation = "sum"
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .invalidRequest)
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anUploadedJSONRPCCallSendsItsParamsAndReportsTheBoxedBody(_ kind: TransportKind) async throws {
        // The upload's progress wrapper used to hide the body from the protocol, which then sent
        // the call without params (and the server's sum of nothing, 0, came back as a success).
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            let upload = client.upload(Endpoint<Int>.rpc("sum", params: [1, 2, 3], service: "rpc"))
            var last: TransferProgress?
            for await progress in upload.progress { last = progress }
            let response = try await upload.value
            #expect(response.value == 6)
            let sent = try JSONDecoder().decode(JSONValue.self, from: rpc.rawBodies.current[0])
            #expect(sent["params"] == .array([.integer(1), .integer(2), .integer(3)]))
            // The progress counts what went on the wire: the boxed call.
            #expect(last?.completedBytes == Int64(rpc.rawBodies.current[0].count))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCompressedJSONRPCCallIsBoxedFirstThenCompressed(_ kind: TransportKind) async throws {
        // The protocol reads the params as encoded; the gzip the endpoint asks for wraps the
        // boxed call (it used to read the gzip bytes as JSON and fail as an invalid request).
        let received = Locked<[Data]>([])
        let server = try await http1Server { request in
            let plain = (try? await runTool(["gzip", "-dc"], input: request.body)) ?? Data()
            received.withLock { $0.append(plain) }
            let call = (try? JSONDecoder().decode(JSONValue.self, from: plain)) ?? .null
            var total = -1
            if case .array(let items)? = call["params"] { total = items.compactMap(\.intValue).reduce(0, +) }
            return .json(#"{"jsonrpc":"2.0","result":\#(total),"id":\#(call["id"]?.intValue ?? 0)}"#)
        }
        try await withClient(kind, server: server) { client in
            var endpoint = Endpoint<Int>.rpc("sum", params: [4, 5])
            endpoint.path = "/rpc"
            endpoint.compressesRequestBody = true
            let sum = try await client.send(endpoint)
            #expect(sum == 9)
            #expect(server.requests.first?.header("Content-Encoding") == "gzip")
            let sent = try JSONDecoder().decode(JSONValue.self, from: try #require(received.current.first))
            #expect(sent["method"] == .string("sum"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func serviceDefaultProtocolAppliesToPlainEndpoints(_ kind: TransportKind) async throws {
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            var endpoint = Endpoint<[Int]>(method: .post, path: "", body: .json([4, 5])).service("rpc")
            endpoint.operation = "echo"
            let echoed = try await client.send(endpoint)
            #expect(echoed == [4, 5])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func notificationHasNoIDAndExpectsNoResult(_ kind: TransportKind) async throws {
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            try await client.send(Endpoint<Void>.rpcNotification("record", params: ["opened"], service: "rpc"))
            #expect(rpc.recorded.current == ["opened"])
            let sent = try JSONDecoder().decode(JSONValue.self, from: rpc.rawBodies.current[0])
            #expect(sent["id"] == nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aNotificationTheServerRefusesWithAnErrorObjectFails(_ kind: TransportKind) async throws {
        // JSON-RPC 2.0 §4.1: no reply to a notification; §5: an error with a null id is about a
        // request that could not be read. Such a reply is the notification refused, not sent.
        let server = try await http1Server { request in
            request.path == "/refusing"
                ? .json(#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#)
                : .json(#"{"jsonrpc":"2.0","result":"unexpected","id":null}"#)
        }
        try await withClient(kind, server: server) { client in
            var refused = Endpoint<Void>.rpcNotification("record", params: ["opened"])
            refused.path = "/refusing"
            let error = await expectCourierError { try await client.send(refused) }
            #expect(error?.kind == .rpc)
            #expect(error?.code == "-32600")
            // A reply that is no error is ignored: nothing was expected.
            var chatty = Endpoint<Void>.rpcNotification("record", params: ["opened"])
            chatty.path = "/chatty"
            try await client.send(chatty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anAnswerWithBothResultAndErrorIsNoAnswer(_ kind: TransportKind) async throws {
        // JSON-RPC 2.0 §5: both members MUST NOT be included.
        let server = try await http1Server { request in
            let id = ((try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any])?["id"] as? Int ?? 0
            return .json(#"{"jsonrpc":"2.0","result":42,"error":{"code":1,"message":"x"},"id":\#(id)}"#)
        }
        try await withClient(kind, server: server) { client in
            var call = Endpoint<Int>.rpc("answer", params: [1])
            call.path = "/rpc"
            let error = await expectCourierError { _ = try await client.send(call) }
            #expect(error?.kind == .decoding)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func errorObjectBecomesAnRPCError(_ kind: TransportKind) async throws {
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Double>.rpc("divide", params: [1, 0], service: "rpc"))
            }
            #expect(error?.kind == .rpc)
            #expect(error?.code == "4000")
            #expect(error?.message == "division by zero")
            #expect(error?.rpcData == .object(["dividend": .integer(1)]))
            let missing = await expectCourierError { _ = try await client.send(Endpoint<Int>.rpc("nope", service: "rpc")) }
            #expect(missing?.code == "-32601")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func batchMatchesReorderedAnswersByIDAndKeepsEachCallsError(_ kind: TransportKind) async throws {
        let rpc = JSONRPCTestServer()
        let server = try await apiServer(rpc)
        try await self.client(kind, server) { client in
            let batch = JSONRPCBatch(service: "rpc")
            let sum = batch.call("sum", params: [1, 2, 3], as: Int.self)
            let failing = batch.call("divide", params: [1, 0], as: Double.self)
            let half = batch.call("divide", params: [1, 2], as: Double.self)
            batch.notify("record", params: ["batched"])
            let echo = batch.call("echo", params: ["k": "v"], as: [String: String].self)
            let results = try await client.send(batch)
            #expect(try results[sum].get() == 6)
            #expect(try results[half].get() == 0.5)
            #expect(try results[echo].get() == ["k": "v"])
            guard case .failure(let error) = results[failing] else {
                Issue.record("the failing call succeeded")
                return
            }
            #expect(error.kind == .rpc)
            #expect(error.code == "4000")
            #expect(rpc.recorded.current == ["batched"])
            #expect(server.requests.count == 1)
        }
    }

    /// JSON-RPC 2.0 §5: `id` is required and the same as the request's; `null` only on an error
    /// about a request whose id could not be read.
    @Test(arguments: TransportKind.allCases)
    func anAnswerWithoutThisCallsIDIsNotThisCallsAnswer(_ kind: TransportKind) async throws {
        let answer = Locked("")
        let server = try await http1Server { _ in .json(answer.current) }
        try await withClient(kind, server: server) { client in
            let call = Endpoint<Int>.rpc("x").wire(JSONRPCProtocol())
            for body in [
                #"{"jsonrpc":"2.0","result":42}"#, #"{"jsonrpc":"2.0","result":42,"id":null}"#,
                #"{"jsonrpc":"2.0","result":42,"id":"1"}"#, #"{"jsonrpc":"2.0","result":42,"id":2}"#,
                #"{"jsonrpc":"2.0","error":{"code":-1,"message":"another call's"},"id":2}"#,
            ] {
                answer.withLock { $0 = body }
                let error = await expectCourierError { _ = try await client.send(call) }
                #expect(error?.kind == .decoding, "\(body): \(String(describing: error))")
            }
            // The request's own id, written as 7 or 7.0, is its answer; an error with a null id is
            // about the request, and reported as it is.
            for form in ["%d", "%d.0"] {
                // Each call of the client gets the next id, and each call above reached the server once.
                let id = server.requests.count + 1
                answer.withLock { $0 = #"{"jsonrpc":"2.0","result":42,"id":"# + String(format: form, id) + "}" }
                let value = try await client.send(call)
                #expect(value == 42)
            }
            answer.withLock { $0 = #"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"# }
            let invalid = await expectCourierError { _ = try await client.send(call) }
            #expect(invalid?.kind == .rpc)
            #expect(invalid?.code == "-32600")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func batchAnswersThatCannotBeTiedToOneCallAreNotTakenForIt(_ kind: TransportKind) async throws {
        let answer = Locked("")
        let server = try await http1Server { _ in .json(answer.current) }
        try await withClient(kind, server: server) { client in
            let batch = JSONRPCBatch()
            let first = batch.call("a", as: Int.self)
            let second = batch.call("b", as: Int.self)
            let third = batch.call("c", as: Positive.self)
            // Id 1 twice (a result and an error: which one is the call's cannot be told), id 2 as a
            // string, id 3 a value the type refuses.
            answer.withLock {
                $0 =
                    #"[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}},"#
                    + #"{"jsonrpc":"2.0","id":"2","result":2},{"jsonrpc":"2.0","id":3,"result":0}]"#
            }
            let results = try await client.send(batch)
            for (name, result) in [("first", results[first].map { _ in () }), ("second", results[second].map { _ in () })] {
                guard case .failure(let error) = result else {
                    Issue.record("\(name) succeeded")
                    continue
                }
                #expect(error.kind == .decoding, "\(name): \(error)")
            }
            guard case .failure(let refused) = results[third] else {
                Issue.record("a value the type refuses was accepted")
                return
            }
            #expect(refused.kind == .decoding, "\(refused)")
            // JSON-RPC 2.0 §6: an invalid batch gets errors with a null id; each call reports it.
            answer.withLock { $0 = #"[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}]"# }
            let rejected = try await client.send(batch)
            guard case .failure(let invalid) = rejected[second] else {
                Issue.record("a call without an answer succeeded")
                return
            }
            #expect(invalid.kind == .rpc)
            #expect(invalid.code == "-32600")
        }
    }

    /// JSON-RPC 2.0 §5: a response object has "jsonrpc", and an error object an integer code
    /// and a message. A batch answer item that is not one, but names a call's id, is that call's
    /// answer that cannot be read: its outcome is unknown (it may have been carried out), never
    /// the null-id error of another item. An item that names no call may be any call's answer,
    /// so no call without an answer takes the null-id error for its own.
    @Test(arguments: TransportKind.allCases)
    func aBatchAnswerThatIsNoResponseObjectLeavesItsCallUnknown(_ kind: TransportKind) async throws {
        let answer = Locked("")
        let server = try await http1Server { _ in .json(answer.current) }
        try await withClient(kind, server: server) { client in
            let batch = JSONRPCBatch()
            let transfer = batch.call("transfer", as: JSONValue.self)
            let log = batch.call("log", as: JSONValue.self)
            let invalid = #"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}"#
            answer.withLock { $0 = #"[{"id":1,"result":{"ok":true}},"# + invalid + "]" }
            let results = try await client.send(batch)
            guard case .failure(let unread) = results[transfer], case .failure(let other) = results[log] else {
                Issue.record("a call succeeded without a readable answer")
                return
            }
            #expect(unread.kind == .decoding, "\(unread)")
            #expect(unread.code != "-32600")
            #expect(other.kind == .rpc)
            #expect(other.code == "-32600")
            // An error object without a code, for id 2: that call's answer, unreadable. One with
            // its code as text and no message is still that call's refusal (§5.1, read leniently).
            answer.withLock { $0 = #"[{"jsonrpc":"2.0","id":1,"result":7},{"jsonrpc":"2.0","id":2,"error":{"message":"no code"}}]"# }
            let second = try await client.send(batch)
            #expect(try second[transfer].get() == .integer(7))
            guard case .failure(let noCode) = second[log] else {
                Issue.record("an error without a code was taken for a result")
                return
            }
            #expect(noCode.kind == .decoding)
            answer.withLock { $0 = #"[{"jsonrpc":"2.0","id":1,"result":7},{"jsonrpc":"2.0","id":2,"error":{"code":"-32000"}}]"# }
            guard case .failure(let textCode) = try await client.send(batch)[log] else {
                Issue.record("an error with its code as text was taken for a result")
                return
            }
            #expect(textCode.kind == .rpc)
            #expect(textCode.code == "-32000")
            // An item that names no call (none, an id written as text, an id no call has): no
            // call without an answer takes the null-id error.
            for item in [#"{"result":5}"#, #"{"jsonrpc":"2.0","id":"1","result":{"ok":true}}"#, #"{"jsonrpc":"2.0","id":9,"result":1}"#] {
                answer.withLock { $0 = "[" + item + "," + invalid + "]" }
                let third = try await client.send(batch)
                for result in [third[transfer], third[log]] {
                    guard case .failure(let error) = result else {
                        Issue.record("a call succeeded without an answer")
                        continue
                    }
                    #expect(error.kind == .decoding, "\(item): \(error)")
                }
            }
        }
    }

    /// JSON-RPC 2.0 §6: nothing comes back for a batch of notifications alone; an error that
    /// does is the batch refused (as §4.1 and §5 make it for one notification), and an error
    /// member that is no error object (no message, a code that is no number) is never success.
    @Test(arguments: TransportKind.allCases)
    func aRefusalOfNotificationsIsNeverSuccessWhateverItsShape(_ kind: TransportKind) async throws {
        let answer = Locked("")
        let server = try await http1Server { _ in answer.current.isEmpty ? ScriptedResponse(status: 204) : .json(answer.current) }
        try await withClient(kind, server: server) { client in
            let batch = JSONRPCBatch()
            batch.notify("opened", params: ["screen": "home"])
            batch.notify("closed", params: ["screen": "home"])
            // Nothing back: sent.
            _ = try await client.send(batch)
            answer.withLock { $0 = #"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"# }
            let whole = await expectCourierError { _ = try await client.send(batch) }
            #expect(whole?.kind == .rpc)
            #expect(whole?.code == "-32700")
            answer.withLock { $0 = #"[{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}]"# }
            let inArray = await expectCourierError { _ = try await client.send(batch) }
            #expect(inArray?.kind == .rpc)
            #expect(inArray?.code == "-32600")
            // A code written as text and no message: a refusal still, for the batch and for one
            // notification; an error member that is no error object at all, too.
            answer.withLock { $0 = #"{"jsonrpc":"2.0","error":{"code":"-32601"},"id":null}"# }
            let textCode = await expectCourierError { _ = try await client.send(batch) }
            #expect(textCode?.kind == .rpc)
            #expect(textCode?.code == "-32601")
            let single = await expectCourierError { try await client.send(Endpoint<Void>.rpcNotification("record", params: ["opened"])) }
            #expect(single?.kind == .rpc)
            #expect(single?.code == "-32601")
            for reply in [#"{"jsonrpc":"2.0","error":-32601,"id":null}"#, #"{"error":true}"#] {
                answer.withLock { $0 = reply }
                let bare = await expectCourierError { _ = try await client.send(batch) }
                #expect(bare?.kind == .rpc, "\(reply)")
            }
            answer.withLock { $0 = #"{"jsonrpc":"2.0","error":"denied","id":null}"# }
            let notAnObject = await expectCourierError { _ = try await client.send(batch) }
            #expect(notAnObject?.kind == .rpc)
            let notAnObjectAlone = await expectCourierError {
                try await client.send(Endpoint<Void>.rpcNotification("record", params: ["opened"]))
            }
            #expect(notAnObjectAlone?.kind == .rpc)
            // A reply that is no error is still ignored: a result, or an error member that says
            // there was none (`false`, empty text).
            for reply in [#"{"jsonrpc":"2.0","result":"unexpected","id":null}"#, #"{"ok":true,"error":false}"#, #"{"error":""}"#] {
                answer.withLock { $0 = reply }
                _ = try await client.send(batch)
                try await client.send(Endpoint<Void>.rpcNotification("record", params: ["opened"]))
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aLoneAnswerWithOneCallsIDIsThatCallsAlone(_ kind: TransportKind) async throws {
        // JSON-RPC 2.0 §6: an answer to the whole batch has a null id. One error object naming
        // the first call is the first call's; the second's outcome is unknown (it may have been
        // applied), never that error.
        let answer = Locked("")
        let server = try await http1Server { _ in .json(answer.current) }
        try await withClient(kind, server: server) { client in
            let batch = JSONRPCBatch()
            let first = batch.call("a", as: Int.self)
            let second = batch.call("b", as: Int.self)
            answer.withLock { $0 = #"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"insufficient funds"}}"# }
            let results = try await client.send(batch)
            guard case .failure(let own) = results[first], case .failure(let other) = results[second] else {
                Issue.record("a call succeeded without a result")
                return
            }
            #expect(own.kind == .rpc)
            #expect(own.code == "-32000")
            #expect(other.kind == .decoding, "\(other)")
            // A lone result with the second call's id answers the second call only.
            answer.withLock { $0 = #"{"jsonrpc":"2.0","id":2,"result":7}"# }
            let answered = try await client.send(batch)
            #expect((try? answered[second].get()) == 7)
            #expect((try? answered[first].get()) == nil)
            // An error with an id that is no call's is about the batch: every call reports it.
            answer.withLock { $0 = #"{"jsonrpc":"2.0","id":99,"error":{"code":-32600,"message":"Invalid Request"}}"# }
            let rejected = try await client.send(batch)
            for item in [first, second] {
                guard case .failure(let error) = rejected[item] else {
                    Issue.record("a call succeeded without a result")
                    continue
                }
                #expect(error.kind == .rpc)
                #expect(error.code == "-32600")
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func batchParamsThatCannotBeSentFailTheBatchInsteadOfVanishing(_ kind: TransportKind) async throws {
        // JSON-RPC 2.0 §4.2: params are an object or an array. A NaN that cannot be encoded was
        // dropped without a word, and a single number sent as the params.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            for add in [
                { (batch: JSONRPCBatch) in _ = batch.call("f", params: [Double.nan], as: Double.self) },
                { (batch: JSONRPCBatch) in _ = batch.call("f", params: 5, as: Double.self) },
                { (batch: JSONRPCBatch) in batch.notify("f", params: "text") },
            ] {
                let batch = JSONRPCBatch(path: "/echo")
                _ = batch.call("ok", params: [1], as: Int.self)
                add(batch)
                let error = await expectCourierError { _ = try await client.send(batch) }
                #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
            }
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aWireProtocolThatCannotUnboxAnAnswerIsADecodingErrorNotATransportOne(_ kind: TransportKind) async throws {
        // A custom protocol's `unbox` that throws its own error (here the decoder's): the answer
        // is wrong, not the connection; a transport error would be retried and misreported.
        let key = SymmetricKey(data: Data("shared-secret".utf8))
        let server = try await http1Server { _ in .json(#"{"not":"an envelope"}"#) }
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<Profile>(method: .post, path: "/signed", body: .json(["ask": "profile"])).wire(SignedEnvelope(key: key))
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .decoding, "\(String(describing: error))")
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func envelopeDataIsDecodedAndBusinessCodesBecomeErrorsWithTheServersMessage(_ kind: TransportKind) async throws {
        let server = try await apiServer(JSONRPCTestServer())
        let events = Locked<[String]>([])
        try await self.client(
            kind, server,
            {
                $0.wireProtocols["shop"] = EnvelopeProtocol(successCodes: [0], events: [1001: "sessionExpired"])
                $0.onEvent = { event in events.withLock { $0.append(event.name) } }
            }
        ) { client in
            let profile = try await client.send(Endpoint<Profile>(path: "/profile").service("shop"))
            #expect(profile == Profile(name: "ada", level: 3))
            let error = await expectCourierError { _ = try await client.send(Endpoint<Profile>(path: "/expired").service("shop")) }
            #expect(error?.kind == .business)
            #expect(error?.code == "1001")
            #expect(error?.message == "Your session has expired, please sign in again")
            #expect(error?.presentation == .toast)
            #expect(error?.event == "sessionExpired")
            #expect(events.current == ["sessionExpired"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anEnvelopeServiceAnswersHEADAnd204WithoutAnEnvelope(_ kind: TransportKind) async throws {
        // RFC 9110 §9.3.2: a HEAD's answer has no content; §15.3.5: neither has a 204. Neither
        // is an envelope that is "not JSON".
        let server = try await apiServer(JSONRPCTestServer())
        try await self.client(kind, server) { client in
            try await client.send(Endpoint<Void>(method: .head, path: "/profile", decoding: .none).service("shop"))
            try await client.send(Endpoint<Void>(method: .delete, path: "/gone", decoding: .none).service("shop"))
            // A value expected from no content still fails as decoding.
            let error = await expectCourierError { _ = try await client.send(Endpoint<Profile>(path: "/gone").service("shop")) }
            #expect(error?.kind == .decoding)
            #expect(server.requests.map(\.method) == ["HEAD", "DELETE", "GET"])
        }
    }

    /// The type of an unboxed payload is the wire protocol's business: a JSON-RPC server that
    /// labels its answers `application/json-rpc` (as the JSON-RPC over HTTP note has it), or an
    /// envelope served as `text/plain`, had every call fail with "expected a JSON response". A
    /// REST endpoint still refuses a body that says it is not JSON; so does a JSON-RPC answer
    /// that is not JSON at all (the protocol reads it).
    @Test(arguments: TransportKind.allCases)
    func anUnboxedPayloadIsDecodedWhateverTheOuterContentType(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            let id = (try? JSONSerialization.jsonObject(with: request.body) as? [String: Any])?["id"] as? Int ?? 0
            switch request.path {
            case "/rpc": return .text(#"{"jsonrpc":"2.0","result":7,"id":\#(id)}"#, headers: [("Content-Type", "application/json-rpc")])
            case "/env/profile": return .text(#"{"code":0,"msg":"ok","data":{"name":"Ada","level":3}}"#)
            default: return .text(#"{"id":1,"title":"t"}"#)
            }
        }
        try await self.client(kind, server) { client in
            let sum = try await client.send(Endpoint<Int>.rpc("sum", params: [3, 4], service: "rpc"))
            #expect(sum == 7)
            let profile = try await client.send(Endpoint<Profile>(path: "/profile").service("shop"))
            #expect(profile.name == "Ada")
            let rest = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/plain")) }
            #expect(rest?.kind == .decoding)
            #expect(rest?.message.contains("Content-Type") == true)
        }
    }

    /// RFC 9110 §15.3.3: a 202 may come without content (the job is accepted, nothing to say
    /// yet), as may a 200 or 201: no content is no envelope either, and what the endpoint decodes
    /// from nothing decides. An endpoint that expects nothing failed with "the envelope is not JSON".
    @Test(arguments: TransportKind.allCases)
    func anEnvelopeServiceAnswersWithoutContentForAnyStatus(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            ScriptedResponse(status: Int(request.path.split(separator: "/").last ?? "") ?? 500)
        }
        try await self.client(kind, server) { client in
            for status in [200, 201, 202] {
                try await client.send(Endpoint<Void>(method: .post, path: "/jobs/\(status)", decoding: .none).service("shop"))
            }
            let error = await expectCourierError { _ = try await client.send(Endpoint<Profile>(path: "/jobs/200").service("shop")) }
            #expect(error?.kind == .decoding)
            #expect(server.requests.count == 4)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aServersBusinessCodeCannotWriteALineIntoTheLog(_ kind: TransportKind) async throws {
        let server = try await apiServer(JSONRPCTestServer())
        try await self.client(kind, server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Profile>(path: "/forged").service("shop")) }
            #expect(error?.kind == .business)
            // The code as the server sent it, for the app; the metric name made safe for a line.
            #expect(error?.code?.contains("\n") == true)
            let name = try #require(error?.shortDescription)
            #expect(name.hasPrefix("business_7_"))
            #expect(name.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F })
        }
        let huge = CourierError.business(code: String(repeating: "9", count: 1_000_000), message: "")
        #expect(huge.shortDescription.count < 80)
    }

    @Test(arguments: TransportKind.allCases)
    func callsThatUnboxTheSameAnswerDifferentlyShareNoAnswer(_ kind: TransportKind) async throws {
        // Two envelope settings that read one answer two ways (code 7 a failure for one, a
        // success for the other): sharing the leader's verdict gave the other caller the wrong
        // one. Calls with one setting still share.
        let gate = Gate()
        let server = try await http1Server { _ in
            await gate.wait()
            return .json(#"{"code":7,"msg":"partial","data":{"name":"ada","level":3}}"#)
        }
        try await withClient(kind, server: server) { client in
            let strict = EnvelopeProtocol(successCodes: [0])
            let lenient = EnvelopeProtocol(successCodes: [0, 7])
            let first = client.start(Endpoint<Profile>(path: "/profile").wire(strict))
            let second = client.start(Endpoint<Profile>(path: "/profile").wire(lenient))
            let third = client.start(Endpoint<Profile>(path: "/profile").wire(EnvelopeProtocol(successCodes: [0])))
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 && server.requests.count == 2 })
            await gate.open()
            for handle in [first, third] {
                let error = await expectCourierError { _ = try await handle.value }
                #expect(error?.kind == .business)
            }
            let profile = try await second.value
            #expect(profile.name == "ada")
            #expect(server.requests.count == 2)
        }
        // The default settings keep the type's name (recorded fixtures keep their names); field
        // encryption's holds no key, so fixtures recorded under one key replay under another.
        #expect(EnvelopeProtocol().wireIdentity == "EnvelopeProtocol")
        #expect(EnvelopeProtocol(successCodes: [0, 7]).wireIdentity != "EnvelopeProtocol")
        let one = FieldEncryptionProtocol(fields: ["card"], key: SymmetricKey(size: .bits256))
        let other = FieldEncryptionProtocol(fields: ["card"], key: SymmetricKey(size: .bits256))
        #expect(one.wireIdentity == other.wireIdentity)
        #expect(
            FieldEncryptionProtocol(fields: ["card"], key: SymmetricKey(size: .bits256), inner: .envelope).wireIdentity != one.wireIdentity)
    }

    @Test(arguments: TransportKind.allCases)
    func aNotificationOfAnotherProtocolIgnoresAReplyItCannotRead(_ kind: TransportKind) async throws {
        // Only a refusal (an RPC error, a business code) of an unasked reply counts: an envelope
        // notification answered "OK" succeeds, one answered with a failing code fails.
        let server = try await http1Server { request in
            request.path == "/refused" ? .json(#"{"code":9,"msg":"no"}"#) : .text("OK")
        }
        try await withClient(kind, server: server) { client in
            var told = Endpoint<Void>(method: .post, path: "/told", decoding: .none).wire(.envelope)
            told.isNotification = true
            try await client.send(told)
            var refused = Endpoint<Void>(method: .post, path: "/refused", decoding: .none).wire(.envelope)
            refused.isNotification = true
            let error = await expectCourierError { try await client.send(refused) }
            #expect(error?.kind == .business)
        }
    }

    /// Puts `Content-Encoding: aes128gcm` on what it boxes, as a protocol that encrypts the body would.
    struct CodingBox: WireProtocol {
        func box(_ request: inout Request, call: WireCall) throws { request.head.headerFields[.contentEncoding] = "aes128gcm" }
        func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data { body }
    }

    @Test(arguments: TransportKind.allCases)
    func compressionAfterABoxThatSetItsOwnCodingListsBoth(_ kind: TransportKind) async throws {
        // RFC 9110 §8.4: the codings in the order they were applied; gzip replaced the box's.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            var endpoint = Endpoint<Data>(
                method: .post, path: "/echo", body: .data(Data("x".utf8), contentType: "text/plain"), decoding: .data
            ).wire(CodingBox())
            endpoint.compressesRequestBody = true
            _ = try await client.send(endpoint)
            #expect(server.requests.first?.header("Content-Encoding") == "aes128gcm, gzip")
            // `identity` is no coding applied (RFC 9110 §8.4.1): not listed before gzip.
            var plain = Endpoint<Data>(
                method: .post, path: "/echo", headers: [.contentEncoding: "identity"],
                body: .data(Data("x".utf8), contentType: "text/plain"),
                decoding: .data)
            plain.compressesRequestBody = true
            _ = try await client.send(plain)
            #expect(server.requests.last?.header("Content-Encoding") == "gzip")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func updatesFindTheStoredAnswerOfACompressedBoxedCall(_ kind: TransportKind) async throws {
        // `updates()` looked the stored answer up under a key made from the gzipped body, the
        // pipeline stored it under the plain one: the cached half never came.
        let server = try await http1Server { request in
            let plain = (try? await runTool(["gzip", "-dc"], input: request.body)) ?? Data()
            let id = (try? JSONDecoder().decode(JSONValue.self, from: plain))?["id"]?.intValue ?? 0
            return .json(#"{"jsonrpc":"2.0","result":5,"id":\#(id)}"#, headers: [("Cache-Control", "max-age=60")])
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            var call = Endpoint<Int>.rpc("catalog", params: [1])
            call.path = "/rpc"
            call.compressesRequestBody = true
            call.cachePolicy = CachePolicy.http.allowingAnyMethod()
            let sent = try await client.send(call)
            #expect(sent == 5)
            var sources: [ResponseSource] = []
            for try await response in client.updates(call) { sources.append(response.source) }
            #expect(sources.first == .cache)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aNullResultBesideAnErrorIsTheError(_ kind: TransportKind) async throws {
        // JSON-RPC 1.0's shape of an error (`"result": null` beside it) is the error, not "both".
        let server = try await http1Server { request in
            let id = ((try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any])?["id"] as? Int ?? 0
            return .json(#"{"jsonrpc":"2.0","result":null,"error":{"code":-32601,"message":"Method not found"},"id":\#(id)}"#)
        }
        try await withClient(kind, server: server) { client in
            var call = Endpoint<Int>.rpc("missing", params: [1])
            call.path = "/rpc"
            let error = await expectCourierError { _ = try await client.send(call) }
            #expect(error?.kind == .rpc)
            #expect(error?.code == "-32601")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func envelopeKeysAndSuccessCodesAreConfigurable(_ kind: TransportKind) async throws {
        let server = try await apiServer(JSONRPCTestServer())
        let custom = EnvelopeProtocol(codeKey: "status", messageKey: "message", dataKey: "payload", successCodes: ["OK"])
        try await self.client(kind, server) { client in
            let profile = try await client.send(Endpoint<Profile>(path: "/custom").service("shop").wire(custom))
            #expect(profile.name == "bob")
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Profile>(path: "/custom-fail").service("shop").wire(custom))
            }
            #expect(error?.code == "E42")
            #expect(error?.message == "Out of stock")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCustomSignedEnvelopeProtocolPlugsIn(_ kind: TransportKind) async throws {
        let key = SymmetricKey(data: Data("shared-secret".utf8))
        let server = try await http1Server { request in
            // The server checks the request's signature and signs its answer the same way.
            guard let envelope = try? JSONDecoder().decode(SignedEnvelope.Box.self, from: request.body),
                SignedEnvelope.sign(envelope.payload, key: key) == envelope.signature
            else { return .text("bad signature", status: 400) }
            let payload = Data(#"{"name":"signed","level":9}"#.utf8)
            let answer = SignedEnvelope.Box(payload: payload, signature: SignedEnvelope.sign(payload, key: key))
            return .json(encoding: answer)
        }
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<Profile>(method: .post, path: "/signed", body: .json(["ask": "profile"])).wire(SignedEnvelope(key: key))
            let signed = try await client.send(endpoint)
            #expect(signed == Profile(name: "signed", level: 9))
            let tampered = Endpoint<Profile>(method: .post, path: "/signed", body: .json(["ask": "profile"])).wire(
                SignedEnvelope(key: SymmetricKey(data: Data("wrong".utf8))))
            let error = await expectCourierError { _ = try await client.send(tampered) }
            #expect(error?.status?.code == 400)
        }
    }
}

/// A number the type itself refuses when it is not above zero (an error of its own, not a
/// `DecodingError`).
struct Positive: Decodable, Sendable {
    struct NotPositive: Error {}
    var value: Int
    init(from decoder: any Decoder) throws {
        self.value = try decoder.singleValueContainer().decode(Int.self)
        guard self.value > 0 else { throw NotPositive() }
    }
}

/// A test-only wire protocol: the body travels as `{"payload": base64, "signature": hex HMAC}`.
struct SignedEnvelope: WireProtocol {
    struct Box: Codable {
        var payload: Data
        var signature: String
    }
    let key: SymmetricKey

    static func sign(_ payload: Data, key: SymmetricKey) -> String {
        HMAC<SHA256>.authenticationCode(for: payload, using: key).map { String(format: "%02x", $0) }.joined()
    }

    func box(_ request: inout Request, call: WireCall) throws {
        let payload = request.body?.bytes ?? Data()
        request.body = .data(
            try JSONEncoder().encode(Box(payload: payload, signature: Self.sign(payload, key: self.key))), contentType: "application/json")
    }

    func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data {
        let box = try JSONDecoder().decode(Box.self, from: body)
        guard Self.sign(box.payload, key: self.key) == box.signature else {
            throw CourierError(.decoding, "the response signature does not match")
        }
        return box.payload
    }
}

/// A small JSON-RPC 2.0 handler for the in-process server: `sum`, `divide`, `echo`, `record`,
/// answering batches in reverse order to prove matching by id.
final class JSONRPCTestServer: Sendable {
    let recorded = Locked<[String]>([])
    let rawBodies = Locked<[Data]>([])

    func respond(_ request: RecordedRequest) async -> ScriptedResponse {
        self.rawBodies.withLock { $0.append(request.body) }
        guard let root = try? JSONDecoder().decode(JSONValue.self, from: request.body) else {
            return .json(#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#)
        }
        switch root {
        case .array(let calls):
            let answers = calls.compactMap(self.answer).reversed()
            if answers.isEmpty { return ScriptedResponse(status: 204) }
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/json")],
                body: (try? JSONValue.array(Array(answers)).encoded()) ?? Data())
        default:
            guard let answer = self.answer(root) else { return ScriptedResponse(status: 204) }
            return ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")], body: (try? answer.encoded()) ?? Data())
        }
    }

    private func answer(_ call: JSONValue) -> JSONValue? {
        let id = call["id"]
        let method = call["method"]?.stringValue ?? ""
        let params = call["params"]
        var result: JSONValue?
        var error: JSONValue?
        switch method {
        case "sum":
            var total = 0
            if case .array(let items)? = params { total = items.compactMap(\.intValue).reduce(0, +) }
            if case .object(let members)? = params { total = members.values.compactMap(\.intValue).reduce(0, +) }
            result = .integer(total)
        case "divide":
            let a = params?[0]?.intValue ?? params?["a"]?.intValue ?? 0
            let b = params?[1]?.intValue ?? params?["b"]?.intValue ?? 0
            if b == 0 {
                error = .object([
                    "code": .integer(4000), "message": .string("division by zero"), "data": .object(["dividend": .integer(a)]),
                ])
            } else {
                result = .number(Double(a) / Double(b))
            }
        case "echo":
            result = params ?? .null
        case "record":
            self.recorded.withLock { $0.append(params?[0]?.stringValue ?? params?["event"]?.stringValue ?? "?") }
            result = .null
        default:
            error = .object(["code": .integer(-32601), "message": .string("Method not found")])
        }
        guard let id else { return nil }  // a notification: no answer
        var object: [String: JSONValue] = ["jsonrpc": .string("2.0"), "id": id]
        if let error { object["error"] = error } else { object["result"] = result ?? .null }
        return .object(object)
    }
}
