import AsyncHTTPClient
import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOSSL

/// Courier's benchmark harness: Courier against the raw transport in the same run.
///
/// Usage: `swift run -c release CourierBenchmarks [pipeline] [--seconds S] [--rounds R]`.
/// The server runs in a child process (this binary with `serve`), so CPU time measured with
/// `getrusage` is the client's alone.
@main
struct BenchmarkMain {
    static func main() async throws {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "serve" {
            try await ServeBenchmarkServer.run(directory: arguments[1])
            return
        }
        if arguments.first == "transfer-run" {
            try await TransferRun.main(Array(arguments.dropFirst()))
            return
        }
        let seconds = Self.option("--seconds", in: arguments).flatMap(Double.init) ?? 1
        let rounds = Self.option("--rounds", in: arguments).flatMap(Int.init) ?? 9
        let suite = arguments.first { !$0.hasPrefix("--") && Double($0) == nil && Int($0) == nil } ?? "pipeline"
        switch suite {
        case "pipeline":
            try await PipelineBenchmark(seconds: seconds, rounds: rounds).run()
        case "traffic":
            try await TrafficBenchmark().run()
        case "cache":
            try await CacheBenchmark(seconds: seconds, rounds: rounds).run()
        case "transfer":
            let megabytes = Self.option("--megabytes", in: arguments).flatMap(Int.init) ?? 1024
            try await TransferBenchmark(
                bytes: megabytes << 20, rounds: Self.option("--rounds", in: arguments).flatMap(Int.init) ?? 3,
                only: Self.option("--only", in: arguments),
                scratchDirectory: Self.option("--scratch", in: arguments).map { URL(fileURLWithPath: $0) },
                external: Self.option("--url", in: arguments).map { ($0, Self.option("--ca", in: arguments) ?? "") }
            ).run()
        case "many":
            try await ManyRequestsBenchmark(
                count: Self.option("--requests", in: arguments).flatMap(Int.init) ?? 10_000,
                http2: Self.option("--protocol", in: arguments) == "h2"
            ).run()
        case "count":
            try await CountBenchmark(
                side: Self.option("--side", in: arguments) ?? "courier",
                http2: Self.option("--protocol", in: arguments) == "h2",
                concurrency: Self.option("--concurrency", in: arguments).flatMap(Int.init) ?? 1,
                requests: Self.option("--requests", in: arguments).flatMap(Int.init) ?? 1_000
            ).run()
        case "outbox":
            try await OutboxBenchmark(rounds: rounds, items: Self.option("--items", in: arguments).flatMap(Int.init) ?? 1000).run()
        default:
            print("unknown benchmark '\(suite)'; available: pipeline, count, traffic, cache, transfer, outbox, many")
        }
    }

    static func option(_ name: String, in arguments: [String]) -> String? {
        guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
        return arguments[index + 1]
    }
}

/// The child process: a clear-text HTTP/1.1 server and a TLS (HTTP/2) server with a 1 KB JSON route.
enum ServeBenchmarkServer {
    static func run(directory: String) async throws {
        let certificates = try TestCertificates.generate()
        let payload = BenchmarkPayload.json
        let handler: TestServer.Handler = { request in
            if request.path.hasPrefix("/delay/"), let ms = Int(request.path.dropFirst("/delay/".count)) {
                return ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")], body: payload).with(
                    .stall(.milliseconds(ms)))
            }
            if request.path.hasPrefix("/generated/"), let count = Int(request.path.dropFirst("/generated/".count)) {
                return ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")]).with(
                    .generated(length: count))
            }
            if request.path == "/sink" {
                return .text("\(request.bodyLength)")
            }
            if request.path.hasPrefix("/bytes/"), let count = Int(request.path.dropFirst("/bytes/".count)) {
                return ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: Data(count: count))
            }
            return ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")], body: payload)
        }
        let plain = try await TestServer.start(.http1, keepsRequestBodies: false, handler: handler)
        let tls = try await TestServer.start(.tls(certificates), keepsRequestBodies: false, handler: handler)
        let info = "\(plain.port)\n\(tls.port)\n"
        try Data(certificates.caPEM.utf8).write(to: URL(fileURLWithPath: directory + "/ca.pem"))
        try Data(info.utf8).write(to: URL(fileURLWithPath: directory + "/ports"))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
}

/// A 1 KB JSON object and its model.
struct BenchmarkItem: Codable, Sendable {
    var id: Int
    var title: String
    var author: String
    var tags: [String]
    var score: Double
    var published: Bool
    var body: String
}

enum BenchmarkPayload {
    static let json: Data = {
        let item = BenchmarkItem(
            id: 42, title: "Courier benchmark item", author: "bench", tags: ["swift", "http", "json", "pipeline"],
            score: 4.5, published: true, body: String(repeating: "lorem ipsum ", count: 70)
        )
        return try! JSONEncoder().encode(item)
    }()
}

/// Starts the server process and reads its ports and CA.
///
/// With `COURIER_BENCH_SERVER_DIR` set, uses a server already started with `CourierBenchmarks
/// serve DIR` instead (`Benchmarks/profile.sh` does, as a program under valgrind cannot start
/// one: Foundation's `Process` fails there on valgrind's own descriptors).
final class ServerProcess {
    let process: Process?
    let plainPort: Int
    let tlsPort: Int
    let caPEM: [UInt8]

    init() throws {
        let directory: URL
        if let existing = ProcessInfo.processInfo.environment["COURIER_BENCH_SERVER_DIR"] {
            directory = URL(fileURLWithPath: existing)
            self.process = nil
        } else {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-bench-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
            process.arguments = ["serve", directory.path]
            try process.run()
            self.process = process
        }
        let portsFile = directory.appendingPathComponent("ports")
        var ports: [Int] = []
        for _ in 0..<200 {
            if let text = try? String(contentsOf: portsFile, encoding: .utf8) {
                ports = text.split(separator: "\n").compactMap { Int($0) }
                if ports.count == 2 { break }
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        guard ports.count == 2 else { throw CourierError(.transport, "the benchmark server did not start") }
        self.plainPort = ports[0]
        self.tlsPort = ports[1]
        self.caPEM = Array(try Data(contentsOf: directory.appendingPathComponent("ca.pem")))
    }

    func stop() {
        self.process?.terminate()
        self.process?.waitUntilExit()
    }
}

/// This process's resource usage so far, over all its threads.
func processUsage() -> rusage {
    var usage = rusage()
    #if os(Linux)
    getrusage(RUSAGE_SELF.rawValue, &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    return usage
}

/// CPU time used by this process so far (user + system), in seconds.
func processCPUSeconds() -> Double {
    let usage = processUsage()
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

/// One measured run: requests completed, wall seconds, CPU seconds.
struct Measurement {
    var requests: Int
    var wall: Double
    var cpu: Double
    /// Context switches of the whole process (every thread), voluntary and not.
    var switches: Int = 0

    var requestsPerSecond: Double { Double(self.requests) / self.wall }
    var cpuMicrosecondsPerRequest: Double { self.cpu / Double(max(self.requests, 1)) * 1e6 }
    var switchesPerRequest: Double { Double(self.switches) / Double(max(self.requests, 1)) }
}

/// The process's context switches so far, over all its threads.
func processContextSwitches() -> Int {
    let usage = processUsage()
    return usage.ru_nvcsw + usage.ru_nivcsw
}

/// Runs `work` from `concurrency` tasks for `seconds` and measures it.
func measure(concurrency: Int, seconds: Double, _ work: @escaping @Sendable () async throws -> Void) async throws -> Measurement {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    let cpuStart = processCPUSeconds()
    let switchesStart = processContextSwitches()
    let wallStart = ContinuousClock.now
    let count = try await withThrowingTaskGroup(of: Int.self) { group in
        for _ in 0..<concurrency {
            group.addTask {
                var done = 0
                while ContinuousClock.now < deadline {
                    try await work()
                    done += 1
                }
                return done
            }
        }
        return try await group.reduce(0, +)
    }
    let wall = ContinuousClock.now - wallStart
    let (s, atto) = wall.components
    return Measurement(
        requests: count, wall: Double(s) + Double(atto) / 1e18, cpu: processCPUSeconds() - cpuStart,
        switches: processContextSwitches() - switchesStart)
}

/// The resident set size and its peak, in MiB, from /proc (0 where unavailable).
func residentMemory() -> (current: Double, peak: Double) {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return (0, 0) }
    func value(_ key: String) -> Double {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key) }) else { return 0 }
        let number = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) } ?? 0
        return number / 1024
    }
    return (value("VmRSS:"), value("VmHWM:"))
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func format(_ value: Double, _ digits: Int = 0) -> String {
    String(format: "%.\(digits)f", value)
}
