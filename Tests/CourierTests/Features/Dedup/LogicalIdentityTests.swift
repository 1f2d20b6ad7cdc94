import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import InMemoryLogging
import Logging
import Testing

@testable import Courier

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
