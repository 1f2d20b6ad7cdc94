import Courier
import CourierAsyncHTTPClient
import Foundation
import Testing

struct AddParams: Codable, Sendable {
    var a: Int
    var b: Int
}

/// Interop with jsonrpcserver (PyPI), a JSON-RPC 2.0 implementation none of us wrote, on a loopback port.
/// `.ci/run` installs it; under CI (COURIER_CI=1) these tests always run, and fail if it is missing.
@Suite("Interop: jsonrpcserver from PyPI", .serialized, .enabled(if: ExternalServer.enabled(module: "jsonrpcserver")))
struct JSONRPCInteropTests {
    func withServer(_ kind: TransportKind, _ body: (Client, ExternalServer) async throws -> Void) async throws {
        try await withInteropServer(kind, script: "scripts/jsonrpc_interop_server.py") { server, transport in
            let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.defaultWireProtocol = .jsonRPC })
            try await body(client, server)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func singleCallsByNameAndByPosition(_ kind: TransportKind) async throws {
        try await self.withServer(kind) { client, _ in
            let byName = try await client.send(Endpoint<Int>.rpc("add", params: AddParams(a: 40, b: 2)))
            let byPosition = try await client.send(Endpoint<Int>.rpc("subtract", params: [50, 8]))
            #expect(byName == 42)
            #expect(byPosition == 42)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func notificationGetsNoAnswerAndIsProcessed(_ kind: TransportKind) async throws {
        try await self.withServer(kind) { client, _ in
            try await client.send(Endpoint<Void>.rpcNotification("record", params: ["interop"]))
            let recorded = try await client.send(Endpoint<[String]>.rpc("recorded"))
            #expect(recorded == ["interop"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func errorObjectCarriesCodeMessageAndData(_ kind: TransportKind) async throws {
        try await self.withServer(kind) { client, _ in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Double>.rpc("divide", params: [7, 0])) }
            #expect(error?.kind == .rpc)
            #expect(error?.code == "4000")
            #expect(error?.message == "division by zero")
            #expect(error?.rpcData == .object(["dividend": .integer(7)]))
            let unknown = await expectCourierError { _ = try await client.send(Endpoint<Int>.rpc("no_such_method")) }
            #expect(unknown?.code == "-32601")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func batchWithAFailingCallAndANotification(_ kind: TransportKind) async throws {
        try await self.withServer(kind) { client, _ in
            let batch = JSONRPCBatch()
            let add = batch.call("add", params: AddParams(a: 1, b: 2), as: Int.self)
            let fail = batch.call("divide", params: [1, 0], as: Double.self)
            batch.notify("record", params: ["from-batch"])
            let divide = batch.call("divide", params: [9, 3], as: Double.self)
            let results = try await client.send(batch)
            #expect(try results[add].get() == 3)
            #expect(try results[divide].get() == 3.0)
            guard case .failure(let error) = results[fail] else {
                Issue.record("the failing call succeeded")
                return
            }
            #expect(error.kind == .rpc)
            #expect(error.code == "4000")
            let recorded = try await client.send(Endpoint<[String]>.rpc("recorded"))
            #expect(recorded == ["from-batch"])
        }
    }
}
