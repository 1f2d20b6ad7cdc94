import ArgumentParser
import Courier
import CourierAsyncHTTPClient
import Foundation
import HTTPTypes
import Logging

struct RequestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request",
        abstract: "Send one request through the whole Courier pipeline, like curl.",
        discussion: """
            The response body goes to standard output. With -i the status line and header fields come \
            first; with -v the request's log lines go to standard error.

            Exit codes:
              0   success (2xx or 3xx)
              1   an unexpected error
              3   invalid request (bad URL, bad header, unreadable file)
              4   the server answered 4xx or 5xx (the body is still printed)
              5   transport error (connection refused or closed, malformed response)
              6   timeout
              7   TLS failure (untrusted certificate, wrong host name)
              8   response larger than the limit
              9   redirect refused (too many, loop, https to http)
              10  cancelled
              11  refused in constrained mode
              12  business error in an envelope (non-success code)
              13  JSON-RPC error object
              14  authentication required
              15  TLS pin mismatch (nothing was sent)
              16  a middleware failed with an error of its own
              17  the response could not be written to standard output (a closed pipe, a full disk)
              64  a command-line option is not valid (checked before anything is sent)

            Load mode: with --repeat N the same request is sent N times through one client, \
            --concurrency C at a time, and one summary line is printed instead of the body: requests \
            made by callers, requests that reached the wire (identical concurrent requests share one \
            unless --no-dedup), errors, p50/p99 latency and HTTP version.
            """
    )

    @Argument(
        help:
            "The method (GET, POST, …) followed by the URL, or just the URL. With --config, the URL may be SERVICE:PATH (for a JSON-RPC service, SERVICE:METHOD)."
    )
    var arguments: [String]

    @Option(name: .long, help: "A config file (JSON) of services, environments and wire protocols.")
    var config: String?

    @Option(name: .long, help: "With --config: the environment to use for this request.")
    var env: String?

    @Option(name: .customShort("H"), help: "A header field, as 'Name: value' (repeatable).")
    var headers: [String] = []

    @Option(name: .customShort("d"), help: "A request body, sent as is (defaults the method to POST).")
    var data: String?

    @Option(name: .long, help: "A JSON request body (sets Content-Type: application/json).")
    var json: String?

    @Flag(name: .long, help: "Use HTTP/1.1 only.")
    var http1 = false

    @Flag(name: .long, help: "Require HTTP/2 (over TLS); a response over another version fails, and http:// is refused (no h2c).")
    var http2 = false

    @Option(
        name: .long,
        help:
            "The transport: asynchttpclient (the default) or urlsession (the platform's; on Linux FoundationNetworking over libcurl, which follows the http_proxy, https_proxy and no_proxy environment variables). urlsession takes none of --http1, --http2, --resolve, --cacert, --pin and --pin-cert."
    )
    var transport: String = "asynchttpclient"

    @Option(
        name: .long,
        help: "HOST:PORT:ADDRESS — connect to ADDRESS for HOST instead of resolving it (as curl; TLS still checks HOST). Repeatable.")
    var resolve: [String] = []

    @Option(name: .long, help: "A PEM file of CA certificates to trust instead of the system's.")
    var cacert: String?

    @Option(name: .long, help: "Pin the URL's host to a public key, as sha256/BASE64 (repeatable: backup pins).")
    var pin: [String] = []

    @Option(name: .long, help: "Pin the URL's host to a certificate or CA (PEM file): only chains ending there are trusted.")
    var pinCert: [String] = []

    @Option(
        name: .long, help: "Seconds the whole exchange may take (with -o: until the response head; the body then fails only if it stalls).")
    var timeout: Double = 30

    @Option(name: .long, help: "The largest response body accepted, in bytes (not applied with -o, which streams the body to the file).")
    var maxSize: Int = 100 * 1024 * 1024

    @Flag(name: .customShort("i"), help: "Print the status line and header fields before the body.")
    var include = false

    @Option(name: .long, help: "Record the exchange to this HAR 1.2 file (secrets redacted; opens in a browser's developer tools).")
    var har: String?

    @Flag(name: .customShort("v"), help: "Print the log lines of the request to standard error.")
    var verbose = false

    @Option(name: .customLong("repeat"), help: "Load mode: send the request this many times and print a summary.")
    var repeatCount: Int = 1

    @Option(name: .long, help: "Load mode: how many requests are in flight at once.")
    var concurrency: Int = 1

    @Flag(name: .long, help: "Load mode: do not share identical in-flight requests.")
    var noDedup = false

    @Option(name: .long, help: "The request's priority: veryLow, low, normal, high, veryHigh.")
    var priority: String = "normal"

    @Option(name: .customShort("o"), help: "Download the body to this file (streamed to disk, with progress).")
    var output: String?

    @Flag(name: .customLong("continue"), help: "With -o: resume an interrupted download where it stopped.")
    var continueDownload = false

    @Flag(name: .long, help: "With -o: replace the file if it exists.")
    var force = false

    @Option(name: .long, help: "Upload this file as the request body, streamed from disk (defaults the method to PUT).")
    var upload: String?

    @Option(
        name: .customShort("F"),
        help: "A multipart form field, 'name=value', or a file, 'name=@path' (repeatable; defaults the method to POST).")
    var form: [String] = []

    @Option(
        name: .long,
        help:
            "Send a failed attempt again up to this many times: idempotent methods (or a request with an Idempotency-Key), on connection failures and 429, 502, 503, 504, with backoff and Retry-After (default 0)."
    )
    var retry: Int = 0

    @Option(name: .long, help: "A directory for a disk cache: responses that may be stored are kept there and reused.")
    var cache: String?

    @Option(
        name: .long,
        help:
            "With --cache: http (the server's caching headers, the default), cache-else-network, network-only, or a number of seconds to keep responses."
    )
    var cachePolicy: String = "http"

    /// The policy `--cache-policy` names.
    static func cachePolicy(named name: String) -> CachePolicy? {
        switch name {
        case "http": return .http
        case "cache-else-network": return .cacheElseNetwork
        case "network-only": return .networkOnly
        default: return Int(name).flatMap { $0 > 0 ? .cacheFor(.seconds($0)) : nil }
        }
    }

    /// The most requests `--repeat` sends (each one's outcome is kept for the summary).
    static let repeatLimit = 1_000_000
    /// The most requests `--concurrency` keeps in flight.
    static let concurrencyLimit = 10_000
    /// The longest `--timeout`: larger values mean this (2^31 seconds, about 68 years).
    static let longestTimeout: Double = 2_147_483_648

    /// The timeout `--timeout` gives: `nil` for a value that is not a positive number (NaN,
    /// infinity, zero or less); a value past ``longestTimeout`` is that.
    static func timeoutDuration(seconds: Double) -> Duration? {
        guard seconds.isFinite, seconds > 0 else { return nil }
        return .milliseconds(Int64((min(seconds, Self.longestTimeout) * 1000).rounded(.up)))
    }

    func validate() throws {
        if Self.cachePolicy(named: self.cachePolicy) == nil {
            throw ValidationError("'\(self.cachePolicy)' is not a cache policy (http, cache-else-network, network-only, or seconds)")
        }
        guard (1...2).contains(self.arguments.count) else {
            throw ValidationError("give a URL, or a method and a URL")
        }
        if [self.data != nil, self.json != nil, self.upload != nil, !self.form.isEmpty].filter({ $0 }).count > 1 {
            throw ValidationError("use only one of -d, --json, --upload and -F")
        }
        if self.continueDownload && self.output == nil {
            throw ValidationError("--continue needs -o FILE")
        }
        switch self.transport {
        case "asynchttpclient": break
        case "urlsession":
            if self.http1 || self.http2 || !self.resolve.isEmpty || self.cacert != nil || !self.pin.isEmpty || !self.pinCert.isEmpty {
                throw ValidationError("--transport urlsession takes none of --http1, --http2, --resolve, --cacert, --pin and --pin-cert")
            }
        default:
            throw ValidationError("'\(self.transport)' is not a transport (asynchttpclient or urlsession)")
        }
        if self.http1 && self.http2 {
            throw ValidationError("use either --http1 or --http2, not both")
        }
        if self.repeatCount < 1 || self.concurrency < 1 {
            throw ValidationError("--repeat and --concurrency must be at least 1")
        }
        if self.repeatCount > 1, self.output != nil {
            throw ValidationError("--repeat sends the request many times and saves nothing: it cannot be used with -o")
        }
        if self.repeatCount > Self.repeatLimit || self.concurrency > Self.concurrencyLimit {
            throw ValidationError("--repeat must be at most \(Self.repeatLimit) and --concurrency at most \(Self.concurrencyLimit)")
        }
        if Self.timeoutDuration(seconds: self.timeout) == nil {
            throw ValidationError("--timeout must be a number of seconds greater than 0, not '\(self.timeout)'")
        }
        if !(0...100).contains(self.retry) {
            throw ValidationError("--retry must be a number of retries from 0 to 100")
        }
        if self.maxSize < 0 {
            throw ValidationError("--max-size must be a number of bytes, at least 0")
        }
        if RequestPriority(name: self.priority) == nil {
            throw ValidationError("'\(self.priority)' is not a priority (veryLow, low, normal, high, veryHigh)")
        }
    }

    func run() async throws {
        let code = await self.perform()
        if code != 0 { throw ExitCode(code) }
    }

    private func fail(_ message: String, code: Int32) -> Int32 {
        Output.standardError("courier: \(message)\n")
        return code
    }

    func perform() async -> Int32 {
        let urlText = self.arguments.last!
        var servers: ServerDirectory?
        var protocols: [ServiceID: any WireProtocol] = [:]
        var target: (service: ServiceID, path: String)?
        if let configPath = self.config {
            do {
                let config = try CLIConfig.load(configPath)
                servers = try config.directory(environment: self.env)
                protocols = try config.wireProtocols()
            } catch let error as CourierError {
                return self.fail(error.message, code: 3)
            } catch {
                return self.fail("\(error)", code: 3)
            }
            // A scheme is case-insensitive (RFC 3986 §3.1): `HTTP://host/x` is a URL, not a service named `HTTP`.
            let lowered = urlText.lowercased()
            if !lowered.hasPrefix("http://") && !lowered.hasPrefix("https://"), let colon = urlText.firstIndex(of: ":") {
                target = (ServiceID(String(urlText[..<colon])), String(urlText[urlText.index(after: colon)...]))
            }
        } else if self.env != nil {
            return self.fail("--env needs --config", code: 3)
        }
        let url: URL
        if target != nil {
            url = URL(string: "http://config.invalid")!
        } else {
            guard let parsed = URL(string: urlText), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
                parsed.host != nil
            else {
                return self.fail(
                    "'\(Redactor.standard.redact(urlString: urlText))' is not an http or https URL (or SERVICE:PATH with --config)", code: 3
                )
            }
            url = parsed
        }
        var fields = HTTPFields()
        for header in self.headers {
            let parts = header.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let name = HTTPField.Name(parts[0].trimmingCharacters(in: .whitespaces)) else {
                // Never echoed: a mistyped `Authorization Bearer: …` or `Authorization=…` holds a
                // secret, and error output ends up in logs.
                return self.fail("a -H argument is not a header field ('Name: value'); its text is not shown", code: 3)
            }
            // CR, LF or NUL in a value would be turned into spaces by the field type (a second
            // header smuggled into one argument): refused, as the endpoint's raw headers are.
            if parts[1].unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
                return self.fail("the header field '\(name)' contains CR, LF or NUL", code: 3)
            }
            fields.append(HTTPField(name: name, value: parts[1].trimmingCharacters(in: .whitespaces)))
        }
        var body: EndpointBody?
        if let json = self.json {
            body = .data(Data(json.utf8), contentType: "application/json")
        } else if let data = self.data {
            body = .data(Data(data.utf8), contentType: fields[.contentType] ?? "application/x-www-form-urlencoded")
        } else if let upload = self.upload {
            do {
                body = .body(
                    try RequestBody.file(URL(fileURLWithPath: upload), contentType: fields[.contentType] ?? "application/octet-stream"))
            } catch {
                return self.fail("cannot upload \(upload): \((error as? CourierError)?.message ?? "\(error)")", code: 3)
            }
        } else if !self.form.isEmpty {
            var multipart = MultipartForm()
            for item in self.form {
                guard let equals = item.firstIndex(of: "="), equals != item.startIndex else {
                    // Never echoed, as a -H argument: a mistyped `token:abc` holds a secret.
                    return self.fail("a -F argument is not a form field ('name=value' or 'name=@file'); its text is not shown", code: 3)
                }
                let name = String(item[..<equals])
                let value = String(item[item.index(after: equals)...])
                if value.hasPrefix("@") {
                    do {
                        try multipart.addFile(name: name, url: URL(fileURLWithPath: String(value.dropFirst())))
                    } catch {
                        return self.fail("cannot attach \(value.dropFirst()): \((error as? CourierError)?.message ?? "\(error)")", code: 3)
                    }
                } else {
                    multipart.add(name: name, value: value)
                }
            }
            body = .body(multipart.body())
        }
        let method: HTTPRequest.Method
        if self.arguments.count == 2 {
            guard let parsed = HTTPRequest.Method(self.arguments[0].uppercased()) else {
                // Shown redacted: it may be a URL given twice, with a key in its query.
                let shown = CourierError.oneLine(Redactor.standard.redactFreeText(Redactor.standard.redact(urlString: self.arguments[0])))
                return self.fail("'\(shown)' is not an HTTP method", code: 3)
            }
            method = parsed
        } else {
            method = body == nil ? .get : (self.upload != nil ? .put : .post)
        }

        var transportConfiguration = AsyncHTTPClientTransport.Configuration()
        transportConfiguration.httpVersion = self.http1 ? .http1Only : self.http2 ? .http2Only : .automatic
        let resolvedBase = target.flatMap { try? servers?.baseURL(for: $0.service) }
        for entry in self.resolve {
            // HOST:PORT:ADDRESS (an IPv6 address may hold colons: the first two split).
            let parts = entry.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            // A port is at most five digits and at most 65535 (`99999` is no port, not 65535).
            let portText = parts.count == 3 ? parts[1] : ""
            guard parts.count == 3, !parts[0].isEmpty, (1...5).contains(portText.count), portText.allSatisfy({ $0.isASCII && $0.isNumber }),
                let number = Int(portText), number <= 65_535, !parts[2].isEmpty
            else {
                return self.fail("--resolve takes HOST:PORT:ADDRESS, got '\(entry)'", code: 3)
            }
            // As curl: the entry is for HOST at PORT only; a request to the same host on another
            // port resolves the name as usual. (The override itself is per host, so an entry for
            // the URL's host at another port is not applied.)
            // With SERVICE:PATH, the host and port are the service's base URL's.
            let target = resolvedBase ?? url
            let port = Authority(target)?.port
            if target.host?.lowercased() == parts[0].lowercased(), number != port { continue }
            transportConfiguration.resolvedHosts[String(parts[0])] = String(parts[2]).trimmingCharacters(
                in: CharacterSet(charactersIn: "[]"))
        }
        if let cacert = self.cacert {
            do {
                let pem = try Data(contentsOf: URL(fileURLWithPath: cacert))
                try transportConfiguration.trust(pemCertificates: Array(pem))
            } catch {
                return self.fail("cannot use --cacert \(cacert): \(error)", code: 3)
            }
        }
        if !self.pin.isEmpty || !self.pinCert.isEmpty {
            // With SERVICE:PATH, the pin is for the host the service resolves to in the environment.
            let pinnedURL = target.flatMap { try? servers?.baseURL(for: $0.service) } ?? url
            guard let host = pinnedURL.host, pinnedURL.host != "config.invalid" else {
                return self.fail("pinning needs a URL with a host (or a service the config names)", code: 3)
            }
            var pins: [TLSPin] = []
            do {
                pins += try self.pin.map { try TLSPin.publicKey($0) }
                for file in self.pinCert {
                    pins.append(.certificateAuthority(pem: try String(contentsOfFile: file, encoding: .utf8)))
                }
            } catch let error as CourierError {
                return self.fail(error.message, code: 3)
            } catch {
                return self.fail("cannot read a --pin-cert file: \(error)", code: 3)
            }
            transportConfiguration.pinning.pin(host, to: pins)
        }
        let transport: any Transport
        let shutdownTransport: @Sendable () async -> Void
        if self.transport == "urlsession" {
            let session = URLSessionTransport()
            transport = session
            shutdownTransport = { session.shutdown() }
        } else {
            do {
                let client = try AsyncHTTPClientTransport(validating: transportConfiguration)
                transport = client
                shutdownTransport = { try? await client.shutdown() }
            } catch let error as CourierError {
                return self.fail(error.message, code: 3)
            } catch {
                return self.fail("\(error)", code: 3)
            }
        }
        let verbose = self.verbose
        let wire = WireCounter()
        if let har = self.har {
            // Refused before anything is sent: a HAR file that cannot be written was lost silently.
            let folder = URL(fileURLWithPath: har).deletingLastPathComponent().path
            guard FileManager.default.isWritableFile(atPath: folder) else {
                await shutdownTransport()
                return self.fail("the HAR file '\(har)' cannot be written: its folder is missing or not writable", code: 3)
            }
        }
        let recorder = self.har.map { HARRecorder(writingTo: URL(fileURLWithPath: $0)) }
        let client = Client(
            configuration: .init(transport: transport) {
                $0.eventMonitors = recorder.map { [$0] } ?? []
                $0.servers = servers
                $0.wireProtocols = protocols
                $0.middleware = [wire]
                $0.deduplication.isEnabled = !self.noDedup
                if verbose {
                    var logger = Logger(label: "courier") { _ in PlainLogHandler(stream: .standardError, prefix: "* ") }
                    logger.logLevel = .debug
                    $0.logger = logger
                }
                $0.maxResponseSize = self.maxSize
                $0.defaultHeaders[.userAgent] = "courier/1.0"
                $0.retry = RetryPolicy(maxAttempts: self.retry + 1)
                if let directory = self.cache {
                    $0.cache.store = DiskCacheStore(directory: URL(fileURLWithPath: directory))
                    $0.cache.policy = Self.cachePolicy(named: self.cachePolicy) ?? .http
                }
            })
        var endpoint = Endpoint<Data>(
            name: "cli", method: method, path: url.absoluteString, headers: fields, body: body,
            acceptedStatuses: 100..<600, timeout: Self.timeoutDuration(seconds: self.timeout), decoding: .data
        )
        endpoint.priority = RequestPriority(name: self.priority) ?? .normal
        if let target {
            endpoint.service = target.service
            if protocols[target.service] is JSONRPCProtocol {
                endpoint.path = ""
                endpoint.method = .post
                endpoint.operation = target.path
                endpoint.name = target.path
            } else {
                endpoint.path = target.path
            }
        }
        if self.repeatCount > 1 {
            let code = await self.load(client: client, endpoint: endpoint, wire: wire)
            await shutdownTransport()
            return self.savingHAR(recorder, code)
        }
        if let output = self.output {
            let code = await self.download(client: client, endpoint: endpoint, to: output)
            await shutdownTransport()
            return self.savingHAR(recorder, code)
        }
        let code: Int32
        do {
            if verbose, let request = try? client.makeRequest(for: endpoint) {
                Output.standardError("* \(request.cURLDescription())\n")
            }
            let response: Response<Data>
            if self.upload != nil || !self.form.isEmpty {
                let transfer = client.upload(endpoint)
                let printer = Task { await ProgressPrinter(label: "upload").show(transfer.progress) }
                response = try await transfer.value
                await printer.value
            } else {
                response = try await client.response(endpoint)
            }
            if verbose {
                let age = response.age.map { " (age \(Int($0.inSeconds))s)" } ?? ""
                Output.standardError("* source: \(response.source.rawValue)\(age)\n")
            }
            var failure: (any Error)?
            if self.include {
                var head = "\(response.version) \(response.status.code) \(response.status.reasonPhrase)\r\n"
                for field in response.headers { head += "\(field.name.rawName): \(field.value)\r\n" }
                head += "\r\n"
                failure = Output.standardOutput(Data(head.utf8))
            }
            if failure == nil { failure = Output.standardOutput(response.value) }
            if let failure {
                code = self.fail("the response could not be written to standard output: \(failure.localizedDescription)", code: 17)
            } else if response.status.code >= 400 {
                code = self.fail("the server answered \(response.status.code) \(response.status.reasonPhrase)", code: 4)
            } else {
                code = 0
            }
        } catch let error as CourierError where error.kind == .pinMismatch {
            code = self.fail("TLS pin mismatch: \(Self.shown(error.message)); nothing was sent", code: Self.exitCode(for: error))
        } catch let error as CourierError where error.kind == .tls {
            // The message may quote a certificate's subject, which its issuer wrote: one line,
            // control characters as spaces, as an error's description is.
            code = self.fail(
                "TLS failure (\(error.tlsReason?.name ?? "unknown")): \(Self.shown(error.message))", code: Self.exitCode(for: error))
        } catch let error as CourierError {
            code = self.fail(error.description, code: Self.exitCode(for: error))
        } catch {
            code = self.fail("\(error)", code: 1)
        }
        await shutdownTransport()
        return self.savingHAR(recorder, code)
    }

    /// `code`, once the HAR file (if one was asked for) holds every exchange: one that cannot be
    /// written fails the command (exit 3), never silently.
    func savingHAR(_ recorder: HARRecorder?, _ code: Int32) -> Int32 {
        guard let recorder, let har = self.har else { return code }
        do {
            try recorder.write(to: URL(fileURLWithPath: har))
        } catch {
            return self.fail("the HAR file '\(har)' could not be written: \(error)", code: code == 0 ? 3 : code)
        }
        return code
    }

    /// Text from elsewhere (a server, a certificate) as one line for the terminal, secrets hidden.
    static func shown(_ text: String) -> String {
        CourierError.oneLine(Redactor.standard.redactFreeText(text))
    }

    static func exitCode(for error: CourierError) -> Int32 {
        switch error.kind {
        case .invalidRequest: return 3
        case .httpStatus: return 4
        case .transport: return 5
        case .timeout: return 6
        case .tls: return 7
        case .responseTooLarge: return 8
        case .redirect: return 9
        case .cancelled: return 10
        case .decoding: return 1
        case .constrained: return 11
        case .business: return 12
        case .rpc: return 13
        case .authenticationRequired: return 14
        case .pinMismatch: return 15
        case .middleware: return 16
        default: return 1
        }
    }
}

extension RequestCommand {
    /// Sends the endpoint `--repeat` times, `--concurrency` at a time, and prints one summary line.
    func load(client: Client, endpoint: Endpoint<Data>, wire: WireCounter) async -> Int32 {
        let total = self.repeatCount
        let width = min(self.concurrency, total)
        let clock = ContinuousClock()
        // Each outcome keeps what the summary needs, not the response: a body per request for a
        // long run would be memory that grows with `--repeat`.
        let outcomes = await withTaskGroup(of: (Duration, Result<(status: Int, version: String), CourierError>).self) { group in
            var results: [(Duration, Result<(status: Int, version: String), CourierError>)] = []
            results.reserveCapacity(total)
            var started = 0
            func launch() {
                group.addTask {
                    let start = clock.now
                    do {
                        let response = try await client.response(endpoint)
                        return (clock.now - start, .success((response.status.code, response.version.description)))
                    } catch {
                        return (clock.now - start, .failure(CourierError.wrap(error)))
                    }
                }
                started += 1
            }
            while started < width { launch() }
            for await outcome in group {
                results.append(outcome)
                if started < total { launch() }
            }
            return results
        }
        let latencies = outcomes.map { $0.0.inSeconds * 1000 }.sorted()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int((Double(latencies.count) * p).rounded(.up)) - 1)]
        }
        var errors = 0
        var versions: Set<String> = []
        var firstError: CourierError?
        for (_, result) in outcomes {
            switch result {
            case .success(let response):
                versions.insert(response.version)
                if response.status >= 400 { errors += 1 }
            case .failure(let error):
                errors += 1
                if firstError == nil { firstError = error }
            }
        }
        let line =
            "requests=\(total) wire=\(wire.count) errors=\(errors) p50=\(String(format: "%.1f", percentile(0.5)))ms p99=\(String(format: "%.1f", percentile(0.99)))ms version=\(versions.sorted().joined(separator: ",").nonEmpty ?? "-")"
        print(line)
        if let firstError {
            Output.standardError("courier: first error: \(firstError)\n")
        }
        return errors == 0 ? 0 : (firstError.map(Self.exitCode(for:)) ?? 4)
    }
}

/// Counts the requests that reach the middleware chain, that is, the wire.
final class WireCounter: Middleware {
    private let counter = Locked(0)

    var count: Int { self.counter.current }

    func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        self.counter.withLock { $0 += 1 }
        return try await next(request)
    }
}

extension String {
    var nonEmpty: String? { self.isEmpty ? nil : self }
}
