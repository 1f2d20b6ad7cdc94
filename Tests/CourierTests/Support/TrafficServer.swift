import Courier
import CourierTestServer
import Foundation
import Testing

/// A server whose `/slow` answers after `delay`, `/slow/blocker` when `gate` opens (if given),
/// and every other path at once, echoing the path.
func trafficServer(delay: Duration = .milliseconds(1500), gate: Gate? = nil) async throws -> TestServer {
    try await http1Server { request in
        let body = #"{"id":\#(request.uri.count),"title":"\#(request.uri)"}"#
        if request.path.hasPrefix("/slow/blocker"), let gate {
            await gate.wait()
            return .json(body)
        }
        if request.path.hasPrefix("/slow") {
            return .json(body).with(.stall(delay))
        }
        return .json(body)
    }
}
