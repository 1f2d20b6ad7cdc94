import Foundation
import HTTPTypes

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Security)
import Security
#endif

/// A transport over `URLSession`: light, no extra dependencies, one session per transport.
///
/// Redirects are not followed by the session; the pipeline follows them under its
/// ``RedirectPolicy``. The platform never acts behind the pipeline's back: the session has no
/// cookie storage, no URL cache and no credential storage, and an authentication challenge is
/// answered without a credential, so the `401` comes back for the auth middleware and the status
/// check to see. A streamed request body longer than 1 MiB (or of unknown length) is spooled to a
/// temporary file and sent from it (on Linux as a stream, chunked over HTTP/1.1); what the reader has not read yet of a response waits in
/// memory up to `responseMemoryLimit`, and beyond it in an unlinked temporary file.
///
/// What differs by platform — the version it reports, proxies, the fields Linux adds, trust and
/// pinning on Linux, what is not compiled or tested here — is in the "Platforms and transports"
/// article.
public final class URLSessionTransport: Transport {
    /// The session, until ``shutdown()`` lets it go: a task made in an invalidated session is a
    /// crash on Apple platforms, so tasks are made on the control queue, which invalidates the
    /// session only after every task asked for before the shutdown (and none after). Letting go
    /// matters on Linux too: FoundationNetworking closes its idle keep-alive connections
    /// (libcurl's connection cache) only when the session itself is freed.
    private let session: Locked<URLSession?>
    private let delegate: SessionDelegate
    /// How many response bodies failed because what the reader had not read could not be
    /// written to the scratch directory; the tests wait for it instead of for a time.
    package let bufferFailures = Locked(0)

    /// The pins checked in the server-trust challenge (Apple platforms only).
    private let pinning: PinningPolicy

    /// Creates a transport with TLS pins, checked in the session's server-trust challenge.
    ///
    /// On Apple platforms a pinned host's chain is evaluated by the system (with only the pinned
    /// authorities as anchors when the host has certificate-authority pins) and the leaf's public
    /// key must match one of its public-key pins (a backup pin is simply another pin); a pinned
    /// host over cleartext `http` fails with `invalidRequest` before anything is sent. A mismatch
    /// fails with kind and TLS reason `pinMismatch`. The matching is the shared
    /// `ServerTrustPinning` code; the Security-framework calls around it are not compiled or
    /// tested on Linux.
    ///
    /// - Throws: on Linux, always when `pinning` is not empty: FoundationNetworking has no
    ///   server-trust challenge, and a pin must never pass silently (use
    ///   `AsyncHTTPClientTransport` there).
    public convenience init(configuration: URLSessionConfiguration = .ephemeral, pinning: PinningPolicy) throws {
        #if canImport(Security) && canImport(Darwin)
        self.init(
            configuration: configuration, responseMemoryLimit: 16 << 20, responseSpillLimit: 256 << 20, scratchDirectory: nil,
            pinning: pinning)
        #else
        guard pinning.isEmpty else {
            throw CourierError.invalidRequest(
                "URLSessionTransport cannot enforce TLS pins on this platform (FoundationNetworking has no server-trust challenge); use AsyncHTTPClientTransport"
            )
        }
        self.init(configuration: configuration)
        #endif
    }

    /// Bytes of a response the reader has not read yet that are held in memory; more go to a
    /// temporary file.
    private let responseMemoryLimit: Int
    /// Bytes of a response the reader has not read yet, in memory and file together, past which
    /// the response fails.
    private let responseSpillLimit: Int
    /// Where tasks are cancelled and the session invalidated, off the callers' threads.
    private let control: URLSessionControl
    /// Where streamed uploads are spooled and unread responses spill.
    private let scratchDirectory: URL
    /// Streamed request bodies up to this length are collected into memory; longer ones, and
    /// those of unknown length, are spooled to a temporary file.
    static let inMemoryUploadLimit = 1 << 20

    /// Creates a transport with its own session, built from `configuration`.
    ///
    /// - Parameters:
    ///   - configuration: the session's configuration (an ephemeral one by default: the session
    ///     keeps no cookies, cache or credentials on disk).
    ///   - responseMemoryLimit: how many bytes of a response that the reader has not read yet
    ///     are held in memory (per request); what arrives beyond them goes to an unlinked
    ///     temporary file in `scratchDirectory` until the reader catches up; a reader more than
    ///     256 MiB behind gets kind `responseTooLarge` (see the initialiser with
    ///     `responseSpillLimit`).
    ///   - scratchDirectory: where streamed uploads are spooled and unread responses spill; the
    ///     system's temporary directory by default.
    public convenience init(
        configuration: URLSessionConfiguration = .ephemeral, responseMemoryLimit: Int = 16 << 20, scratchDirectory: URL? = nil
    ) {
        self.init(
            configuration: configuration, responseMemoryLimit: responseMemoryLimit, responseSpillLimit: 256 << 20,
            scratchDirectory: scratchDirectory, pinning: PinningPolicy())
    }

    /// Creates a transport with its own session, built from `configuration`, with a limit on what
    /// a slow reader may leave unread.
    ///
    /// - Parameters:
    ///   - configuration: the session's configuration.
    ///   - responseMemoryLimit: how many bytes of a response that the reader has not read yet
    ///     are held in memory (per request); what arrives beyond them goes to an unlinked
    ///     temporary file in `scratchDirectory` until the reader catches up.
    ///   - responseSpillLimit: how many bytes of a response the reader has not read yet may wait
    ///     in memory and that file together (per request; 256 MiB by default): a reader that
    ///     falls further behind, or holds a streamed response without reading it, gets what was
    ///     buffered and then kind `responseTooLarge`, and the transfer stops — so an endless
    ///     body, or one the platform decompressed a thousandfold, cannot fill the disk. (Where
    ///     the platform can pause a transfer, on Apple platforms, the reader holds it back long
    ///     before.)
    ///   - scratchDirectory: where streamed uploads are spooled and unread responses spill; the
    ///     system's temporary directory by default.
    public convenience init(
        configuration: URLSessionConfiguration = .ephemeral, responseMemoryLimit: Int = 16 << 20, responseSpillLimit: Int,
        scratchDirectory: URL? = nil
    ) {
        self.init(
            configuration: configuration, responseMemoryLimit: responseMemoryLimit, responseSpillLimit: responseSpillLimit,
            scratchDirectory: scratchDirectory, pinning: PinningPolicy())
    }

    private init(
        configuration: URLSessionConfiguration, responseMemoryLimit: Int, responseSpillLimit: Int, scratchDirectory: URL?,
        pinning: PinningPolicy
    ) {
        self.responseMemoryLimit = max(responseMemoryLimit, 64 * 1024)
        self.responseSpillLimit = max(responseSpillLimit, self.responseMemoryLimit)
        self.scratchDirectory = scratchDirectory ?? FileManager.default.temporaryDirectory
        self.pinning = pinning
        let configuration = Self.sealed(configuration)
        let control = URLSessionControl()
        self.control = control
        let delegate = SessionDelegate(pinning: pinning, control: control)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        self.delegate = delegate
        self.session = Locked(URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue))
    }

    deinit {
        self.shutdown()
    }

    /// Calls `hook` with a task's exchange when the platform asks whether to follow a redirect,
    /// before it is answered (tests: to cancel the request at that moment).
    func whenAskedAboutARedirect(_ hook: @escaping @Sendable (URLSessionExchange) -> Void) {
        self.delegate.redirectAsked.withLock { $0 = hook }
    }

    /// Waits until everything asked of the control queue so far has run (tests).
    func waitForControl() {
        let done = DispatchSemaphore(value: 0)
        self.control.run { done.signal() }
        done.wait()
    }

    /// The content codings the platform's URLSession removes from a response body itself.
    #if canImport(FoundationNetworking)
    static let platformDecodedCodings: Set<String> = ["gzip", "x-gzip", "deflate", "br", "zstd"]
    #else
    static let platformDecodedCodings: Set<String> = ["gzip", "x-gzip", "deflate", "br"]
    #endif

    /// Shuts the transport down: cancels every task still running and releases the session and
    /// its connections. The transport cannot be used afterwards (a request then fails with kind
    /// `transport`, "the transport is shut down", and is not retried; so does a request still
    /// running, unless its caller cancelled it first). Dropping the last reference does the same.
    ///
    /// Returns at once: the session is invalidated on the serial queue every URLSession transport shares, as on
    /// Linux that waits for any name lookup a cancelled task still runs.
    public func shutdown() {
        let session = self.session.withLock { session in
            defer { session = nil }
            return session
        }
        if let session { self.control.invalidate(session) }
    }

    /// A copy of `configuration` with the platform's own cookie, cache and credential handling
    /// turned off (package access: the benchmark's raw URLSession side is configured the same).
    package static func sealed(_ configuration: URLSessionConfiguration) -> URLSessionConfiguration {
        // `copy()` keeps every other setting the app made (timeouts, proxies, headers, limits).
        let sealed = (configuration.copy() as? URLSessionConfiguration) ?? configuration
        sealed.httpCookieStorage = nil
        sealed.httpShouldSetCookies = false
        sealed.httpCookieAcceptPolicy = .never
        sealed.urlCache = nil
        sealed.urlCredentialStorage = nil
        sealed.requestCachePolicy = .reloadIgnoringLocalCacheData
        #if canImport(FoundationNetworking)
        // FoundationNetworking turns the idle timeout into whole milliseconds through an Int
        // of seconds: an infinite or huge one traps, and one under a second becomes none at
        // all and fails every request at once. Courier's deadlines bound a request's time, so
        // the idle timeout is kept between 1 s and 10^9 s (about 31 years).
        sealed.timeoutIntervalForRequest = Self.idleTimeout(sealed.timeoutIntervalForRequest)
        #endif
        return sealed
    }

    /// `seconds` as an idle timeout FoundationNetworking can take: 1…10^9 when positive (not a
    /// number and infinity are 10^9); zero and below as they are.
    static func idleTimeout(_ seconds: TimeInterval) -> TimeInterval {
        if seconds.isNaN || seconds > 1e9 { return 1e9 }
        return seconds > 0 ? max(seconds, 1) : seconds
    }

    /// Sends the request with a data task of the session.
    public func send(_ request: Request) async throws -> RawResponse {
        guard let url = request.url else {
            throw CourierError.invalidRequest("the request has no valid URL")
        }
        // FoundationNetworking refuses a GET with a body (`NSURLErrorDataLengthExceedsMaximum`,
        // nothing sent), which would read as a failed connection and be retried: refused here,
        // on every platform alike, as what it is.
        if request.head.method == .get, let body = request.body, body.length != 0 {
            throw CourierError.invalidRequest("URLSessionTransport cannot send a GET with a body; AsyncHTTPClientTransport can")
        }
        if !self.pinning.isEmpty, let host = url.host, url.scheme?.lowercased() != "https",
            // As on AsyncHTTPClient: a pin for `host:443` covers `http://host/` too (the host is
            // pinned where it speaks TLS, and must not be reached in clear text).
            self.pinning.pins(for: host, port: url.port ?? 443) != nil
        {
            try TransportRules.refuseCleartext(toPinnedHost: host, scheme: url.scheme)
        }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.head.method.rawValue
        // Courier's own cache decides; the platform's cache must neither answer nor revalidate.
        urlRequest.cachePolicy = .reloadIgnoringLocalCacheData
        try TransportRules.wireFields(of: request) { name, value in urlRequest.addValue(value, forHTTPHeaderField: name) }
        // The platform asks for the codings it decodes, and decodes the answer itself, when the
        // request names none: Courier names them whenever it decodes, so a request without one
        // (decompression off) asks for none, and gets the body as the server sent it.
        if !request.head.headerFields.contains(.acceptEncoding) {
            urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        // The pipeline's deadline stage ends the exchange at the request's deadline (head and
        // body); the session's own timeout stays an idle timeout, so a long stream is not cut.
        // A body in memory (or a short stream) is sent from memory; a longer stream is written
        // to a temporary file chunk by chunk and sent from there, so memory stays bounded.
        var spool: URL?
        if let body = request.body {
            // `sentBytes`: bytes in memory, also when wrapped in a stream to report progress.
            if body.sentBytes != nil || (body.length ?? .max) <= Self.inMemoryUploadLimit {
                urlRequest.httpBody = try await body.claimCollected()
            } else {
                spool = try await Self.spool(body, in: self.scratchDirectory)
            }
            #if canImport(FoundationNetworking)
            // FoundationNetworking labels a `POST` body without a type as a form.
            if urlRequest.value(forHTTPHeaderField: "Content-Type") == nil {
                urlRequest.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
            }
            #endif
        }
        let spooled = spool
        let removeSpooled = { @Sendable in if let spooled { try? FileManager.default.removeItem(at: spooled) } }
        do {
            try Task.checkCancellation()
        } catch {
            removeSpooled()
            throw error
        }

        let exchange = URLSessionExchange(
            memoryLimit: self.responseMemoryLimit, unreadLimit: self.responseSpillLimit, scratchDirectory: self.scratchDirectory,
            bufferFailures: self.bufferFailures,
            control: self.control, bodyFile: spooled, onComplete: removeSpooled)
        // The task is made and registered on the control queue, ahead of any invalidation a
        // later shutdown asks for there, so that shutdown still finds it (and it removes the
        // spooled file). The lock is not held while it is made: on Linux making a task can wait
        // for a name lookup, and `shutdown()` must not wait for the lock as long.
        let (sessions, delegate, prepared) = (self.session, self.delegate, urlRequest)
        let head: HTTPURLResponse = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                exchange.awaitHead(continuation)
                exchange.start {
                    guard let session = sessions.withLock({ $0 }) else {
                        throw CourierError.transportShutDown()
                    }
                    let task: URLSessionDataTask =
                        if let spooled {
                            Self.uploadTask(in: session, with: prepared, fromFile: spooled)
                        } else {
                            session.dataTask(with: prepared)
                        }
                    delegate.register(exchange, for: task)
                    return task
                }
            }
        } onCancel: {
            exchange.cancel()
        }
        var fields = HTTPFields()
        for (name, value) in head.allHeaderFields {
            guard let name = HTTPField.Name("\(name)") else { continue }
            if name == .setCookie {
                // The platform joins several Set-Cookie fields with ","; each is a field again.
                for cookie in Self.splitSetCookie("\(value)") { fields.append(HTTPField(name: name, value: cookie)) }
            } else {
                fields.append(HTTPField(name: name, value: "\(value)"))
            }
        }
        // A status the platform passed on from a broken status line is a malformed response, not
        // a crash. The platform does not report the server's reason phrase: the standard one for
        // the code, as the other transport gives for well-behaved servers.
        let status: HTTPResponse.Status
        do {
            status = try StatusCode.checked(head.statusCode)
        } catch {
            exchange.cancel()
            throw error
        }
        // The announced length as the other transport's parser reads it (the platform reads a
        // value too large for it as none, and `2x` as 2, then hands up what arrived as the body).
        var expected: Int?
        do {
            try TransportRules.refuseFraming(fields)
            expected = try fields[.contentLength].map(TransportRules.announcedLength)
        } catch {
            exchange.cancel()
            throw error
        }
        // URLSession decodes gzip, deflate and br itself (and zstd on Linux, where libcurl does
        // the decoding) but keeps the header fields: drop them, so the body handed up is what
        // they describe. A response without content (to HEAD, 1xx, 204, 304) keeps them, as on
        // the other transport: they describe the representation, which a HEAD caller asks for.
        let hasContent = request.head.method != .head && status.code >= 200 && status.code != 204 && status.code != 304
        var decoded = false
        if hasContent, let coding = fields[.contentEncoding], Self.isPlatformDecoded(coding) {
            fields[.contentEncoding] = nil
            fields[.contentLength] = nil
            expected = nil
            decoded = true
        }
        let chunks = exchange.chunks
        let body = ByteStream.readOnce(onCancel: {
            exchange.cancel()
        }) {
            return {
                let chunk = try await withTaskCancellationHandler {
                    try await chunks.next()
                } onCancel: {
                    exchange.cancel()
                }
                if chunk != nil { exchange.consumed() }
                return chunk
            }
        }
        // Cleartext is HTTP/1.1 (neither platform speaks h2c); over TLS either may have been negotiated.
        let version: HTTPVersion = url.scheme?.lowercased() == "http" ? .http1_1 : .unknown
        var response = RawResponse(
            head: HTTPResponse(status: status, headerFields: fields), body: .stream(body, expectedLength: expected), version: version,
            url: head.url ?? url)
        response.decodedByPlatform = decoded
        return response
    }

    /// Whether the platform decoded a body of this `Content-Encoding`: one coding it decodes,
    /// with any number of `identity` (which libcurl passes over, as the decoding stage does).
    /// Several codings are left to the decoding stage, which refuses them as on the other transport.
    package static func isPlatformDecoded(_ contentEncoding: String) -> Bool {
        let codings = FieldText.split(contentEncoding, at: ",").map { FieldText.token($0) }.filter { !$0.isEmpty && $0 != "identity" }
        return codings.count == 1 && Self.platformDecodedCodings.contains(codings[0])
    }

    /// A task that sends `request` with the spooled body in `file`.
    ///
    /// On Linux the file is sent as a stream read in libcurl's own callback (chunked on HTTP/1.1,
    /// without `Content-Length`): FoundationNetworking reads a body given as a file on a queue of
    /// its own, pausing the transfer until each chunk has been read, and resumes it without
    /// looking whether the task was cancelled meanwhile, so a long upload cancelled on its way
    /// crashed the process ("libcurl.Easy Code=43" in three runs of three of
    /// `TransportMemoryTests.spooledUploadsCancelledOnTheirWayEndCancelledAndLeaveNoFile`). It
    /// frames every stream as chunked and would send a `Content-Length` beside it if one were
    /// given, which a sender MUST NOT (RFC 9112 §6.2), so none is.
    static func uploadTask(in session: URLSession, with request: URLRequest, fromFile file: URL) -> URLSessionDataTask {
        #if canImport(FoundationNetworking)
        var streamed = request
        streamed.setValue(nil, forHTTPHeaderField: "Content-Length")
        streamed.httpBodyStream = InputStream(url: file)
        return session.dataTask(with: streamed)
        #else
        return session.uploadTask(with: request, fromFile: file)
        #endif
    }

    /// Writes a streamed body to a new temporary file, chunk by chunk; the caller removes it.
    static func spool(_ body: RequestBody, in directory: URL) async throws -> URL {
        let url = directory.appendingPathComponent("courier-upload-\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw CourierError.transport("the request body could not be spooled: cannot create a file in \(directory.path)")
        }
        guard let handle = try? FileHandle(forWritingTo: url) else {
            try? FileManager.default.removeItem(at: url)
            throw CourierError.transport("the request body could not be spooled: cannot write to a file in \(directory.path)")
        }
        do {
            defer { try? handle.close() }
            for try await chunk in try body.claim() {
                try Task.checkCancellation()
                do {
                    try handle.write(contentsOf: chunk)
                } catch {
                    throw CourierError.transport(
                        "the request body could not be spooled to \(directory.path): \(error.localizedDescription)", underlying: error)
                }
            }
        } catch {
            try? FileManager.default.removeItem(at: url)
            throw error
        }
        return url
    }
}
