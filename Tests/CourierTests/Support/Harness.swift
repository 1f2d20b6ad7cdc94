import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import NIOSSL
import Testing

/// The transports the behaviour tests run against.
enum TransportKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case asyncHTTPClient
    case urlSession

    var testDescription: String { self.rawValue }

    /// The transports a test over TLS (HTTP/2 by ALPN) runs against: both where the test CA can
    /// be trusted by URLSession (`scripts/test-urlsession-tls.sh`, a private CA bundle), else
    /// AsyncHTTPClient only — URLSession on Linux trusts only the system's CA bundle.
    static var overTLS: [TransportKind] { PrivateTrust.isAvailable ? allCases : [.asyncHTTPClient] }
}

struct Article: Codable, Equatable, Sendable {
    var id: Int
    var title: String
}

struct Echo: Codable, Sendable {
    var method: String
    var uri: String
    var headers: [String: String]
    var body: String
    var version: String
}

enum Certificates {
    /// One CA and leaf for the whole test run.
    static let shared: TestCertificates = {
        do { return try TestCertificates.generate() } catch { fatalError("could not generate test certificates: \(error)") }
    }()
}

enum Routes {
    /// The routes most tests use.
    static func standard(_ request: RecordedRequest) async -> ScriptedResponse {
        let path = request.path
        switch path {
        case "/json":
            return .json(#"{"id":1,"title":"Hello"}"#)
        case "/echo":
            var headers: [String: String] = [:]
            for (name, value) in request.headers { headers[name.lowercased()] = value }
            let echo = Echo(
                method: request.method, uri: request.uri, headers: headers, body: String(decoding: request.body, as: UTF8.self),
                version: request.httpVersion)
            return .json(encoding: echo)
        case "/null-title":
            return .json(#"{"id":1,"title":null}"#)
        case "/nested-null":
            return .json(#"[{"id":1,"title":"a"},{"id":2,"title":null}]"#)
        case "/html":
            return ScriptedResponse(status: 200, headers: [("Content-Type", "text/html")], body: Data("<html>hi</html>".utf8))
        case "/bad-json":
            return .json(#"{"id": 1, "title": "#)
        case "/text":
            return .text("plain words")
        case "/no-content":
            return ScriptedResponse(status: 204)
        case "/loop":
            return ScriptedResponse(status: 302, headers: [("Location", "/loop")])
        case "/see-other":
            return ScriptedResponse(status: 303, headers: [("Location", "/echo")])
        case "/temporary":
            return ScriptedResponse(status: 307, headers: [("Location", "/echo")])
        case "/moved":
            return ScriptedResponse(status: Int(request.query["status"] ?? "") ?? 301, headers: [("Location", "/echo")])
        case "/to":
            return ScriptedResponse(status: 302, headers: [("Location", request.query["url"] ?? "/json")])
        case "/stall":
            // Longer than any test waits: a request to it ends only when the client gives up,
            // so a test that counts abandoned requests cannot see the answer come first on a
            // slow machine (ThreadSanitizer under load took more than 5 s to pass a cancel on).
            return .json(#"{"id":1,"title":"late"}"#).with(.stall(.seconds(600)))
        case "/slow-body":
            return .json(#"{"id":1,"title":"slow body here"}"#).with(.stallMidBody(afterBytes: 5, .seconds(600)))
        case "/close-before":
            return ScriptedResponse(behaviour: .closeBeforeResponding)
        case "/close-mid":
            return .json(String(repeating: "x", count: 10_000)).with(.closeMidBody(afterBytes: 100))
        case "/malformed":
            return ScriptedResponse(behaviour: .malformed)
        case "/truncated":
            return ScriptedResponse(behaviour: .truncatedHead)
        case "/larger":
            return .text("0123456789").with(.bodyLargerThanAnnounced(extra: Data("EXTRA-BYTES".utf8)))
        case "/big-announced":
            return ScriptedResponse(status: 200, body: Data(count: 4 << 20))
        case "/big-chunked":
            return ScriptedResponse(status: 200, body: Data(count: 32 << 20)).with(.chunked(chunkSize: 64 << 10, delay: .milliseconds(1)))
        case "/chunked":
            return .json(#"{"id":7,"title":"in many small pieces"}"#).with(.chunked(chunkSize: 4, delay: .milliseconds(1)))
        default:
            if path.hasPrefix("/status/"), let code = Int(path.dropFirst("/status/".count)) {
                return .text("status body \(code)", status: code)
            }
            if path.hasPrefix("/redirect/"), let count = Int(path.dropFirst("/redirect/".count)) {
                return ScriptedResponse(status: 302, headers: [("Location", count <= 1 ? "/echo" : "/redirect/\(count - 1)")])
            }
            return .text("not found", status: 404)
        }
    }
}

/// Runs `body` with a client of the given kind talking to `server`, then shuts both down.
func withClient(
    _ kind: TransportKind,
    server: TestServer,
    configure: (inout Client.Configuration) -> Void = { _ in },
    transportConfiguration: (inout AsyncHTTPClientTransport.Configuration) -> Void = { _ in },
    _ body: (Client) async throws -> Void
) async throws {
    let transport: any Transport
    var ahc: AsyncHTTPClientTransport?
    switch kind {
    case .asyncHTTPClient:
        var configuration = AsyncHTTPClientTransport.Configuration()
        // A TLS handshake has taken over 10 s (the default connect timeout) under the
        // ThreadSanitizer run's load; the servers here are on loopback and never drop a connect.
        configuration.connectTimeout = .seconds(60)
        if case .tls = server.mode {
            try configuration.trust(pemCertificates: Certificates.shared.caPEMBytes)
        }
        transportConfiguration(&configuration)
        ahc = AsyncHTTPClientTransport(configuration: configuration)
        transport = ahc!
    case .urlSession:
        // As AsyncHTTPClient's above: the shared test CA is trusted (where URLSession can be made
        // to), a server's own certificates are not.
        if case .tls = server.mode { try PrivateTrust.trust(Certificates.shared) }
        transport = URLSessionTransport()
    }
    let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL, configure: configure))
    try await shuttingDown(ahc, server) { try await body(client) }
}

/// Runs `body`, then shuts the transport (when there is one) and the server down, also when
/// `body` throws (its error is the one thrown then).
func shuttingDown(_ transport: AsyncHTTPClientTransport?, _ server: TestServer, _ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch {
        try? await transport?.shutdown()
        try? await server.stop()
        throw error
    }
    try await transport?.shutdown()
    try await server.stop()
}

/// A transport of the given kind for a cleartext test server, and how to shut it down.
func makeTransport(_ kind: TransportKind) -> (transport: any Transport, shutdown: @Sendable () async throws -> Void) {
    switch kind {
    case .asyncHTTPClient:
        let transport = AsyncHTTPClientTransport()
        return (transport, { try await transport.shutdown() })
    case .urlSession:
        let transport = URLSessionTransport()
        return (transport, { transport.shutdown() })
    }
}

/// A host name no resolver can answer for: a label of 64 characters, one more than DNS allows
/// (RFC 1035 §2.3.4), under `.invalid` (RFC 6761). The system's resolver refuses it at once
/// without asking a name server, so a test that uses it does not depend on the machine's
/// resolver (a CI machine's left `.invalid` lookups unanswered for 10 s, and on Linux a
/// URLSession lookup that is cancelled holds every URLSession of the process until it ends;
/// `SilentResolverTests` covers that).
let unresolvableHost = String(repeating: "a", count: 64) + ".invalid"

/// Starts a clear-text HTTP/1.1 server with the standard routes, or the given handler; on `port`
/// when given (a ``RefusingPort``'s, to have the port refuse connections once the server stops).
func http1Server(on port: Int = 0, _ handler: @escaping TestServer.Handler = Routes.standard) async throws -> TestServer {
    try await TestServer.start(.http1, port: port, handler: handler)
}

/// Starts an HTTP/1.1 server whose handler also gets the request's number (1 for the first the
/// server received): for servers that answer the first request one way and the rest another.
func http1Server(numbering handler: @escaping @Sendable (RecordedRequest, Int) async -> ScriptedResponse) async throws -> TestServer {
    let count = Locked(0)
    return try await http1Server { request in
        let number = count.withLock { count -> Int in
            count += 1
            return count
        }
        return await handler(request, number)
    }
}

/// Starts a TLS server (HTTP/2 and HTTP/1.1 by ALPN) with the standard routes, or the given handler.
func tlsServer(_ handler: @escaping TestServer.Handler = Routes.standard) async throws -> TestServer {
    try await TestServer.start(.tls(Certificates.shared), handler: handler)
}

/// Expects `body` to throw a `CourierError` and returns it.
func expectCourierError(_ body: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async -> CourierError? {
    do {
        try await body()
        Issue.record("expected a CourierError, but the call succeeded", sourceLocation: sourceLocation)
        return nil
    } catch let error as CourierError {
        return error
    } catch {
        Issue.record("expected a CourierError, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// Waits until `condition` holds, polling every 10 ms, for at most `seconds` — and for at least
/// 50 polls after they have passed, so a stall of the whole process (seen under ThreadSanitizer)
/// that outlasts the wait leaves what it waits for time to happen before it gives up.
func eventually(seconds: Double = 30, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    var pollsAfterDeadline = 0
    while pollsAfterDeadline < 50 {
        if condition() { return true }
        if ContinuousClock.now >= deadline { pollsAfterDeadline += 1 }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

/// Tells when a closure is gone everywhere: the closure captures ``token()``, which nothing
/// else holds, so once every copy of the closure has been released (a task that held it has
/// ended, a block dispatched with it has run) the probe's weak reference is empty. A negative
/// check ("the completion never ran") waits for that state, after which the call can no longer
/// come.
final class LifetimeProbe: @unchecked Sendable {
    final class Token: Sendable {}
    // Set once, before the token is shared; the runtime zeroes it atomically.
    private weak var object: Token?

    /// The one token to capture.
    func token() -> Token {
        let token = Token()
        self.object = token
        return token
    }

    var isReleased: Bool { self.object == nil }
}

/// A `POST /upload` of `content` as a stream of unknown length in 256 KiB chunks (which
/// `URLSessionTransport` spools to a file), answered as a string, never retried.
func streamedUpload(_ content: Data) -> Endpoint<String> {
    let body = RequestBody.stream(
        AsyncStream { continuation in
            for offset in stride(from: 0, to: content.count, by: 256 * 1024) {
                continuation.yield(content.subdata(in: offset..<min(offset + 256 * 1024, content.count)))
            }
            continuation.finish()
        })
    return Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string).retry(.never)
}

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

/// The verdict of a signature check on a request the server received: `ok`, or the rejection.
func signatureVerdict(_ verifier: SignatureVerifier, _ request: RecordedRequest) -> String {
    do {
        try verifier.verify(
            method: request.method, target: request.uri, body: request.body, signature: request.header("x-signature"),
            timestamp: request.header("x-signature-timestamp"), nonce: request.header("x-signature-nonce"))
        return "ok"
    } catch {
        return "\(error)"
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

/// Runs blocking work (a process's pipe, a polling loop, a blocking connect) on a thread of its
/// own and returns its result.
///
/// Never on `DispatchQueue.global()`: on Linux the Swift concurrency pool and the global queues
/// share libdispatch's default-QoS threads, so work that blocks there stalls every task of the
/// process — in-process test servers and clients included.
func onOwnThread<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try work() }) }
        thread.stackSize = 1 << 20
        thread.start()
    }
}

/// Reads a pipe to its end with read(2), going on when a signal (a child's SIGCHLD) interrupts
/// the call: FileHandle's reads trap on EINTR on Linux.
func readToEnd(_ handle: FileHandle) -> Data {
    var data = Data()
    while true {
        let chunk = readSome(handle)
        if chunk.isEmpty { return data }
        data.append(chunk)
    }
}

/// One read(2) of a pipe (empty at its end), going on after EINTR.
func readSome(_ handle: FileHandle) -> Data {
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
        if count >= 0 { return Data(buffer[0..<count]) }
        if errno != EINTR { return Data() }
    }
}

/// Writes all of `data` to a pipe with write(2), going on after EINTR.
func writeAll(_ data: Data, to handle: FileHandle) {
    var offset = 0
    let bytes = [UInt8](data)
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(handle.fileDescriptor, $0.baseAddress, $0.count) }
        if written > 0 {
            offset += written
        } else if written < 0, errno == EINTR {
            continue
        } else {
            return
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with posix_spawn(3): every child the tests start (the `courier`
/// executable, interop servers, `nft`, `gzip`).
///
/// Not Foundation's `Process`: its `run()` crashes at random when the process has many
/// descriptors open, as the parallel tests do (about 3,000 at the start of a run). To close
/// every descriptor above 2 in the child it lists `/proc/self/fd` and copies each entry's whole
/// 256-byte name field out of `readdir`'s buffer; with some 1,300 descriptors or more the last
/// entry sits at the buffer's end, and the copy can read past it into an unmapped page (seen as
/// a crash in memcpy inside `Process.run()`, even with launches made one at a time).
final class ChildProcess: @unchecked Sendable {
    // `status` is written only by `isRunning`, which callers poll from one task.
    let pid: pid_t
    private var status: Int32?

    /// Starts `executable` (a path) with `arguments`; `stdin`, `stdout` and `stderr` are
    /// descriptors to give the child (nil: /dev/null).
    /// `environment`, when given, is the child's whole environment (else it gets this process's).
    init(
        executable: String, arguments: [String], stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil,
        environment: [String: String]? = nil
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let stdin {
            posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let stdout {
            posix_spawn_file_actions_adddup2(&actions, stdout, 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        if let stderr {
            posix_spawn_file_actions_adddup2(&actions, stderr, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        // Nothing else of this process goes with the child: without this it inherited every
        // socket of the parallel tests that had no close-on-exec flag (libcurl's among them) and
        // held them open for as long as it ran, so a test that checked its sockets were closed
        // saw them held by, say, an `nft` another test had started.
        // (glibc 2.34's posix_spawn_file_actions_addclosefrom_np, which Swift's Glibc module
        // does not import: looked up by name.)
        if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let envp: [UnsafeMutablePointer<CChar>?]? = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer { for pointer in envp ?? [] { free(pointer) } }
        let result =
            if let envp { posix_spawn(&pid, executable, &actions, nil, argv, envp) } else {
                posix_spawn(&pid, executable, &actions, nil, argv, environ)
            }
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        self.pid = pid
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = dlsym(
        UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np"
    )
    .map { unsafeBitCast($0, to: AddCloseFrom.self) }

    /// Whether the child still runs (reaps it when it has ended).
    var isRunning: Bool {
        if self.status != nil { return false }
        var raw: Int32 = 0
        let reaped = waitpid(self.pid, &raw, WNOHANG)
        if reaped == -1, errno != EINTR {
            // Not a child of ours any more (reaped elsewhere): it has ended, status unknown.
            self.status = -1
            return false
        }
        guard reaped == self.pid else { return true }
        // WIFEXITED / WEXITSTATUS, spelled out (macros are not imported).
        self.status = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        return false
    }

    /// The exit status once ended (128 + the signal for a killed child).
    var terminationStatus: Int32 { self.status ?? -1 }

    func kill(_ signal: Int32) {
        _ = Glibc.kill(self.pid, signal)
    }
}

/// A pipe whose ends are closed on exec (the child gets only the end handed to it, as 1 or 2).
func makePipe() -> (read: Int32, write: Int32) {
    var fds: [Int32] = [0, 0]
    _ = pipe(&fds)
    _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
    _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
    return (fds[0], fds[1])
}

/// The CA bundle URLSession trusts on Linux (FoundationNetworking, libcurl underneath), made
/// writable for one test run by `scripts/test-urlsession-tls.sh`: a copy of the system's bundle
/// bind-mounted over it in a private mount namespace, named by `COURIER_TEST_PRIVATE_CA_BUNDLE`.
/// URLSession on Linux has no per-session trust setting, so this is the one way its HTTPS success
/// path and its certificate checks can be tested against certificates made at test time.
enum PrivateTrust {
    /// The writable bundle; `nil` when the tests do not run in such a namespace.
    static let bundle: String? = {
        guard let path = ProcessInfo.processInfo.environment["COURIER_TEST_PRIVATE_CA_BUNDLE"] else { return nil }
        // The system's own bundle is never written: only a file mounted over it (a mount point
        // of this process's mount namespace, which the script made private).
        let mounts = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        let isMountPoint = mounts.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 4 && fields[4] == path
        }
        guard isMountPoint else {
            fatalError("COURIER_TEST_PRIVATE_CA_BUNDLE names a file that is not mounted over: run scripts/test-urlsession-tls.sh")
        }
        return path
    }()

    static var isAvailable: Bool { self.bundle != nil }

    private static let added = Locked<Set<String>>([])

    /// Adds `certificates`' CA to the bundle (once), so URLSessions made from now on trust it.
    static func trust(_ certificates: TestCertificates) throws {
        guard let bundle else { return }
        try self.added.withLock { added in
            guard added.insert(certificates.caPEM).inserted else { return }
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: bundle))
            defer { try? handle.close() }
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(("\n" + certificates.caPEM + "\n").utf8))
        }
    }
}
