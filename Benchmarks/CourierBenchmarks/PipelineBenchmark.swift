import AsyncHTTPClient
import CoreMetrics
import Courier
import CourierAsyncHTTPClient
import CourierTelemetry
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOSSL
import Synchronization
import Tracing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Issue 2's benchmark: a 1 KB JSON GET + decode through `Client` + `AsyncHTTPClientTransport`,
/// against raw AsyncHTTPClient doing the same work, over HTTP/1.1 and HTTP/2, at concurrency 1, 8, 64.
struct PipelineBenchmark {
    let seconds: Double
    let rounds: Int

    func run() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        print(
            "pipeline benchmark: 1 KB JSON GET + decode, \(self.rounds) alternating rounds of \(format(self.seconds, 1)) s per point; medians"
        )
        print("protocol  conc  raw req/s  courier req/s  ratio   raw µs CPU/req  courier µs CPU/req  ratio")
        let only = ProcessInfo.processInfo.environment["COURIER_BENCH_PROTOCOL"]
        // h1 and h2: raw AsyncHTTPClient against Courier on AsyncHTTPClientTransport; urlsession:
        // raw URLSession against Courier on URLSessionTransport (HTTP/1.1 in clear text: on Linux
        // URLSession cannot be given the benchmark's private CA).
        for kind in ["h1", "h2", "urlsession"] where only == nil || only == kind {
            let http2 = kind == "h2"
            let sides: any BenchmarkSides =
                kind == "urlsession" ? URLSessionSides(server: server) : try PipelineSides(server: server, http2: http2)
            // `COURIER_BENCH_API=start`: each request is started (`Client.start`, awaited through
            // its handle) as an app starts one it may cancel, and the raw side's in a task of its own.
            let rawWork = FetchAPI.current == .start ? FetchAPI.started(sides.rawWork) : sides.rawWork
            let courierWork = ProcessInfo.processInfo.environment["COURIER_BENCH_AA"] != nil ? sides.rawWork2 : sides.courierWork
            // Warm up both (connections, code paths).
            _ = try await measure(concurrency: 8, seconds: 0.5, rawWork)
            _ = try await measure(concurrency: 8, seconds: 0.5, courierWork)

            if let only = ProcessInfo.processInfo.environment["COURIER_BENCH_PROFILE"] {
                // Profiling aid: run one side alone for a while, at concurrency 8.
                let concurrency = ProcessInfo.processInfo.environment["COURIER_BENCH_CONCURRENCY"].flatMap(Int.init) ?? 8
                let run = try await measure(concurrency: concurrency, seconds: self.seconds, only == "raw" ? rawWork : courierWork)
                print(
                    "\(only) \(kind) c=\(concurrency): \(Int(run.requests)) requests, \(format(run.requestsPerSecond, 0)) req/s, \(format(run.cpuMicrosecondsPerRequest, 1)) µs CPU/req, \(format(run.switchesPerRequest, 2)) context switches/req"
                )
                try await sides.shutdown()
                return
            }
            for concurrency in [1, 8, 64] {
                var rawRuns: [Measurement] = []
                var courierRuns: [Measurement] = []
                for round in 0..<self.rounds {
                    // Alternate the order so drift on the machine hits both sides alike.
                    if round % 2 == 0 {
                        rawRuns.append(try await measure(concurrency: concurrency, seconds: self.seconds, rawWork))
                        courierRuns.append(try await measure(concurrency: concurrency, seconds: self.seconds, courierWork))
                    } else {
                        courierRuns.append(try await measure(concurrency: concurrency, seconds: self.seconds, courierWork))
                        rawRuns.append(try await measure(concurrency: concurrency, seconds: self.seconds, rawWork))
                    }
                }
                let rawRate = median(rawRuns.map(\.requestsPerSecond))
                let courierRate = median(courierRuns.map(\.requestsPerSecond))
                let rawCPU = median(rawRuns.map(\.cpuMicrosecondsPerRequest))
                let courierCPU = median(courierRuns.map(\.cpuMicrosecondsPerRequest))
                let name = kind == "h1" ? "HTTP/1.1" : kind == "h2" ? "HTTP/2  " : "URLSession"
                print(
                    "\(name)  \(String(format: "%4d", concurrency))  \(String(format: "%9.0f", rawRate))  \(String(format: "%13.0f", courierRate))  \(String(format: "%5.1f%%", courierRate / rawRate * 100))  \(String(format: "%14.0f", rawCPU))  \(String(format: "%18.0f", courierCPU))  \(String(format: "%5.1f%%", courierCPU / rawCPU * 100))"
                )
            }
            try await sides.shutdown()
        }
    }
}

/// The two sides of one row of the pipeline benchmark: the raw transport and Courier on it.
protocol BenchmarkSides: Sendable {
    /// One request through the raw transport.
    var rawWork: @Sendable () async throws -> Void { get }
    /// The same through a second raw client (the harness's A/A check).
    var rawWork2: @Sendable () async throws -> Void { get }
    /// The same request through Courier's `Client`.
    var courierWork: @Sendable () async throws -> Void { get }
    func shutdown() async throws
}

/// A number for each request of a run: every side asks for `item?n=<number>`, so no two
/// requests have the same URL and deduplication, when on, never coalesces (it measures what
/// deduplication costs a request that is not shared).
enum RequestNumbers {
    private static let next = Atomic<Int>(0)

    static func take() -> Int { self.next.add(1, ordering: .relaxed).newValue }
}

/// How the pipeline benchmark's requests are made (`COURIER_BENCH_API`): awaited in the caller's
/// task (`send`, the default), or started in a task of their own (`start`).
enum FetchAPI {
    case send
    case start

    static let current: FetchAPI = ProcessInfo.processInfo.environment["COURIER_BENCH_API"] == "start" ? .start : .send

    /// `work` run in a task of its own, awaited.
    static func started(_ work: @escaping @Sendable () async throws -> Void) -> @Sendable () async throws -> Void {
        { try await Task { try await work() }.value }
    }
}

/// One GET of the item through Courier's `Client`, decoded, at a URL no other request has.
func fetchItem(through client: Client) -> @Sendable () async throws -> Void {
    let started = FetchAPI.current == .start
    return {
        let endpoint = Endpoint<BenchmarkItem>(
            name: "bench.item", path: "", query: [URLQueryItem(name: "n", value: String(RequestNumbers.take()))])
        let item = started ? try await client.start(endpoint).value : try await client.send(endpoint)
        precondition(item.id == 42)
    }
}

/// Raw URLSession against Courier's `Client` over `URLSessionTransport`, each fetching and
/// decoding the 1 KB item over clear-text HTTP/1.1. Both sessions are configured alike: the
/// ephemeral configuration with the platform's URL cache, cookie storage and credential storage
/// off, as `URLSessionTransport` configures its own (so the ratio measures the pipeline, not
/// FoundationNetworking's cache).
struct URLSessionSides: BenchmarkSides {
    let url: URL
    let raw: URLSession
    let raw2: URLSession
    let transport: URLSessionTransport
    let client: Client

    init(server: ServerProcess) {
        self.url = URL(string: "http://127.0.0.1:\(server.plainPort)/item")!
        self.raw = URLSession(configuration: URLSessionTransport.sealed(.ephemeral))
        self.raw2 = URLSession(configuration: URLSessionTransport.sealed(.ephemeral))
        self.transport = URLSessionTransport(configuration: .ephemeral)
        self.client = Client(
            configuration: .init(transport: self.transport, baseURL: self.url) {
                // As for the AsyncHTTPClient rows: each request is the pipeline's own.
                $0.deduplication.isEnabled = false
                $0.debugOptions = .off
            })
    }

    var rawWork: @Sendable () async throws -> Void { Self.fetch(with: self.raw, url: self.url) }
    var rawWork2: @Sendable () async throws -> Void { Self.fetch(with: self.raw2, url: self.url) }

    /// One GET of the item through raw URLSession, decoded.
    static func fetch(with session: URLSession, url: URL) -> @Sendable () async throws -> Void {
        {
            let unique = URL(string: "\(url.absoluteString)?n=\(RequestNumbers.take())")!
            let (body, response) = try await session.data(for: URLRequest(url: unique))
            precondition((response as? HTTPURLResponse)?.statusCode == 200)
            let item = try JSONDecoder().decode(BenchmarkItem.self, from: body)
            precondition(item.id == 42)
        }
    }

    var courierWork: @Sendable () async throws -> Void { fetchItem(through: self.client) }

    func shutdown() async throws {
        self.raw.invalidateAndCancel()
        self.raw2.invalidateAndCancel()
        self.transport.shutdown()
    }
}

/// The two sides the pipeline benchmarks compare, for one protocol: raw AsyncHTTPClient and
/// Courier's `Client` over `AsyncHTTPClientTransport`, each fetching and decoding the 1 KB item.
///
/// Environment: `COURIER_BENCH_MONITORS` = `none` (default) | `log` | `telemetry` | `all`;
/// `COURIER_BENCH_DEDUP=1` keeps deduplication on; `COURIER_BENCH_NO_TIMEOUT=1` removes the
/// client's deadline; `COURIER_BENCH_NO_READ_TIMEOUT=1` the transport's read timeout;
/// `COURIER_BENCH_NO_COALESCING=1` its HTTP/2 read coalescing;
/// `COURIER_BENCH_HOST_LIMIT=N` sets the scheduler's limits; `COURIER_BENCH_PROTOCOL` = `h1` | `h2` | `urlsession`
/// measures one row only; `COURIER_BENCH_PROFILE` = `raw` | `courier` runs one side alone
/// (at `COURIER_BENCH_CONCURRENCY`, default 8) and prints its rate, for profilers.
/// `COURIER_BENCH_AA=1` puts a second raw client in Courier's place (an A/A check of the harness);
/// `COURIER_BENCH_AA=delegate` makes that client use AsyncHTTPClient's delegate API.
struct PipelineSides: BenchmarkSides {
    let url: String
    let raw: HTTPClient
    let raw2: HTTPClient
    let transport: AsyncHTTPClientTransport
    let client: Client

    init(server: ServerProcess, http2: Bool) throws {
        let url = http2 ? "https://localhost:\(server.tlsPort)/item" : "http://127.0.0.1:\(server.plainPort)/item"
        self.url = url
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(server.caPEM))

        var rawConfiguration = HTTPClient.Configuration()
        rawConfiguration.tlsConfiguration = tls
        rawConfiguration.redirectConfiguration = .disallow
        self.raw = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: rawConfiguration)
        // A/A check of the harness (COURIER_BENCH_AA=1): a second raw client in place of Courier.
        self.raw2 = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: rawConfiguration)

        self.transport = AsyncHTTPClientTransport(
            configuration: .init {
                $0.tlsConfiguration = tls
                if ProcessInfo.processInfo.environment["COURIER_BENCH_NO_READ_TIMEOUT"] != nil { $0.readTimeout = nil }
                if ProcessInfo.processInfo.environment["COURIER_BENCH_NO_COALESCING"] != nil { $0.http2ReadCoalescing = nil }
            })
        self.client = Client(
            configuration: .init(transport: self.transport, baseURL: URL(string: url)!) {
                if ProcessInfo.processInfo.environment["COURIER_BENCH_NO_TIMEOUT"] != nil { $0.timeout = nil }
                // Off by default, so each request is the pipeline's own work. COURIER_BENCH_DEDUP=1 keeps
                // it on (the default configuration); every URL is different (`RequestNumbers`), so
                // nothing is coalesced and the difference is what deduplication costs.
                $0.deduplication.isEnabled = ProcessInfo.processInfo.environment["COURIER_BENCH_DEDUP"] != nil
                if let limit = ProcessInfo.processInfo.environment["COURIER_BENCH_HOST_LIMIT"].flatMap(Int.init) {
                    $0.scheduling = .init(maxConcurrentRequests: limit, maxRequestsPerHost: limit)
                }
                // COURIER_BENCH_MONITORS=log: log lines at .info into a handler that drops them (the
                // lines are still formatted); =telemetry: metrics and tracing with no-op backends;
                // =all: both. Unset: no monitor, the zero-cost path.
                $0.debugOptions = .off
                let monitors = ProcessInfo.processInfo.environment["COURIER_BENCH_MONITORS"] ?? "none"
                if monitors == "log" || monitors == "all" {
                    var logger = Logger(label: "bench") { _ in DiscardingLogHandler() }
                    logger.logLevel = .info
                    $0.logger = logger
                }
                if monitors == "telemetry" || monitors == "all" {
                    $0.eventMonitors = [MetricsMonitor(factory: NOOPMetricsHandler.instance), TracingMonitor(tracer: NoOpTracer())]
                }
            })
    }

    var rawWork: @Sendable () async throws -> Void { Self.fetch(with: self.raw, url: self.url) }
    var rawWork2: @Sendable () async throws -> Void {
        // COURIER_BENCH_AA=delegate: the second raw side uses AsyncHTTPClient's delegate API.
        if ProcessInfo.processInfo.environment["COURIER_BENCH_AA"] == "delegate" {
            return Self.fetchByDelegate(with: self.raw2, url: self.url)
        }
        return Self.fetch(with: self.raw2, url: self.url)
    }

    /// One GET of the item through raw AsyncHTTPClient, collected and decoded.
    static func fetch(with raw: HTTPClient, url: String) -> @Sendable () async throws -> Void {
        {
            let response = try await raw.execute(HTTPClientRequest(url: "\(url)?n=\(RequestNumbers.take())"), timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 1 << 20)
            let item = try JSONDecoder().decode(BenchmarkItem.self, from: body)
            precondition(item.id == 42)
        }
    }

    var courierWork: @Sendable () async throws -> Void { fetchItem(through: self.client) }

    /// One GET of the item through Courier's transport alone (no pipeline), collected and
    /// decoded: `count --side transport` splits Courier's cost into transport and pipeline.
    var transportWork: @Sendable () async throws -> Void {
        let transport = self.transport
        let url = URL(string: self.url)!
        let head = HTTPRequest(method: .get, scheme: url.scheme, authority: "\(url.host!):\(url.port!)", path: url.path)
        return {
            var unique = head
            unique.path = "\(url.path)?n=\(RequestNumbers.take())"
            let response = try await transport.send(Request(head: unique, timeout: .seconds(30)))
            let body = try await response.body.collect(upTo: 1 << 20)
            let item = try JSONDecoder().decode(BenchmarkItem.self, from: body)
            precondition(item.id == 42)
        }
    }

    func shutdown() async throws {
        try await self.raw.shutdown()
        try await self.raw2.shutdown()
        try await self.transport.shutdown()
    }
}

/// A log handler that keeps its level and drops every message (the benchmark's logging cost is
/// Courier's formatting, not a sink's I/O).
struct DiscardingLogHandler: LogHandler {
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {}
}
