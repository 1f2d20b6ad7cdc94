import AsyncHTTPClient
import Courier
import CourierAsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOSSL

/// Issue 7's benchmark: 1 GiB downloads and uploads through Courier against raw AsyncHTTPClient
/// moving the same bytes, each run in its own process so its peak resident memory is its own;
/// and HTTP/2 bulk downloads against HTTP/1.1 and against curl over the same TLS server.
///
/// With `--url URL --ca PEM` the downloads come from that server instead (such as nginx, see
/// `Benchmarks/bulk-nginx.sh`): `URL` serves a file of `--megabytes` over TLS, HTTP/2 and HTTP/1.1.
struct TransferBenchmark {
    let bytes: Int
    let rounds: Int
    /// Runs only the cases whose name contains this text.
    var only: String?
    /// Where downloaded files and the upload source go (such as a tmpfs, to take the disk out).
    var scratchDirectory: URL?
    /// A server of the caller's instead of the benchmark's own: the file's URL and the CA (PEM) to trust.
    var external: (url: String, caPath: String)?

    struct Run {
        var seconds: Double
        var peakMiB: Double
        /// Resident memory before the transfer began.
        var baselineMiB: Double
        var mibPerSecond: Double
        /// The most anonymous memory (heap, stacks; not the mapped program and libraries) seen
        /// while the process ran, sampled every 5 ms.
        var peakAnonymousMiB: Double
    }

    func run() async throws {
        let server = self.external == nil ? try ServerProcess() : nil
        defer { server?.stop() }
        let scratch = (self.scratchDirectory ?? FileManager.default.temporaryDirectory).appendingPathComponent(
            "courier-bench-transfer-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let ca = scratch.appendingPathComponent("ca.pem")
        let upload = scratch.appendingPathComponent("upload.bin")
        var allCases: [(String, [String])]
        if let external = self.external {
            try Data(contentsOf: URL(fileURLWithPath: external.caPath)).write(to: ca)
            allCases = [
                ("curl to a file, TLS HTTP/2", ["curl-download", external.url]),
                ("curl to a file, TLS HTTP/1.1", ["curl-download-h1", external.url]),
                ("raw AHC stream, TLS HTTP/2 (defaults)", ["raw-stream", external.url]),
                ("raw AHC stream, TLS HTTP/1.1", ["raw-stream-h1", external.url]),
                ("Courier stream, TLS HTTP/2", ["courier-stream", external.url]),
                ("Courier stream, TLS HTTP/1.1", ["courier-stream-h1", external.url]),
                ("Courier download to file, TLS HTTP/2", ["courier-download", external.url]),
                ("Courier download to file, TLS HTTP/1.1", ["courier-download-h1", external.url]),
            ]
        } else {
            try Data(server!.caPEM).write(to: ca)
            try Self.makeFile(upload, size: self.bytes)
            allCases = Self.ownServerCases(
                plain: "http://127.0.0.1:\(server!.plainPort)", tls: "https://localhost:\(server!.tlsPort)",
                download: "/generated/\(self.bytes)")
        }
        // curl's rows need curl; without it they are left out, and said so.
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") {
            print("no /usr/bin/curl: the curl rows are left out")
            allCases.removeAll { $0.1[0].hasPrefix("curl") }
        }
        let cases = allCases.filter { self.only.map($0.0.contains) ?? true }
        print("files in \(scratch.deletingLastPathComponent().path)")
        print(
            "transfer benchmark: \(self.bytes >> 20) MiB per transfer, \(self.rounds) alternating rounds, each in its own process; medians")
        var results = Array(repeating: [Run](), count: cases.count)
        for _ in 0..<self.rounds {
            for (index, item) in cases.enumerated() {
                let output = scratch.appendingPathComponent("out-\(index).bin")
                results[index].append(try self.spawn(item.1 + [output.path, upload.path, ca.path, "\(self.bytes)"]))
                try? FileManager.default.removeItem(at: output)
            }
        }
        print("case                                        MiB/s   seconds   peak RSS MiB   peak - before MiB   peak anonymous MiB")
        var speeds: [String: Double] = [:]
        for (index, item) in cases.enumerated() {
            let speed = median(results[index].map(\.mibPerSecond))
            speeds[item.0] = speed
            let before = results[index].map { $0.peakMiB - $0.baselineMiB }.max() ?? 0
            print(
                "\(item.0.padding(toLength: 42, withPad: " ", startingAt: 0)) \(format(speed, 0).leftPadded(7))  \(format(median(results[index].map(\.seconds)), 2).leftPadded(8))  \(format(results[index].map(\.peakMiB).max() ?? 0, 1).leftPadded(13))  \(item.1[0].hasPrefix("curl") ? "—".leftPadded(18) : format(before, 1).leftPadded(18))  \(format(results[index].map(\.peakAnonymousMiB).max() ?? 0, 1).leftPadded(19))"
            )
        }
        print("")
        let ratios = [
            ("Courier / raw, download to file", "Courier download to file, HTTP/1.1", "raw AHC download to file, HTTP/1.1"),
            ("Courier / raw, stream", "Courier stream (no disk), HTTP/1.1", "raw AHC stream (no disk), HTTP/1.1"),
            ("Courier / raw, upload", "Courier upload from file, HTTP/1.1", "raw AHC upload from file, HTTP/1.1"),
            ("raw AHC HTTP/2 / HTTP/1.1, streamed", "raw AHC stream, TLS HTTP/2 (defaults)", "raw AHC stream, TLS HTTP/1.1"),
            ("Courier HTTP/2 / HTTP/1.1, streamed", "Courier stream, TLS HTTP/2", "Courier stream, TLS HTTP/1.1"),
            ("Courier HTTP/2 / HTTP/1.1, to a file", "Courier download to file, TLS HTTP/2", "Courier download to file, TLS HTTP/1.1"),
            ("Courier / curl, HTTP/2 to a file", "Courier download to file, TLS HTTP/2", "curl to a file, TLS HTTP/2"),
            ("Courier / curl, HTTP/1.1 to a file", "Courier download to file, TLS HTTP/1.1", "curl to a file, TLS HTTP/1.1"),
        ]
        for (label, numerator, denominator) in ratios {
            guard let top = speeds[numerator], let bottom = speeds[denominator] else { continue }
            print("\((label + ":").padding(toLength: 40, withPad: " ", startingAt: 0)) \(format(top / bottom * 100, 1))%")
        }
    }

    /// The cases against the benchmark's own server (cleartext and TLS).
    static func ownServerCases(plain: String, tls: String, download: String) -> [(String, [String])] {
        [
            ("raw AHC download to file, HTTP/1.1", ["raw-download", plain + download]),
            ("Courier download to file, HTTP/1.1", ["courier-download", plain + download]),
            ("raw AHC stream (no disk), HTTP/1.1", ["raw-stream", plain + download]),
            ("Courier stream (no disk), HTTP/1.1", ["courier-stream", plain + download]),
            ("raw AHC upload from file, HTTP/1.1", ["raw-upload", plain + "/sink"]),
            ("Courier upload from file, HTTP/1.1", ["courier-upload", plain + "/sink"]),
            ("raw AHC stream, TLS HTTP/1.1", ["raw-stream-h1", tls + download]),
            ("raw AHC stream, TLS HTTP/2 (defaults)", ["raw-stream", tls + download]),
            ("Courier stream, TLS HTTP/1.1", ["courier-stream-h1", tls + download]),
            ("Courier stream, TLS HTTP/2", ["courier-stream", tls + download]),
            ("Courier download to file, TLS HTTP/1.1", ["courier-download-h1", tls + download]),
            ("Courier download to file, TLS HTTP/2", ["courier-download", tls + download]),
            ("Courier slow reader (5 ms per MiB), HTTP/1.1", ["courier-slow", plain + download]),
            ("URLSession stream (no disk), HTTP/1.1", ["us-stream", plain + download]),
            ("URLSession slow reader (5 ms per MiB), HTTP/1.1", ["us-slow", plain + download]),
            ("URLSession download to file, HTTP/1.1", ["us-download", plain + download]),
            ("URLSession upload from file, HTTP/1.1", ["us-upload", plain + "/sink"]),
            ("curl to a file, TLS HTTP/2", ["curl-download", tls + download]),
            ("curl to a file, TLS HTTP/1.1", ["curl-download-h1", tls + download]),
        ]
    }

    static func makeFile(_ url: URL, size: Int) throws {
        _ = FileManager.default.createFile(atPath: url.path, contents: nil)
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        let block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        var written = 0
        while written < size {
            let count = min(block.count, size - written)
            try handle.write(contentsOf: block.prefix(count))
            written += count
        }
    }

    private func spawn(_ arguments: [String]) throws -> Run {
        if arguments[0].hasPrefix("curl") {
            return try self.curl(arguments)
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["transfer-run"] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let anonymous = AnonymousMemorySampler(process: process.processIdentifier)
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let peakAnonymous = anonymous.stop().anonymous
        let parts = output.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard process.terminationStatus == 0, parts.count == 4 else {
            throw CourierError(.transport, "transfer run \(arguments[0]) failed: \(output)")
        }
        return Run(
            seconds: parts[1], peakMiB: parts[2], baselineMiB: parts[3], mibPerSecond: parts[0] / parts[1] / 1_048_576,
            peakAnonymousMiB: peakAnonymous)
    }
}

extension TransferBenchmark {
    /// curl in a process of its own, timed from here: its memory as sampled, with no baseline
    /// (curl's is a few hundred kilobytes).
    private func curl(_ arguments: [String]) throws -> Run {
        let (url, output, caPath) = (arguments[1], arguments[2], arguments[4])
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = ["-sS", "--fail", arguments[0].hasSuffix("-h1") ? "--http1.1" : "--http2", "--cacert", caPath, "-o", output, url]
        let start = ContinuousClock.now
        try curl.run()
        let memory = AnonymousMemorySampler(process: curl.processIdentifier)
        curl.waitUntilExit()
        let seconds = (ContinuousClock.now - start).inSeconds
        let peak = memory.stop()
        let received = (try? FileManager.default.attributesOfItem(atPath: output)[.size] as? Int) ?? 0
        guard curl.terminationStatus == 0, received == self.bytes else {
            throw CourierError(.transport, "curl failed (status \(curl.terminationStatus)) or moved \(received) of \(self.bytes) bytes")
        }
        return Run(
            seconds: seconds, peakMiB: peak.resident, baselineMiB: 0, mibPerSecond: Double(received) / seconds / 1_048_576,
            peakAnonymousMiB: peak.anonymous)
    }
}

/// One transfer in a child process; prints `bytes seconds peakMiB`.
enum TransferRun {
    static func main(_ arguments: [String]) async throws {
        let (mode, url, output, upload, caPath, size) = (
            arguments[0], arguments[1], arguments[2], arguments[3], arguments[4], Int(arguments[5])!
        )
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caPath))
        let http1Only = mode.hasSuffix("-h1")
        let kind = http1Only ? String(mode.dropLast(3)) : mode
        // What the process holds before the transfer (runtime, libraries, the event loops):
        // peak minus this is what the transfer itself cost.
        let baseline = residentMemory().current
        let start = ContinuousClock.now
        var moved = 0
        if kind.hasPrefix("us-") {
            // URLSessionTransport (FoundationNetworking on Linux), cleartext: it cannot trust a private CA here.
            let client = Client(configuration: .init(transport: URLSessionTransport()) { $0.timeout = .seconds(3600) })
            switch kind {
            case "us-download":
                let target = URL(fileURLWithPath: output)
                let result = try await client.download(
                    Endpoint<Data>(path: url, decoding: .data),
                    to: DownloadDestination(
                        directory: target.deletingLastPathComponent(), fileName: target.lastPathComponent, overwrite: true)
                ).value
                moved = Int(result.byteCount)
            case "us-upload":
                let endpoint = Endpoint<String>(
                    method: .put, path: url, body: .body(try RequestBody.file(URL(fileURLWithPath: upload))), decoding: .string)
                moved = Int(try await client.upload(endpoint).value.value) ?? 0
            default:
                var sinceSleep = 0
                for try await chunk in try await client.stream(Endpoint<Data>(path: url, decoding: .data)).body {
                    moved += chunk.count
                    sinceSleep += chunk.count
                    if kind == "us-slow", sinceSleep >= 1 << 20 {
                        sinceSleep = 0
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
            }
        } else if kind.hasPrefix("raw") {
            var configuration = HTTPClient.Configuration()
            configuration.tlsConfiguration = tls
            if http1Only { configuration.httpVersion = .http1Only }
            let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
            switch kind {
            case "raw-upload":
                var request = HTTPClientRequest(url: url)
                request.method = .PUT
                request.body = .stream(FileBuffers(url: URL(fileURLWithPath: upload)), length: .known(Int64(size)))
                let response = try await client.execute(request, timeout: .hours(1))
                let body = try await response.body.collect(upTo: 1 << 20)
                moved = Int(String(buffer: body)) ?? 0
            default:
                let response = try await client.execute(HTTPClientRequest(url: url), timeout: .hours(1))
                let file = kind == "raw-download" ? try Self.create(output) : nil
                for try await buffer in response.body {
                    moved += buffer.readableBytes
                    if let file { try file.write(contentsOf: buffer.readableBytesView) }
                }
                try file?.close()
            }
            try await client.shutdown()
        } else {
            let transport = AsyncHTTPClientTransport(
                configuration: .init {
                    $0.tlsConfiguration = tls
                    if http1Only { $0.httpVersion = .http1Only }
                    if ProcessInfo.processInfo.environment["COURIER_BENCH_NO_READ_TIMEOUT"] != nil { $0.readTimeout = nil }
                    if let coalescing = ProcessInfo.processInfo.environment["COURIER_BENCH_COALESCING"] {
                        $0.http2ReadCoalescing = Int(coalescing)
                    }
                })
            let client = Client(configuration: .init(transport: transport) { $0.timeout = .seconds(3600) })
            switch kind {
            case "courier-download":
                let target = URL(fileURLWithPath: output)
                let result = try await client.download(
                    Endpoint<Data>(path: url, decoding: .data),
                    to: DownloadDestination(
                        directory: target.deletingLastPathComponent(), fileName: target.lastPathComponent, overwrite: true)
                ).value
                moved = Int(result.byteCount)
            case "courier-upload":
                let endpoint = Endpoint<String>(
                    method: .put, path: url, body: .body(try RequestBody.file(URL(fileURLWithPath: upload))), decoding: .string)
                moved = Int(try await client.upload(endpoint).value.value) ?? 0
            case "courier-stream-file":
                // Courier's stream, written to a file by this loop: the download path without its bookkeeping.
                let file = try Self.create(output)
                for try await chunk in try await client.stream(Endpoint<Data>(path: url, decoding: .data)).body {
                    moved += chunk.count
                    try file.write(contentsOf: chunk)
                }
                try file.close()
            case "courier-slow":
                // A reader slower than the network: 5 ms per MiB. Shows whether memory stays bounded.
                var sinceSleep = 0
                for try await chunk in try await client.stream(Endpoint<Data>(path: url, decoding: .data)).body {
                    moved += chunk.count
                    sinceSleep += chunk.count
                    if sinceSleep >= 1 << 20 {
                        sinceSleep = 0
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
            default:
                for try await chunk in try await client.stream(Endpoint<Data>(path: url, decoding: .data)).body {
                    moved += chunk.count
                }
            }
            try await transport.shutdown()
        }
        let elapsed = (ContinuousClock.now - start).inSeconds
        precondition(moved == size, "moved \(moved) of \(size) bytes")
        print("\(moved) \(elapsed) \(residentMemory().peak) \(baseline)")
    }

    static func create(_ path: String) throws -> FileHandle {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    }
}

/// A file as a sequence of byte buffers, for raw AsyncHTTPClient uploads.
struct FileBuffers: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let url: URL

    struct AsyncIterator: AsyncIteratorProtocol {
        let handle: FileHandle?
        mutating func next() async throws -> ByteBuffer? {
            guard let handle, let data = try handle.read(upToCount: 256 * 1024), !data.isEmpty else { return nil }
            return ByteBuffer(data: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(handle: try? FileHandle(forReadingFrom: self.url)) }
}

/// Samples another process's anonymous resident memory (`RssAnon`: heap, stacks, buffers; not the
/// program and libraries mapped from files) every 5 ms on a thread of its own, keeping the peak,
/// and its peak resident memory (`VmHWM`) as last seen.
final class AnonymousMemorySampler: @unchecked Sendable {
    private let lock = NSLock()
    private var peak = 0.0
    private var resident = 0.0
    private var running = true
    private let done = DispatchSemaphore(value: 0)

    init(process: Int32) {
        let thread = Thread { [self] in
            while self.lock.withLock({ self.running }) {
                if let status = try? String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8) {
                    func mebibytes(_ key: String) -> Double? {
                        let line = status.split(separator: "\n").first { $0.hasPrefix(key) }
                        return line?.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) }.map {
                            $0 / 1024
                        }
                    }
                    let (anonymous, resident) = (mebibytes("RssAnon:"), mebibytes("VmHWM:"))
                    self.lock.withLock {
                        self.peak = max(self.peak, anonymous ?? 0)
                        self.resident = max(self.resident, resident ?? 0)
                    }
                }
                usleep(5_000)
            }
            self.done.signal()
        }
        thread.start()
    }

    /// Stops sampling; returns the peaks in MiB.
    func stop() -> (anonymous: Double, resident: Double) {
        self.lock.withLock { self.running = false }
        self.done.wait()
        return self.lock.withLock { (self.peak, self.resident) }
    }
}
