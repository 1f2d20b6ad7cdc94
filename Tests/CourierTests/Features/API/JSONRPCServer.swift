import Courier
import CourierTestServer
import Foundation

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
            return ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")], body: (try? JSONValue.array(Array(answers)).encoded()) ?? Data())
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
                error = .object(["code": .integer(4000), "message": .string("division by zero"), "data": .object(["dividend": .integer(a)])])
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
