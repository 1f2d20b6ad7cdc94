import Courier
import CourierAsyncHTTPClient
import Foundation
import Testing

/// A third-party server run as a child process on a loopback port, for interop tests.
final class ExternalServer: @unchecked Sendable {
    // Immutable after init; `process` is polled only by `stop()`, once, at the end of a test.
    let port: Int
    private let process: ChildProcess

    /// Whether interop tests must run (CI sets COURIER_CI=1 and installs the servers first).
    static var required: Bool { ProcessInfo.processInfo.environment["COURIER_CI"] == "1" }

    /// The mitmdump installed by `scripts/install-interop.sh`.
    static var mitmdump: String { Self.root.appendingPathComponent(".build-interop/mitmproxy-venv/bin/mitmdump").path }

    /// Whether mitmproxy is installed (or must be, under CI).
    static var mitmproxyEnabled: Bool { Self.required || FileManager.default.isExecutableFile(atPath: Self.mitmdump) }

    /// Debian's nginx, which `.ci/run` installs.
    static let nginx = "/usr/sbin/nginx"

    /// Whether nginx is installed (or must be, under CI).
    static var nginxEnabled: Bool { Self.required || FileManager.default.isExecutableFile(atPath: Self.nginx) }

    /// Whether `python3` can import `module`.
    static func pythonHas(_ module: String) -> Bool {
        guard let process = try? ChildProcess(executable: "/usr/bin/env", arguments: ["python3", "-c", "import \(module)"]) else {
            return false
        }
        for _ in 0..<1000 where process.isRunning {
            usleep(10_000)
        }
        return !process.isRunning && process.terminationStatus == 0
    }

    /// Interop tests run when the server is installed, and must run under CI (a missing server then fails the test).
    static func enabled(module: String) -> Bool {
        if Self.required { return true }
        return Self.probed.withLock { cache in
            if let known = cache[module] { return known }
            let found = Self.pythonHas(module)
            cache[module] = found
            return found
        }
    }

    private static let probed = Locked<[String: Bool]>([:])

    /// The repository's root, found from this file's path.
    static let root: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// Starts `python3 script PORT` and waits (on a thread of its own) until it prints "ready".
    static func start(pythonScript: String, environment: [String: String] = [:]) async throws -> ExternalServer {
        do {
            return try await StartGate.shared.passing {
                try await onOwnThread { try Self.retrying { try ExternalServer(pythonScript: pythonScript, environment: environment) } }
            }
        } catch {
            Issue.record("the interop server \(pythonScript) did not start; run scripts/install-interop.sh (CI does)")
            throw error
        }
    }

    /// Starts `executable arguments…` (with `{port}` replaced by a free port) and waits until the port accepts connections.
    static func start(executable: String, arguments: [String], environment: [String: String] = [:]) async throws -> ExternalServer {
        try await Self.start(executable: executable, environment: environment) { port in
            arguments.map { $0.replacingOccurrences(of: "{port}", with: "\(port)") }
        }
    }

    /// Starts `executable` with the arguments `arguments` makes for a free port (it may write a
    /// configuration file naming the port first), and waits until the port accepts connections.
    static func start(
        executable: String, environment: [String: String] = [:], arguments: @escaping @Sendable (Int) throws -> [String]
    ) async throws -> ExternalServer {
        try await StartGate.shared.passing {
            try await onOwnThread {
                try Self.retrying { try ExternalServer(executable: executable, arguments: arguments, environment: environment) }
            }
        }
    }

    private init(executable: String, arguments: (Int) throws -> [String], environment: [String: String]) throws {
        let port = Int.random(in: 20_000..<32_000)
        // The server is ready once its port accepts connections: a port something else already
        // listens on would pass for ready and send the test to the wrong server.
        guard !Self.accepts(port: port) else { throw ExternalServerError.portTaken(port) }
        self.port = port
        self.process = try ChildProcess(
            executable: executable, arguments: try arguments(port),
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }
        )
        // Up to a minute: a Python server that loads a large library starts slowly on a busy machine.
        for _ in 0..<1200 {
            if Self.accepts(port: self.port) { return }
            guard self.process.isRunning else { break }
            usleep(50_000)
        }
        self.process.kill(SIGKILL)
        throw ExternalServerError.didNotStart(executable)
    }

    /// Three attempts, each on a new random port (below the kernel's ephemeral range, but another
    /// process may still hold it).
    private static func retrying(_ make: () throws -> ExternalServer) throws -> ExternalServer {
        var lastError: (any Error)?
        for _ in 0..<3 {
            do { return try make() } catch { lastError = error }
        }
        throw lastError!
    }

    /// Whether something listens on the loopback port.
    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    private init(pythonScript: String, environment: [String: String]) throws {
        let port = Int.random(in: 20_000..<32_000)
        self.port = port
        let output = makePipe()
        do {
            self.process = try ChildProcess(
                executable: "/usr/bin/env", arguments: ["python3", Self.root.appendingPathComponent(pythonScript).path, "\(port)"],
                stdout: output.write, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }
            )
        } catch {
            close(output.read)
            close(output.write)
            throw error
        }
        close(output.write)
        let reader = FileHandle(fileDescriptor: output.read, closeOnDealloc: true)
        let ready = readSome(reader)
        guard String(decoding: ready, as: UTF8.self).contains("ready") else {
            self.process.kill(SIGKILL)
            throw ExternalServerError.didNotStart(pythonScript)
        }
        // What the server prints afterwards (a log line per request) is read and dropped on a
        // thread of its own until the server ends: a closed pipe would fail its next print, a
        // full one would block it.
        Thread {
            while !readSome(reader).isEmpty {}
        }.start()
        // "ready" may be printed just before the socket is bound: wait until it accepts. (Not a
        // `for … where` loop: that went on probing after the first success, two hundred
        // connections that filled the server's listen backlog, each then waiting a second for
        // the kernel to retry its SYN — about thirty seconds per server started.)
        for _ in 0..<200 {
            if Self.accepts(port: self.port) { break }
            usleep(50_000)
        }
    }

    var baseURL: URL { URL(string: "http://127.0.0.1:\(self.port)")! }

    /// Kills the server. SIGKILL, because a child spawned from a thread that blocks signals
    /// inherits the mask and would ignore SIGTERM.
    func stop() async {
        self.process.kill(SIGKILL)
        for _ in 0..<200 where self.process.isRunning {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// Lets two interop servers start at a time. A Python server spends about a CPU-second loading
/// its libraries; with every interop test on both transports, thirty of them starting at once
/// kept both cores busy long enough to make the deadline tests running beside them late.
actor StartGate {
    static let shared = StartGate(limit: 2)
    private let limit: Int
    private var starting = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(limit: Int) { self.limit = limit }

    func passing<Value: Sendable>(_ body: @Sendable () async throws -> Value) async throws -> Value {
        if self.starting < self.limit {
            self.starting += 1
        } else {
            await withCheckedContinuation { self.waiting.append($0) }
        }
        defer {
            if self.waiting.isEmpty { self.starting -= 1 } else { self.waiting.removeFirst().resume() }
        }
        return try await body()
    }
}

enum ExternalServerError: Error {
    case didNotStart(String)
    case portTaken(Int)
}

/// Runs `body` against a Python interop server with a fresh transport of `kind`, then shuts both down.
func withInteropServer(
    _ kind: TransportKind,
    script: String,
    environment: [String: String] = [:],
    _ body: (ExternalServer, any Transport) async throws -> Void
) async throws {
    try await withInteropServer(kind, start: { try await ExternalServer.start(pythonScript: script, environment: environment) }, body)
}

/// Runs `body` against the server `start` launches, with a fresh transport of `kind`, then shuts both down.
func withInteropServer(
    _ kind: TransportKind,
    start: () async throws -> ExternalServer,
    _ body: (ExternalServer, any Transport) async throws -> Void
) async throws {
    let server = try await start()
    let (transport, shutdown) = makeTransport(kind)
    do {
        try await body(server, transport)
    } catch {
        try? await shutdown()
        await server.stop()
        throw error
    }
    try await shutdown()
    await server.stop()
}
