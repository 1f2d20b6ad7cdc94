import Courier
import CourierTestServer
import Foundation
import Testing

/// Shared pieces of the seam tests.
enum Seam {
    /// A JSON-RPC 2.0 answer to the request's body: `result` is `sum(params)`, the request's id echoed.
    static func rpcAnswer(_ request: RecordedRequest, error: Bool = false) -> ScriptedResponse {
        let object = (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any] ?? [:]
        let params = object["params"] as? [Int] ?? []
        let id = object["id"] as? Int ?? 0
        if error {
            return .json(#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"no"},"id":\#(id)}"#)
        }
        return .json(#"{"jsonrpc":"2.0","result":\#(params.reduce(0, +)),"id":\#(id)}"#)
    }

    /// A JSON-RPC call to the server's root.
    static func sum(_ numbers: [Int]) -> Endpoint<Int> {
        var endpoint = Endpoint<Int>.rpc("sum", params: numbers)
        endpoint.path = "/rpc"
        return endpoint
    }

    /// A middleware that sets a header field to a fixed value.
    struct SetHeader: Middleware, Hashable {
        var name: String
        var value: String
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            var request = request
            request.head.headerFields[HTTPField.Name(self.name)!] = self.value
            return try await next(request)
        }
    }

    /// A middleware that holds the request (as a token refresh would) until its task is cancelled.
    struct HoldUntilCancelled: Middleware {
        let entered: Locked<Int>
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            self.entered.withLock { $0 += 1 }
            try await Task.sleep(for: .seconds(600))
            return try await next(request)
        }
    }

    /// The user a request is sent for, read by a middleware (as an auth middleware would).
    @TaskLocal static var user = "nobody"

    /// Sets `Authorization` from the task-local user, below the cache (as OAuth2 middleware does).
    struct UserAuthorization: Middleware {
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            var request = request
            request.head.headerFields[.authorization] = "Bearer \(Seam.user)"
            return try await next(request)
        }
    }
}

/// Counts server requests by path.
final class PathCounter: Sendable {
    private let counts = Locked<[String: Int]>([:])

    func hit(_ path: String) -> Int {
        self.counts.withLock { counts in
            counts[path, default: 0] += 1
            return counts[path]!
        }
    }

    subscript(_ path: String) -> Int { self.counts.withLock { $0[path, default: 0] } }
}
