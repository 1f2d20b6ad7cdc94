import AsyncHTTPClient
import Courier
import CourierAsyncHTTPClient
import Foundation

/// Issue 5's benchmark: a memory-cache hit and a disk-cache hit against a loopback network fetch
/// of the same 1 KB JSON endpoint, one request at a time, in the same run.
struct CacheBenchmark {
    let seconds: Double
    let rounds: Int

    func run() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        let url = URL(string: "http://127.0.0.1:\(server.plainPort)/item")!
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-bench-cache-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }

        let raw = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        let transport = AsyncHTTPClientTransport()
        func client(_ store: (any CacheStore)?) -> Client {
            Client(
                configuration: .init(transport: transport, baseURL: url) {
                    $0.deduplication.isEnabled = false
                    $0.cache = CacheConfiguration(store: store, policy: .cacheFor(.seconds(3600)))
                })
        }
        let network = client(nil)
        let memory = client(MemoryCacheStore())
        let disk = client(DiskCacheStore(directory: directory))

        print(
            "cache benchmark: 1 KB JSON GET, one request at a time, \(self.rounds) alternating rounds of \(format(self.seconds, 1)) s; medians of µs per request (wall)"
        )
        for decoded in [false, true] {
            var work: [(String, @Sendable () async throws -> Void)] = []
            work.append(
                (
                    "raw AsyncHTTPClient fetch",
                    {
                        let response = try await raw.execute(HTTPClientRequest(url: url.absoluteString), timeout: .seconds(30))
                        let body = try await response.body.collect(upTo: 1 << 20)
                        if decoded {
                            let item = try JSONDecoder().decode(BenchmarkItem.self, from: body)
                            precondition(item.id == 42)
                        }
                    }
                ))
            for (name, client) in [
                ("Courier network fetch (no cache)", network), ("Courier memory-cache hit", memory), ("Courier disk-cache hit", disk),
            ] {
                if decoded {
                    let endpoint = Endpoint<BenchmarkItem>(name: "bench.item", path: "")
                    _ = try await client.send(endpoint)
                    work.append(
                        (
                            name,
                            {
                                let item = try await client.send(endpoint)
                                precondition(item.id == 42)
                            }
                        ))
                } else {
                    let endpoint = Endpoint<Data>(name: "bench.bytes", path: "", decoding: .data)
                    _ = try await client.send(endpoint)
                    work.append(
                        (
                            name,
                            {
                                let bytes = try await client.send(endpoint)
                                precondition(bytes.count > 500)
                            }
                        ))
                }
            }
            var samples = Array(repeating: [Double](), count: work.count)
            for _ in 0..<self.rounds {
                for (index, item) in work.enumerated() {
                    let result = try await measure(concurrency: 1, seconds: self.seconds, item.1)
                    samples[index].append(result.wall / Double(result.requests) * 1e6)
                }
            }
            let medians = samples.map(median)
            print(decoded ? "\nwith JSON decoding of the body:" : "\nbody as Data (no decoding):")
            print("path                               µs/request   speed-up vs Courier network fetch")
            for (index, item) in work.enumerated() {
                let speedUp = medians[1] / medians[index]
                print(
                    "\(item.0.padding(toLength: 34, withPad: " ", startingAt: 0)) \(format(medians[index], 2).leftPadded(10))   \(format(speedUp, 1))×"
                )
            }
        }
        try await transport.shutdown()
        try await raw.shutdown()
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        String(repeating: " ", count: max(0, width - self.count)) + self
    }
}
