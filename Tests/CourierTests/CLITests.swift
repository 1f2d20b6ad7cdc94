import Courier
import CourierOutbox
import CourierTestServer
import Foundation
import Testing

/// Runs the built `courier` executable (next to the test bundle) and captures its output.
func runCourier(_ arguments: [String], environment: [String: String]? = nil) async throws -> (status: Int32, stdout: String, stderr: String)
{
    let out = makePipe()
    let err = makePipe()
    let child = try ChildProcess(
        executable: courierExecutable().path, arguments: arguments, stdout: out.write, stderr: err.write, environment: environment)
    close(out.write)
    close(err.write)
    // Blocking reads happen on threads of their own, never on the pool the in-process test
    // servers need.
    let stdoutHandle = FileHandle(fileDescriptor: out.read, closeOnDealloc: true)
    let stderrHandle = FileHandle(fileDescriptor: err.read, closeOnDealloc: true)
    async let stdoutData = onOwnThread { readToEnd(stdoutHandle) }
    async let stderrData = onOwnThread { readToEnd(stderrHandle) }
    let (stdout, stderr) = try await (stdoutData, stderrData)
    while child.isRunning { try await Task.sleep(for: .milliseconds(10)) }
    return (child.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
}

/// The built `courier` executable, next to the test bundle.
func courierExecutable() -> URL {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let executable = directory.appendingPathComponent("courier")
    if FileManager.default.fileExists(atPath: executable.path) { return executable }
    return ExternalServer.root.appendingPathComponent(".build/debug/courier")
}

@Suite("The courier executable")
struct CLITests {
    @Test
    func serveOnAPortInUseFailsWithoutReplacingTheCAFileOfTheServerThere() async throws {
        // The CA file belongs to the server already listening: a second `serve` that cannot
        // listen must not leave its clients trusting a CA that signed nothing there.
        let running = try await http1Server()
        let folder = temporaryDirectory("serve")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let ca = folder.appendingPathComponent("ca.pem")
        try Data("the running server's CA".utf8).write(to: ca)
        let result = try await runCourier(["serve", "--port", String(running.baseURL.port!), "--ca-out", ca.path])
        try await running.stop()
        #expect(result.status != 0)
        #expect(try Data(contentsOf: ca) == Data("the running server's CA".utf8))
    }

    /// `courier serve` runs for as long as it is left running: it kept every request, and every
    /// upload's whole body, in memory (three 100 MB uploads: 39 → 334 MB, never given back).
    @Test
    func aServerThatRecordsNoRequestsAnswersAndKeepsNone() async throws {
        let server = try await TestServer.start(.http1, keepsRequestBodies: false, recordsRequests: false, handler: Routes.standard)
        let (transport, shutdown) = makeTransport(.asyncHTTPClient)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let echoed = try await client.send(
            Endpoint<Data>(
                method: .post, path: "/echo", body: .data(Data(count: 100_000), contentType: "application/octet-stream"),
                decoding: .data))
        #expect(!echoed.isEmpty)
        #expect(server.connectionCount == 1)
        #expect(server.requests.isEmpty)
        try await shutdown()
        try await server.stop()
    }

    /// Once SwiftNIO has opened a socket the process ignores SIGPIPE, and Foundation's
    /// `FileHandle.write(_:)` traps on the failed write: `courier request URL | head -c 10` ended
    /// in a crash and a backtrace. Now it is exit code 17 and one line.
    @Test
    func anOutputThatCannotBeWrittenIsAnExitCodeNotACrash() async throws {
        let server = try await http1Server { _ in .text(String(repeating: "x", count: 300_000)) }
        let out = makePipe()
        close(out.read)  // No reader: every write to the pipe fails (EPIPE).
        let err = makePipe()
        let child = try ChildProcess(
            executable: courierExecutable().path, arguments: ["request", server.baseURL.absoluteString + "/big"], stdout: out.write,
            stderr: err.write, environment: nil)
        close(out.write)
        close(err.write)
        let stderrHandle = FileHandle(fileDescriptor: err.read, closeOnDealloc: true)
        let stderr = String(decoding: try await onOwnThread { readToEnd(stderrHandle) }, as: UTF8.self)
        while child.isRunning { try await Task.sleep(for: .milliseconds(10)) }
        #expect(child.terminationStatus == 17, "\(stderr.prefix(300))")
        #expect(stderr.contains("could not be written to standard output"))
        #expect(!stderr.contains("Fatal error"))
        try await server.stop()
    }

    @Test
    func downloadsWithProgressAndResumesWithContinue() async throws {
        let origin = FileOrigin(cutFirstAfter: 300_000)
        let server = try await http1Server(origin.handle)
        let directory = temporaryDirectory("cli-download")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("out.bin").path
        let url = server.baseURL.absoluteString + "/file"
        let cut = try await runCourier(["request", url, "-o", file])
        #expect(cut.status == 5)
        #expect(cut.stderr.contains("--continue"))
        #expect(!FileManager.default.fileExists(atPath: file))
        let resumed = try await runCourier(["request", url, "-o", file, "--continue"])
        #expect(resumed.status == 0)
        #expect(resumed.stderr.contains("out.bin: 100% (1000000/1000000 bytes)"))
        #expect(resumed.stderr.contains("resumed at"))
        #expect(sha256(try Data(contentsOf: URL(fileURLWithPath: file))) == sha256(origin.content.withLock { $0 }))
        #expect(server.requests.last?.header("Range")?.hasPrefix("bytes=") == true)
        let exists = try await runCourier(["request", url, "-o", file])
        #expect(exists.status == 3)
        let forced = try await runCourier(["request", url, "-o", file, "--force"])
        #expect(forced.status == 0)
        #expect(sha256(try Data(contentsOf: URL(fileURLWithPath: file))) == sha256(origin.content.withLock { $0 }))
        // `--continue` resumes; it does not replace a file that is there (that takes `--force`).
        try Data("precious".utf8).write(to: URL(fileURLWithPath: file))
        let kept = try await runCourier(["request", url, "-o", file, "--continue"])
        #expect(kept.status == 3)
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data("precious".utf8))
        try await server.stop()
    }

    @Test
    func aHARFileThatCannotBeWrittenFailsBeforeAnythingIsSent() async throws {
        // The recorder's writes were not checked: the request ran, no file was written, and the
        // command said 0.
        let server = try await http1Server()
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("courier-missing-\(UUID().uuidString)/x.har")
        let result = try await runCourier(["request", "--har", missing.path, server.baseURL.absoluteString + "/json"])
        #expect(result.status == 3)
        #expect(result.stderr.contains(missing.path), "\(result.stderr)")
        #expect(server.requests.isEmpty)
        // `--repeat` with `-o` saved nothing and said 0: refused.
        let repeated = try await runCourier(["request", "--repeat", "3", "-o", missing.path, server.baseURL.absoluteString + "/json"])
        #expect(repeated.status != 0)
        #expect(server.requests.isEmpty)
        try await server.stop()
    }

    @Test
    func mistypedSecretsAreNotEchoed() async throws {
        // Error output ends up in CI logs: a mistyped header holding a token, a URL or a config
        // base URL holding an API key, were printed as typed.
        let server = try await http1Server()
        for header in ["Authorization Bearer: tok-Qz9x", "Authorization=Bearer tok-Qz9x"] {
            let result = try await runCourier(["request", server.baseURL.absoluteString + "/json", "-H", header])
            #expect(result.status == 3)
            #expect(!result.stderr.contains("tok-Qz9x"), "\(result.stderr)")
        }
        let badURL = try await runCourier(["request", "ftp://files.invalid/x?api_key=k-123"])
        #expect(badURL.status == 3)
        #expect(!badURL.stderr.contains("k-123"), "\(badURL.stderr)")
        // A URL given where the method goes, and a mistyped -F item.
        let twoURLs = try await runCourier(["request", "https://a.invalid/x?api_key=k-456", server.baseURL.absoluteString + "/json"])
        #expect(twoURLs.status == 3)
        #expect(twoURLs.stderr.contains("is not an HTTP method"), "\(twoURLs.stderr)")
        #expect(!twoURLs.stderr.contains("k-456"), "\(twoURLs.stderr)")
        let form = try await runCourier(["request", server.baseURL.absoluteString + "/echo", "-F", "token:abc-789"])
        #expect(form.status == 3)
        #expect(!form.stderr.contains("abc-789"), "\(form.stderr)")
        // An empty value is a header field all the same.
        let empty = try await runCourier(["request", server.baseURL.absoluteString + "/json", "-H", "X-Empty:"])
        #expect(empty.status == 0, "\(empty.stderr)")
        let config = """
            {"defaultEnvironment": "develop", "services": {"shop": {"urls": {"develop": "\(server.baseURL.absoluteString)/v1?api_key=k-123"}}}}
            """
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-\(UUID().uuidString).json")
        try Data(config.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let list = try await runCourier(["env", "list", "--config", file.path])
        #expect(list.stdout.contains("shop"))
        #expect(!list.stdout.contains("k-123"), "\(list.stdout)")
        try await server.stop()
    }

    @Test
    func uploadsAFileAndMultipartForms() async throws {
        let server = try await http1Server(FileOrigin().handle)
        let directory = temporaryDirectory("cli-upload")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("notes.txt")
        let content = payload(100_000, seed: 11)
        try content.write(to: file)
        let url = server.baseURL.absoluteString + "/upload"
        let put = try await runCourier(["request", url, "--upload", file.path])
        #expect(put.status == 0)
        #expect(put.stdout == "100000 \(sha256(content))")
        #expect(server.requests.first?.method == "PUT")
        #expect(server.requests.first?.body == content)

        let post = try await runCourier(["request", url, "-F", "title=hello", "-F", "doc=@\(file.path)"])
        #expect(post.status == 0)
        let received = try #require(server.requests.last)
        #expect(received.method == "POST")
        let boundary = try #require(received.header("Content-Type")?.components(separatedBy: "boundary=").last)
        var expected = Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhello\r\n".utf8)
        expected += Data(
            "--\(boundary)\r\nContent-Disposition: form-data; name=\"doc\"; filename=\"notes.txt\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                .utf8)
        expected += content + Data("\r\n--\(boundary)--\r\n".utf8)
        #expect(received.body == expected)
        let missing = try await runCourier(["request", url, "-F", "doc=@/nonexistent/file"])
        #expect(missing.status == 3)
        try await server.stop()
    }

    @Test
    func aDiskCacheServesTheSecondIdenticalRequest() async throws {
        let server = try await http1Server(CacheOrigin().handle)
        let directory = temporaryDirectory("cli-cache")
        defer { try? FileManager.default.removeItem(at: directory) }
        let arguments = ["request", "-v", "--cache", directory.path, server.baseURL.absoluteString + "/max-age"]
        let first = try await runCourier(arguments)
        let second = try await runCourier(arguments)
        #expect(first.status == 0)
        #expect(second.status == 0)
        #expect(first.stderr.contains("* source: network"))
        #expect(second.stderr.contains("* source: cache (age "))
        #expect(second.stderr.contains("success(cache, age "))
        #expect(second.stdout == first.stdout)
        #expect(server.requests.count == 1)
        let refused = try await runCourier([
            "request", "--cache", directory.path, "--cache-policy", "sometimes", server.baseURL.absoluteString,
        ])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("not a cache policy"))
        try await server.stop()
    }

    @Test
    func requestPrintsTheBodyAndWithDashIThHead() async throws {
        let server = try await http1Server()
        let url = server.baseURL.absoluteString
        let plain = try await runCourier(["request", url + "/json"])
        #expect(plain.status == 0)
        #expect(plain.stdout == #"{"id":1,"title":"Hello"}"#)
        let withHead = try await runCourier(["request", "-i", "-v", url + "/json?token=tok-Qz9x"])
        #expect(withHead.stdout.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(withHead.stdout.contains("Content-Type: application/json") || withHead.stdout.contains("content-type: application/json"))
        #expect(withHead.stderr.contains("token=REDACTED"))
        #expect(!withHead.stderr.contains("tok-Qz9x"))
        try await server.stop()
    }

    @Test
    func theEnvironmentsProxyIsThePlatformsToFollowNeverCouriersOwn() async throws {
        // The decision (README, platforms and transports: proxies): Courier itself never reads
        // proxy variables — a variable of the process silently rerouting an app's traffic would
        // be a surprise — so `AsyncHTTPClientTransport` goes direct unless its configuration
        // says otherwise, while `URLSessionTransport` follows the platform (on Linux libcurl
        // reads http_proxy and no_proxy). The proxy here is a test server that answers the
        // absolute-form request a client sends to a proxy (RFC 9112 §3.2.2).
        let origin = try await http1Server()
        let proxy = try await http1Server { _ in .json(#"{"id":7,"title":"via proxy"}"#) }
        let url = origin.baseURL.absoluteString + "/json"
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
        environment["http_proxy"] = proxy.baseURL.absoluteString
        let throughSession = try await runCourier(["request", "--transport", "urlsession", url], environment: environment)
        #expect(throughSession.status == 0, "\(throughSession.stderr)")
        #expect(throughSession.stdout == #"{"id":7,"title":"via proxy"}"#)
        #expect(proxy.requests.map(\.uri) == [url])
        #expect(origin.requests.isEmpty)
        let direct = try await runCourier(["request", url], environment: environment)
        #expect(direct.stdout == #"{"id":1,"title":"Hello"}"#)
        #expect(origin.requests.count == 1)
        #expect(proxy.requests.count == 1)
        environment["no_proxy"] = "127.0.0.1"
        let bypassed = try await runCourier(["request", "--transport", "urlsession", url], environment: environment)
        #expect(bypassed.stdout == #"{"id":1,"title":"Hello"}"#)
        #expect(origin.requests.count == 2)
        #expect(proxy.requests.count == 1)
        let refused = try await runCourier(["request", "--transport", "urlsession", "--http2", url])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("--transport urlsession takes none of"))
        try await origin.stop()
        try await proxy.stop()
    }

    @Test
    func failuresPrintOneLineAndExitWithTheDocumentedCode() async throws {
        let server = try await http1Server()
        let url = server.baseURL.absoluteString
        let status = try await runCourier(["request", url + "/status/500"])
        #expect(status.status == 4)
        #expect(status.stdout == "status body 500")
        let timeout = try await runCourier(["request", url + "/stall", "--timeout", "0.2"])
        #expect(timeout.status == 6)
        #expect(timeout.stderr.split(separator: "\n").count == 1)
        try await server.stop()
        let refused = try await runCourier(["request", url + "/json"])
        #expect(refused.status == 5)
        #expect(refused.stderr.hasPrefix("courier: CourierError.transport"))
        let bad = try await runCourier(["request", "ftp://example.com/x"])
        #expect(bad.status == 3)
    }

    @Test
    func aHeaderArgumentWithALineBreakIsRefusedNotSmuggled() async throws {
        // `-H` with CR/LF would have become one field with spaces (the field type replaces
        // them): refused with the documented exit code 3, and nothing is sent.
        let server = try await http1Server()
        let result = try await runCourier(["request", server.baseURL.absoluteString + "/echo", "-H", "X-Note: a\r\nX-Evil: 1"])
        #expect(result.status == 3)
        #expect(result.stderr.contains("CR, LF or NUL"))
        #expect(server.requests.isEmpty)
        try await server.stop()
    }

    @Test
    func loadModeShowsDeduplication() async throws {
        // Answered after 10 s, so all 20 callers of a freshly started process join the first,
        // even on a loaded machine.
        let server = try await http1Server { _ in .json(#"{"id":1,"title":"x"}"#).with(.stall(.seconds(10))) }
        let url = server.baseURL.absoluteString + "/slow"
        let shared = try await runCourier(["request", url, "--repeat", "20", "--concurrency", "20"])
        #expect(shared.status == 0)
        #expect(shared.stdout.hasPrefix("requests=20 wire=1 errors=0 p50="))
        #expect(server.requests.count == 1)
        let unshared = try await runCourier(["request", url, "--repeat", "4", "--concurrency", "4", "--no-dedup", "--priority", "high"])
        #expect(unshared.stdout.hasPrefix("requests=4 wire=4 errors=0"))
        #expect(unshared.stdout.contains("version=HTTP/1.1"))
        try await server.stop()
    }

    @Test
    func configFileSelectsServicesEnvironmentsAndProtocols() async throws {
        let develop = try await http1Server { _ in .json(#"{"code":0,"msg":"ok","data":{"where":"develop"}}"#) }
        let test = try await http1Server { _ in .json(#"{"code":7,"msg":"maintenance","data":null}"#) }
        let config = """
            {"defaultEnvironment": "develop", "services": {"shop": {"protocol": "envelope", "urls": {"develop": "\(develop.baseURL.absoluteString)", "test": "\(test.baseURL.absoluteString)"}}}}
            """
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-\(UUID().uuidString).json")
        try Data(config.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let list = try await runCourier(["env", "list", "--config", file.path])
        #expect(list.stdout.contains("active environment: develop"))
        #expect(list.stdout.contains("* develop"))
        let ok = try await runCourier(["request", "--config", file.path, "shop:/profile"])
        #expect(ok.status == 0)
        #expect(ok.stdout == #"{"where":"develop"}"#)
        let business = try await runCourier(["request", "--config", file.path, "--env", "test", "shop:/profile"])
        #expect(business.status == 12)
        #expect(business.stderr.contains("maintenance"))
        try await develop.stop()
        try await test.stop()
    }

    @Test
    func http1AndHttp2FlagsForceTheVersion() async throws {
        // `--http2` offers h2 alone by ALPN and fails on anything else; `--http1` never speaks HTTP/2.
        let server = try await tlsServer()
        let ca = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-ca-\(UUID().uuidString).pem")
        try Data(Certificates.shared.caPEM.utf8).write(to: ca)
        defer { try? FileManager.default.removeItem(at: ca) }
        let url = server.baseURL.absoluteString + "/json"
        let two = try await runCourier(["request", url, "--cacert", ca.path, "--http2", "-i"])
        #expect(two.status == 0)
        #expect(two.stdout.hasPrefix("HTTP/2 200"))
        let one = try await runCourier(["request", url, "--cacert", ca.path, "--http1", "-i"])
        #expect(one.status == 0)
        #expect(one.stdout.hasPrefix("HTTP/1.1 200"))
        #expect(server.requests.map(\.httpVersion) == ["HTTP/2", "HTTP/1.1"])
        // Cleartext has no HTTP/2 here (no h2c): a clear error, nothing sent.
        let plain = try await http1Server()
        let refused = try await runCourier(["request", plain.baseURL.absoluteString + "/json", "--http2"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("h2c"))
        #expect(plain.requests.isEmpty)
        try await plain.stop()
        try await server.stop()
    }

    @Test
    func resolveConnectsANameThatDoesNotResolveToTheGivenAddress() async throws {
        // Like curl's --resolve: the URL, Host field and TLS name stay; the connection goes to the address.
        let server = try await http1Server()
        let port = server.baseURL.port!
        let host = unresolvableHost
        let url = "http://\(host):\(port)/json"
        let resolved = try await runCourier(["request", url, "--resolve", "\(host):\(port):127.0.0.1"])
        #expect(resolved.status == 0)
        #expect(resolved.stdout == #"{"id":1,"title":"Hello"}"#)
        #expect(server.requests.first?.header("Host") == "\(host):\(port)")
        // Without it the name does not resolve (a label too long for DNS, under .invalid): a transport error.
        let unresolved = try await runCourier(["request", url, "--retry", "0"])
        #expect(unresolved.status == 5)
        let malformed = try await runCourier(["request", url, "--resolve", host])
        #expect(malformed.status == 3)
        // An entry for another port does not apply (curl's HOST:PORT:ADDRESS is per port).
        let otherPort = try await runCourier([
            "request", url, "--retry", "0", "--resolve", "\(host):\(port == 1 ? 2 : port - 1):127.0.0.1",
        ])
        #expect(otherPort.status == 5)
        #expect(server.requests.count == 1)
        // A port past 65535 is no port (it was taken as 65535), nor is a signed number.
        for bad in ["\(host):99999:127.0.0.1", "\(host):+\(port):127.0.0.1"] {
            let refused = try await runCourier(["request", url, "--resolve", bad])
            #expect(refused.status == 3, "\(bad): \(refused.stderr)")
        }
        // With SERVICE:PATH the entry is for the service's host and port: one for another port
        // is not applied (every entry was, as the URL compared was a placeholder).
        let config = """
            {"defaultEnvironment": "develop", "services": {"shop": {"urls": {"develop": "http://\(host):\(port)"}}}}
            """
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-\(UUID().uuidString).json")
        try Data(config.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let viaService = try await runCourier(["request", "--config", file.path, "shop:/json", "--resolve", "\(host):\(port):127.0.0.1"])
        #expect(viaService.status == 0, "\(viaService.stderr)")
        let serviceOtherPort = try await runCourier([
            "request", "--config", file.path, "shop:/json", "--retry", "0", "--resolve", "\(host):\(port == 1 ? 2 : port - 1):127.0.0.1",
        ])
        #expect(serviceOtherPort.status == 5, "\(serviceOtherPort.stderr)")
        #expect(server.requests.count == 2)
        try await server.stop()
    }

    @Test
    func pinsOnTheCommandLine() async throws {
        let server = try await tlsServer()
        let ca = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-ca-\(UUID().uuidString).pem")
        try Data(Certificates.shared.caPEM.utf8).write(to: ca)
        defer { try? FileManager.default.removeItem(at: ca) }
        let url = server.baseURL.absoluteString + "/json"
        let right = TLSPin.publicKeyPinText(spkiDER: Certificates.shared.leafSPKIDER)
        let wrong = TLSPin.publicKeyPinText(spkiDER: try TestCertificates.generate(commonName: "Other").leafSPKIDER)
        let mismatch = try await runCourier(["request", url, "--cacert", ca.path, "--pin", wrong])
        #expect(mismatch.status == 15)
        #expect(mismatch.stderr.hasPrefix("courier: TLS pin mismatch"))
        #expect(mismatch.stderr.split(separator: "\n").count == 1)
        #expect(server.requests.isEmpty)
        let backup = try await runCourier(["request", url, "--cacert", ca.path, "--pin", wrong, "--pin", right])
        #expect(backup.status == 0)
        let anchored = try await runCourier(["request", url, "--pin-cert", ca.path])
        #expect(anchored.status == 0)
        #expect(anchored.stdout == #"{"id":1,"title":"Hello"}"#)

        // With --config and SERVICE:PATH, the pin applies to the host the service resolves to.
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-pins-\(UUID().uuidString).json")
        try Data(#"{"defaultEnvironment": "prod", "services": {"api": {"urls": {"prod": "\#(server.baseURL.absoluteString)"}}}}"#.utf8)
            .write(to: config)
        defer { try? FileManager.default.removeItem(at: config) }
        let before = server.requests.count
        let viaService = try await runCourier(["request", "--config", config.path, "api:/json", "--cacert", ca.path, "--pin", wrong])
        #expect(viaService.status == 15)
        #expect(viaService.stderr.hasPrefix("courier: TLS pin mismatch"))
        #expect(server.requests.count == before)
        let viaServiceRight = try await runCourier(["request", "--config", config.path, "api:/json", "--cacert", ca.path, "--pin", right])
        #expect(viaServiceRight.status == 0)
        #expect(viaServiceRight.stdout == #"{"id":1,"title":"Hello"}"#)
        try await server.stop()
    }
}

extension CLITests {
    @Test
    func retryRetriesAFailedGetAndShowsEachAttempt() async throws {
        let counter = Locked(0)
        let server = try await http1Server { _ in
            let n = counter.withLock { value -> Int in
                value += 1
                return value
            }
            return n < 3 ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : .text("finally")
        }
        let url = server.baseURL.absoluteString + "/flaky"
        let once = try await runCourier(["request", url])
        #expect(once.status == 4)
        #expect(counter.current == 1)
        counter.withLock { $0 = 0 }
        let retried = try await runCourier(["request", url, "--retry", "2", "-v"])
        #expect(retried.status == 0)
        #expect(retried.stdout == "finally")
        #expect(counter.current == 3)
        #expect(retried.stderr.contains("attempt 2"))
        #expect(retried.stderr.contains("attempt 3"))
        let refused = try await runCourier(["request", url, "--retry", "-1"])
        #expect(refused.status == 64)
        try await server.stop()
    }

    @Test
    func harFilesFromRequestAndDemoValidate() async throws {
        let server = try await http1Server()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-har-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let single = folder.appendingPathComponent("request.har")
        let request = try await runCourier([
            "request", "--har", single.path, "-H", "Authorization: Bearer cli-secret", server.baseURL.absoluteString + "/json?token=abc",
        ])
        #expect(request.status == 0)
        let data = try Data(contentsOf: single)
        #expect(try HARSchema.validate(har: data) == [])
        let text = String(decoding: data, as: UTF8.self)
        #expect(!text.contains("cli-secret"))
        #expect(!text.contains("token=abc"))
        #expect(text.contains(#""status" : 200"#))
        try await server.stop()

        let demoFile = folder.appendingPathComponent("demo.har")
        let demo = try await runCourier(["demo", "--har", demoFile.path])
        #expect(demo.status == 0)
        let demoData = try Data(contentsOf: demoFile)
        #expect(try HARSchema.validate(har: demoData) == [])
        let entries = ((try JSONSerialization.jsonObject(with: demoData) as? [String: Any])?["log"] as? [String: Any])?["entries"] as? [Any]
        #expect((entries?.count ?? 0) > 5)
        #expect(demo.stdout.contains("HAR: \(entries?.count ?? -1) entries written to \(demoFile.path)"))
    }

    @Test
    func outboxCommandsEnqueueListRunRetryAndPurge() async throws {
        let server = try await http1Server()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-outbox-\(UUID().uuidString).sqlite").path
        let base = server.baseURL.absoluteString
        let good = try await runCourier(["outbox", "enqueue", "--db", path, "POST", base + "/echo", "--json", #"{"text":"hi"}"#])
        #expect(good.status == 0)
        #expect(good.stdout == "1\n")
        let bad = try await runCourier(["outbox", "enqueue", "--db", path, "POST", base + "/status/400", "--queue", "other"])
        #expect(bad.stdout == "2\n")
        let pending = try await runCourier(["outbox", "list", "--db", path])
        #expect(pending.stdout.contains("total 2: pending 2, inFlight 0, delivered 0, dead 0"))
        let run = try await runCourier(["outbox", "run", "--db", path])
        #expect(run.status == 0)
        #expect(run.stdout == "delivered 1, dead 1, pending 0\n")
        let listed = try await runCourier(["outbox", "list", "--db", path, "--state", "dead"])
        #expect(listed.stdout.contains("2\tdead\t1/10\tother\tPOST"))
        #expect(listed.stdout.contains("status 400"))
        let retried = try await runCourier(["outbox", "retry", "--db", path, "2"])
        #expect(retried.stdout == "item 2 is pending again\n")
        let missing = try await runCourier(["outbox", "retry", "--db", path, "99"])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("no dead item with id 99"))
        let purged = try await runCourier(["outbox", "purge", "--db", path, "--acknowledge-all", "--keep-seconds", "0"])
        #expect(purged.status == 0)
        #expect(purged.stdout == "1 items deleted\n")
        let after = try await runCourier(["outbox", "list", "--db", path])
        #expect(after.stdout.contains("total 1: pending 1, inFlight 0, delivered 0, dead 0"))
        try await server.stop()
    }

    /// The tool may be pointed at the file of an app that is delivering from it: listing,
    /// storing, retrying and purging leave the app's deliveries alone. Opening for them ran the
    /// crash recovery, which put the app's item in flight back in line (to be sent again by the
    /// app's next pass, or marked dead on its last attempt). Only `run`, which delivers, recovers.
    @Test
    func outboxCommandsOtherThanRunLeaveAnItemInFlightAlone() async throws {
        let server = try await http1Server()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-outbox-\(UUID().uuidString).sqlite").path
        let base = server.baseURL.absoluteString
        let first = try await runCourier(["outbox", "enqueue", "--db", path, "POST", base + "/echo", "--json", #"{"text":"hi"}"#])
        #expect(first.stdout == "1\n")
        try await OutboxTests.alter(path, "UPDATE item SET state = 'inFlight', attempts = 1 WHERE id = ?", item: OutboxItemID(rawValue: 1))
        let listed = try await runCourier(["outbox", "list", "--db", path])
        #expect(listed.stdout.contains("1\tinFlight\t1/10\tdefault\tPOST"))
        let stored = try await runCourier(["outbox", "enqueue", "--db", path, "POST", base + "/echo", "--queue", "other"])
        #expect(stored.stdout == "2\n")
        let purged = try await runCourier(["outbox", "purge", "--db", path])
        #expect(purged.stdout == "0 items deleted\n")
        let missing = try await runCourier(["outbox", "retry", "--db", path, "1"])
        #expect(missing.status != 0)
        let again = try await runCourier(["outbox", "list", "--db", path])
        #expect(again.stdout.contains("total 2: pending 1, inFlight 1, delivered 0, dead 0"))
        #expect(server.requests.isEmpty)
        // `run` delivers, so nothing else does meanwhile: the item was interrupted and goes again.
        let run = try await runCourier(["outbox", "run", "--db", path])
        #expect(run.stdout == "delivered 2, dead 0, pending 0\n")
        #expect(server.requests.count == 2)
        try await server.stop()
    }
}
