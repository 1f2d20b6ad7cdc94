import Courier
import CourierAsyncHTTPClient
import Foundation
import NIOSSL

/// Issue 15's resource-limit measurement: 10,000 requests sent at once through one client
/// (queued by the scheduler), with the peak resident memory they add and the file descriptors
/// left afterwards.
///
/// Run once per protocol (`--protocol h1|h2`): memory a first round frees stays resident in the
/// allocator, so a second round in the same process would look free.
struct ManyRequestsBenchmark {
    let count: Int
    let http2: Bool

    func run() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        print("many requests: \(self.count) concurrent 1 KB JSON GETs + decode through one client (scheduler defaults)")
        print("protocol  wall s   peak RSS added MiB  bytes/request  fds before  fds after")
        // One protocol per process: memory freed by a first round stays resident and would hide
        // what a second round takes.
        for http2 in [self.http2] {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(server.caPEM))
            let transport = AsyncHTTPClientTransport(configuration: .init { $0.tlsConfiguration = tls })
            let url = http2 ? "https://localhost:\(server.tlsPort)" : "http://127.0.0.1:\(server.plainPort)"
            let client = Client(configuration: .init(transport: transport, baseURL: URL(string: url)!) { $0.debugOptions = .off })
            _ = try await client.send(Endpoint<BenchmarkItem>(path: "/item", query: ["i": "warm"]))
            let fdsBefore = openFileDescriptors()
            let baseline = residentMemory().current
            resetPeakMemory()
            let clock = ContinuousClock()
            let start = clock.now
            let completed = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<self.count {
                    group.addTask {
                        _ = try await client.send(Endpoint<BenchmarkItem>(path: "/item", query: ["i": "\(index)"]))
                        return 1
                    }
                }
                return try await group.reduce(0, +)
            }
            let wall = micros(clock.now - start) / 1e6
            precondition(completed == self.count)
            let peak = residentMemory().peak
            try await transport.shutdown()
            try await Task.sleep(for: .milliseconds(200))
            let added = max(0, peak - baseline)
            print(
                "\(http2 ? "h2" : "h1")        \(format(wall, 2).padding(toLength: 8, withPad: " ", startingAt: 0)) "
                    + "\(format(added, 1).padding(toLength: 19, withPad: " ", startingAt: 0)) "
                    + "\(format(added * 1_048_576 / Double(self.count), 0).padding(toLength: 14, withPad: " ", startingAt: 0)) "
                    + "\(String(fdsBefore).padding(toLength: 11, withPad: " ", startingAt: 0)) \(openFileDescriptors())"
            )
        }
    }
}

/// The number of open file descriptors of this process (from /proc; 0 where unavailable).
func openFileDescriptors() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
}

/// Resets the peak resident memory (VmHWM) to the current size, where the kernel allows it.
func resetPeakMemory() {
    guard let file = fopen("/proc/self/clear_refs", "w") else { return }
    fputs("5", file)
    fclose(file)
}
