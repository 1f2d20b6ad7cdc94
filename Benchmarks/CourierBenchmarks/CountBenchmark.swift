import Foundation

/// A fixed number of requests through one side of the pipeline benchmark, for counting
/// instructions (`Benchmarks/profile.sh` runs it under callgrind).
///
/// `CourierBenchmarks count --side raw|courier|transport --protocol h1|h2 --concurrency C --requests N`:
/// (`transport`: Courier's AsyncHTTPClient transport alone, without the pipeline, which splits
/// Courier's cost into the transport's and the pipeline's)
/// 200 warm-up requests, then N more at concurrency C. Two runs that differ only in N differ
/// only by the work of the extra requests, so the difference of their counts divided by the
/// difference of N is the cost of one request, free of start-up, TLS set-up and warm-up.
struct CountBenchmark {
    let side: String
    let http2: Bool
    let concurrency: Int
    let requests: Int

    func run() async throws {
        guard ["raw", "courier", "transport"].contains(self.side) else {
            print("count: --side must be raw, courier or transport")
            return
        }
        let server = try ServerProcess()
        defer { server.stop() }
        let sides = try PipelineSides(server: server, http2: self.http2)
        let work =
            switch self.side {
            case "raw": sides.rawWork
            case "transport": sides.transportWork
            default: sides.courierWork
            }
        try await Self.send(200, concurrency: self.concurrency, work)
        try await Self.send(self.requests, concurrency: self.concurrency, work)
        try await sides.shutdown()
        print("count: \(self.side) \(self.http2 ? "h2" : "h1") c=\(self.concurrency): 200 + \(self.requests) requests")
    }

    /// Sends exactly `count` requests from `concurrency` tasks.
    static func send(_ count: Int, concurrency: Int, _ work: @escaping @Sendable () async throws -> Void) async throws {
        let tasks = max(1, min(concurrency, count))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<tasks {
                // The first `count % tasks` tasks send one more.
                let share = count / tasks + (index < count % tasks ? 1 : 0)
                group.addTask {
                    for _ in 0..<share { try await work() }
                }
            }
            try await group.waitForAll()
        }
    }
}
