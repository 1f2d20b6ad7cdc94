import Courier
import CourierAsyncHTTPClient
import CourierOutbox
import Foundation

/// The outbox's costs: durable enqueues per second, and the wall time per item delivered
/// through the outbox against the same POST sent directly with `Client.send`, one at a time.
struct OutboxBenchmark {
    let rounds: Int
    let items: Int

    func run() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.plainPort)/item"
        let transport = AsyncHTTPClientTransport()
        let client = Client(
            configuration: .init(transport: transport) {
                $0.deduplication.isEnabled = false
                $0.debugOptions = .off
            })
        let endpoint = Endpoint<Data>(
            name: "bench.post", method: .post, path: url,
            body: .data(Data(#"{"event":"tap","screen":"home","n":1}"#.utf8), contentType: "application/json"),
            decoding: .data
        )
        let directory = FileManager.default.temporaryDirectory
        print("outbox benchmark: \(self.items) POSTs per round, \(self.rounds) rounds, database in \(directory.path); medians")
        var enqueueRates: [Double] = []
        var outboxMicros: [Double] = []
        var directMicros: [Double] = []
        for _ in 0..<self.rounds {
            let path = directory.appendingPathComponent("courier-bench-outbox-\(UUID().uuidString).sqlite").path
            defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
            let outbox = try Outbox(path: path, client: client)
            let enqueueStart = ContinuousClock.now
            for _ in 0..<self.items { try outbox.enqueue(endpoint) }
            let enqueueTime = ContinuousClock.now - enqueueStart
            let deliverStart = ContinuousClock.now
            await outbox.deliverAll()
            let deliverTime = ContinuousClock.now - deliverStart
            let delivered = try outbox.items(in: .delivered).count
            precondition(delivered == self.items)
            let directStart = ContinuousClock.now
            for _ in 0..<self.items { _ = try await client.send(endpoint) }
            let directTime = ContinuousClock.now - directStart
            enqueueRates.append(Double(self.items) / enqueueTime.inSeconds)
            outboxMicros.append(deliverTime.inSeconds * 1e6 / Double(self.items))
            directMicros.append(directTime.inSeconds * 1e6 / Double(self.items))
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        print("durable enqueue: \(String(format: "%.0f", median(enqueueRates))) items/s (one transaction each, synchronous=FULL)")
        print(
            "delivery: \(String(format: "%.0f", median(outboxMicros))) µs per item through the outbox, \(String(format: "%.0f", median(directMicros))) µs per direct send: \(String(format: "%.2f", median(outboxMicros) / median(directMicros)))×"
        )
        try await transport.shutdown()
    }
}
