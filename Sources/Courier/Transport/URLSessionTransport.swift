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
/// cookie storage, no URL cache and no credential storage (Courier's cache and auth decide), and
/// an authentication challenge (`401` with `WWW-Authenticate: Basic` or `Digest`) is answered
/// without a credential, so the `401` comes back as a response for the auth middleware and the
/// status check to see. The platform's proxy settings apply: the system's on Apple platforms
/// (with the configuration's `connectionProxyDictionary`), libcurl's on Linux — the `http_proxy`,
/// `https_proxy` and `no_proxy` environment variables (FoundationNetworking does not apply
/// `connectionProxyDictionary`). Courier itself never reads proxy variables.
///
/// The version is `HTTP/1.1` for cleartext `http` and ``HTTPVersion/unknown`` over TLS, where
/// the platform may negotiate HTTP/2 without saying so when the head arrives.
///
/// A streamed request body longer than 1 MiB (or of unknown length) is written to a temporary
/// file chunk by chunk and sent from it with an upload task, so memory stays bounded whatever its
/// size; it is sent only once the whole stream has been read (its progress therefore reports the
/// spooling, not the wire). On Linux FoundationNetworking
/// adds `Accept-Language` (from the process's locale), `User-Agent`, `Accept: */*` and
/// `Connection: keep-alive` to requests that do not set them, and cannot be told not to (an empty
/// value is sent as an empty field); the pipeline, its cache's `Vary` checks included, does not
/// see them. On Linux
/// (FoundationNetworking, libcurl underneath) there is no server-trust challenge, so TLS pinning is
/// not available, and HTTP/1.1 connections are reused less than keep-alive allows: for HTTP/2 and
/// pinning use `AsyncHTTPClientTransport`. Nor is there a per-session CA bundle: the session
/// trusts the system's roots only (FoundationNetworking reads `URLSessionCertificateAuthorityInfoFile`
/// on Android only), so a server with a private CA fails with kind `tls` (`untrustedIssuer`). The response body is delivered by
/// the session as it arrives; ``ResponseBody/collect(upTo:deadline:)`` cancels the task as soon as the
/// size limit is passed. What the reader has not read yet is held in memory up to
/// `responseMemoryLimit` (16 MiB by default) and beyond it in an unlinked temporary file, so a
/// reader slower than the network costs disk, not memory. On Apple platforms the task is
/// moreover suspended once 8 MiB wait unread and resumed below 2 MiB (not compiled or tested
/// here); on Linux FoundationNetworking traps when a running task is suspended, so there the
/// network is not slowed down and the file takes what the reader has not caught up with.
public final class URLSessionTransport: Transport {
    /// The session, until ``shutdown()`` lets it go: a task made in an invalidated session is a
    /// crash on Apple platforms, so tasks are made under this lock and never after it. Letting
    /// go matters on Linux too: FoundationNetworking closes its idle keep-alive connections
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
        self.init(configuration: configuration, responseMemoryLimit: 16 << 20, scratchDirectory: nil, pinning: pinning)
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
    ///     temporary file in `scratchDirectory` until the reader catches up.
    ///   - scratchDirectory: where streamed uploads are spooled and unread responses spill; the
    ///     system's temporary directory by default.
    public convenience init(
        configuration: URLSessionConfiguration = .ephemeral, responseMemoryLimit: Int = 16 << 20, scratchDirectory: URL? = nil
    ) {
        self.init(
            configuration: configuration, responseMemoryLimit: responseMemoryLimit, scratchDirectory: scratchDirectory,
            pinning: PinningPolicy())
    }

    private init(configuration: URLSessionConfiguration, responseMemoryLimit: Int, scratchDirectory: URL?, pinning: PinningPolicy) {
        self.responseMemoryLimit = max(responseMemoryLimit, 64 * 1024)
        self.scratchDirectory = scratchDirectory ?? FileManager.default.temporaryDirectory
        self.pinning = pinning
        let configuration = Self.sealed(configuration)
        let delegate = SessionDelegate(pinning: pinning)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        self.delegate = delegate
        self.session = Locked(URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue))
    }

    deinit {
        self.session.withLock { $0 }?.invalidateAndCancel()
    }

    /// The content codings the platform's URLSession removes from a response body itself.
    #if canImport(FoundationNetworking)
    static let platformDecodedCodings: Set<String> = ["gzip", "x-gzip", "deflate", "br", "zstd"]
    #else
    static let platformDecodedCodings: Set<String> = ["gzip", "x-gzip", "deflate", "br"]
    #endif

    /// Shuts the transport down: cancels every task still running and releases the session and
    /// its connections. The transport cannot be used afterwards (a request then fails with kind
    /// `transport`). Dropping the last reference does the same.
    public func shutdown() {
        let session = self.session.withLock { session in
            defer { session = nil }
            return session
        }
        session?.invalidateAndCancel()
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
        return sealed
    }

    /// Sends the request with a data task of the session.
    public func send(_ request: Request) async throws -> RawResponse {
        guard let url = request.url else {
            throw CourierError.invalidRequest("the request has no valid URL")
        }
        if !self.pinning.isEmpty, let host = url.host, url.scheme?.lowercased() != "https",
            self.pinning.pins(for: host, port: url.port ?? 80) != nil
        {
            throw CourierError.invalidRequest("\(host) is pinned and must be reached over https")
        }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.head.method.rawValue
        // Courier's own cache decides; the platform's cache must neither answer nor revalidate.
        urlRequest.cachePolicy = .reloadIgnoringLocalCacheData
        for field in request.head.headerFields where field.name != .cookie {
            urlRequest.addValue(field.value, forHTTPHeaderField: field.name.rawName)
        }
        // One `Cookie` field, its cookies joined by "; " (RFC 6265 §5.4), not by the "," addValue uses.
        if let cookie = request.head.headerFields[.cookie] {
            urlRequest.setValue(cookie, forHTTPHeaderField: "Cookie")
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
            if let contentType = body.contentType, request.head.headerFields[.contentType] == nil {
                urlRequest.setValue(contentType, forHTTPHeaderField: "Content-Type")
            }
        }
        let spooled = spool
        let removeSpooled = { @Sendable in if let spooled { try? FileManager.default.removeItem(at: spooled) } }
        do {
            try Task.checkCancellation()
        } catch {
            removeSpooled()
            throw error
        }

        // The exchange is registered under the same lock that makes the task, so a shutdown
        // that cancels the task at once still finds it (and it removes the spooled file).
        let (memoryLimit, scratch, delegate) = (self.responseMemoryLimit, self.scratchDirectory, self.delegate)
        let task: URLSessionDataTask
        let exchange: Exchange
        do {
            (task, exchange) = try self.session.withLock { session in
                guard let session else { throw CourierError(.transport, "the URLSession transport is shut down") }
                let task: URLSessionDataTask =
                    if let spooled { session.uploadTask(with: urlRequest, fromFile: spooled) } else { session.dataTask(with: urlRequest) }
                let exchange = Exchange(
                    task: task, memoryLimit: memoryLimit, scratchDirectory: scratch, bufferFailures: self.bufferFailures,
                    onComplete: removeSpooled)
                delegate.register(exchange, for: task)
                return (task, exchange)
            }
        } catch {
            removeSpooled()
            throw error
        }
        let head: HTTPURLResponse = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                exchange.awaitHead(continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
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
            task.cancel()
            throw error
        }
        var expected = head.expectedContentLength >= 0 ? Int(head.expectedContentLength) : nil
        // URLSession decodes gzip, deflate and br itself (and zstd on Linux, where libcurl does
        // the decoding) but keeps the header fields: drop them, so the body handed up is what
        // they describe.
        if let coding = fields[.contentEncoding]?.lowercased(),
            Self.platformDecodedCodings.contains(coding.trimmingCharacters(in: .whitespaces))
        {
            fields[.contentEncoding] = nil
            fields[.contentLength] = nil
            expected = nil
        }
        let chunks = exchange.chunks
        let body = ByteStream(onCancel: {
            task.cancel()
            chunks.discard(throwing: CourierError.cancelled())
        }) {
            return {
                let chunk = try await withTaskCancellationHandler {
                    try await chunks.next()
                } onCancel: {
                    task.cancel()
                    chunks.discard(throwing: CourierError.cancelled())
                }
                if chunk != nil { exchange.consumed() }
                return chunk
            }
        }
        // Cleartext is HTTP/1.1 (neither platform speaks h2c); over TLS either may have been negotiated.
        let version: HTTPVersion = url.scheme?.lowercased() == "http" ? .http1_1 : .unknown
        return RawResponse(
            head: HTTPResponse(status: status, headerFields: fields), body: .stream(body, expectedLength: expected), version: version,
            url: head.url ?? url)
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

    static func mapError(_ error: any Error) -> CourierError {
        let nsError = error as NSError
        guard nsError.domain == NSURLErrorDomain else { return .transport(String(describing: error), underlying: error) }
        switch nsError.code {
        case NSURLErrorCancelled: return .cancelled(underlying: error)
        case NSURLErrorTimedOut: return .timeout(underlying: error)
        case NSURLErrorServerCertificateUntrusted, NSURLErrorServerCertificateHasBadDate, NSURLErrorServerCertificateHasUnknownRoot,
            NSURLErrorServerCertificateNotYetValid, NSURLErrorSecureConnectionFailed, NSURLErrorClientCertificateRejected,
            NSURLErrorClientCertificateRequired:
            let reason = Self.tlsReason(nsError)
            var mapped = CourierError(
                .tls,
                "the TLS handshake failed\(reason.flatMap { $0 == .handshakeFailure ? nil : ": \($0)" } ?? "") (\(nsError.localizedDescription))",
                underlying: error)
            mapped.tlsReason = reason
            return mapped
        case NSURLErrorNetworkConnectionLost:
            return .transport("the connection was closed before the response completed", underlying: error)
        default:
            // FoundationNetworking passes most libcurl TLS failures on as NSURLErrorUnknown with
            // libcurl's text ("SSL certificate problem: …"): still a TLS failure, never `transport`.
            // libcurl decodes gzip and deflate itself on Linux; a body it cannot decode is the
            // same failure as on the other transport: kind `decoding`, not `transport`.
            if Self.isContentCodingText(nsError) {
                return CourierError(
                    .decoding, "the response's content coding could not be decoded (\(nsError.localizedDescription))", underlying: error)
            }
            if Self.isTLSText(nsError) {
                let reason = Self.tlsReason(nsError)
                var mapped = CourierError(
                    .tls,
                    "the TLS handshake failed\(reason.flatMap { $0 == .handshakeFailure ? nil : ": \($0)" } ?? "") (\(nsError.localizedDescription))",
                    underlying: error)
                mapped.tlsReason = reason
                return mapped
            }
            return .transport(nsError.localizedDescription, underlying: error)
        }
    }
}

extension URLSessionTransport {
    /// Why a TLS connection failed, from what the platform says: the error code where it is
    /// specific (`…HasBadDate`, `…NotYetValid`, `…HasUnknownRoot`), else the Secure Transport
    /// status Apple platforms attach, else libcurl's wording (FoundationNetworking on Linux);
    /// `nil` when none of them tells.
    /// Whether libcurl's text says the failure is TLS's: a certificate problem, a failed TLS
    /// connect, or OpenSSL's own error.
    static func isTLSText(_ error: NSError) -> Bool {
        let text = Self.texts(of: error).lowercased()
        return [
            "ssl certificate problem", "ssl: ", "ssl_connect", "ssl routines", "ssl connect error", "tls connect error",
            "ssl peer certificate",
        ]
        .contains { text.contains($0) }
    }

    /// The `Set-Cookie` values the platform joined with ",": split at a comma followed by a new
    /// `name=value` (not at the comma inside an `Expires` date such as `Wed, 09 Jun 2021`).
    static func splitSetCookie(_ joined: String) -> [String] {
        var values: [String] = []
        var current = ""
        var rest = Substring(joined)
        while let comma = rest.firstIndex(of: ",") {
            let following = rest[rest.index(after: comma)...]
            let nextToken = following.prefix { $0 != ";" && $0 != "," }
            current += rest[..<comma]
            let name = nextToken.firstIndex(of: "=").map { nextToken[..<$0].trimmingCharacters(in: .whitespaces) } ?? ""
            if !name.isEmpty, !name.contains(" ") {
                values.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
            } else {
                current += ","
            }
            rest = following
        }
        current += rest
        let last = current.trimmingCharacters(in: .whitespaces)
        if !last.isEmpty { values.append(last) }
        return values
    }

    /// Whether libcurl's text says the body's content coding could not be decoded (corrupt
    /// data, or a coding it does not know).
    static func isContentCodingText(_ error: NSError) -> Bool {
        let text = Self.texts(of: error).lowercased()
        return ["error while processing content unencoding", "unrecognized or bad http content or transfer-encoding"].contains {
            text.contains($0)
        }
    }

    /// The error's description and those of the errors and strings in its user info.
    private static func texts(of error: NSError) -> String {
        var texts = [error.localizedDescription]
        for value in error.userInfo.values {
            if let text = value as? String { texts.append(text) }
            if let inner = value as? NSError { texts.append(inner.localizedDescription) }
        }
        return texts.joined(separator: " ")
    }

    static func tlsReason(_ error: NSError) -> TLSFailureReason? {
        switch error.code {
        case NSURLErrorServerCertificateHasBadDate: return .expired
        case NSURLErrorServerCertificateNotYetValid: return .notYetValid
        case NSURLErrorServerCertificateHasUnknownRoot: return .untrustedIssuer
        case NSURLErrorClientCertificateRejected, NSURLErrorClientCertificateRequired: return .handshakeFailure
        default: break
        }
        // Secure Transport statuses (SecureTransport.h): errSSLCertExpired, errSSLCertNotYetValid,
        // errSSLXCertChainInvalid, errSSLUnknownRootCert, errSSLNoRootCert, errSSLHostNameMismatch.
        if let status = error.userInfo["_kCFStreamErrorCodeKey"] as? Int {
            switch status {
            case -9814: return .expired
            case -9815: return .notYetValid
            case -9807, -9812, -9813: return .untrustedIssuer
            case -9843: return .hostnameMismatch
            default: break
            }
        }
        let text = Self.texts(of: error).lowercased()
        let wordings: [(String, TLSFailureReason)] = [
            ("certificate has expired", .expired), ("certificate is not yet valid", .notYetValid),
            ("self-signed certificate", .untrustedIssuer), ("self signed certificate", .untrustedIssuer),
            ("unable to get local issuer certificate", .untrustedIssuer), ("unable to get issuer certificate", .untrustedIssuer),
            ("no alternative certificate subject name matches", .hostnameMismatch), ("does not match target host name", .hostnameMismatch),
        ]
        if let match = wordings.first(where: { text.contains($0.0) }) { return match.1 }
        if error.code == NSURLErrorSecureConnectionFailed { return .handshakeFailure }
        // libcurl's other TLS failures: a failed connect, OpenSSL's own errors.
        if ["ssl_connect", "ssl routines", "ssl connect error", "tls connect error"].contains(where: { text.contains($0) }) {
            return .handshakeFailure
        }
        return nil
    }
}

/// The state of one data task: the head continuation and the body chunks.
private final class Exchange: Sendable {
    let task: URLSessionDataTask
    /// The body chunks delivered and not yet read: in memory up to the transport's limit, the
    /// rest in a temporary file (FoundationNetworking cannot suspend a running task).
    let chunks: SpillBuffer
    /// Runs once the task has completed (removes a spooled upload).
    private let onComplete: @Sendable () -> Void
    /// The transport's count of bodies that could not be buffered.
    private let bufferFailures: Locked<Int>
    private let head = Locked<HeadState>(.waiting(nil))
    /// Whether the task is suspended because too much waits unread (Apple platforms).
    private let paused = Locked(false)
    static let highWater = 8 << 20
    static let lowWater = 2 << 20
    /// The `401` of an authentication challenge answered without a credential (Linux).
    private let challengeResponse = Locked<HTTPURLResponse?>(nil)
    /// Why the server's trust was refused by the pins (Apple platforms), when it was.
    private let trustRejection = Locked<CourierError?>(nil)

    enum HeadState {
        case waiting(CheckedContinuation<HTTPURLResponse, any Error>?)
        /// The task ended (or answered) before anyone waited: kept for the waiter to come.
        case ended(Result<HTTPURLResponse, any Error>)
        case done
    }

    init(
        task: URLSessionDataTask, memoryLimit: Int, scratchDirectory: URL, bufferFailures: Locked<Int>,
        onComplete: @escaping @Sendable () -> Void
    ) {
        self.task = task
        self.chunks = SpillBuffer(memoryLimit: memoryLimit, directory: scratchDirectory)
        self.bufferFailures = bufferFailures
        self.onComplete = onComplete
    }

    func awaitHead(_ continuation: CheckedContinuation<HTTPURLResponse, any Error>) {
        let ended: Result<HTTPURLResponse, any Error>? = self.head.withLock { state in
            if case .ended(let result) = state {
                state = .done
                return result
            }
            state = .waiting(continuation)
            return nil
        }
        if let ended { continuation.resume(with: ended) }
    }

    func received(response: HTTPURLResponse) {
        self.resumeHead(.success(response))
    }

    func received(data: Data) {
        do {
            try self.chunks.push(data)
        } catch {
            // The disk is full, or the directory cannot be written: the reader gets the error.
            self.bufferFailures.withLock { $0 += 1 }
            self.task.cancel()
        }
        #if canImport(Darwin)
        // A reader slower than the network: above the high-water mark the task is suspended
        // (the platform stops reading from the socket) until the reader has caught up.
        let unread = self.chunks.unread
        let pause = self.paused.withLock { paused -> Bool in
            guard !paused, unread > Self.highWater else { return false }
            paused = true
            return true
        }
        if pause { self.task.suspend() }
        #endif
        // FoundationNetworking traps when a running data task is suspended (measured: a fatal
        // error in NativeProtocol), so on Linux what the reader has not read goes to the buffer
        // (and its file) only.
    }

    /// The reader took a chunk: below the low-water mark a suspended task goes on.
    func consumed() {
        #if canImport(Darwin)
        let unread = self.chunks.unread
        let resume = self.paused.withLock { paused -> Bool in
            guard paused, unread < Self.lowWater else { return false }
            paused = false
            return true
        }
        if resume { self.task.resume() }
        #endif
    }

    /// The platform asked for a credential, and none is given: the task ends, and `response`
    /// (the 401 that asked) is the answer.
    func challenged(by response: HTTPURLResponse?) {
        self.challengeResponse.withLock { $0 = response }
    }

    /// The pins refused the server's certificate: the task is cancelled, and this is its error.
    func rejectedTrust(_ error: CourierError) {
        self.trustRejection.withLock { $0 = error }
    }

    func completed(error: (any Error)?) {
        self.onComplete()
        if error != nil, let rejection = self.trustRejection.withLock({ $0 }) {
            self.resumeHead(.failure(rejection))
            self.chunks.finish(throwing: rejection)
            return
        }
        if let error, (error as NSError).domain == NSURLErrorDomain, (error as NSError).code == NSURLErrorCancelled,
            let challenge = self.challengeResponse.withLock({ $0 })
        {
            // The cancellation was ours, answering the challenge: the 401 is the response.
            self.resumeHead(.success(challenge))
            self.chunks.finish()
            return
        }
        if let error {
            let mapped = URLSessionTransport.mapError(error)
            self.resumeHead(.failure(mapped))
            self.chunks.finish(throwing: mapped)
        } else {
            self.resumeHead(.failure(CourierError.transport("the response ended without a head")))
            self.chunks.finish()
        }
    }

    private func resumeHead(_ result: Result<HTTPURLResponse, any Error>) {
        let continuation: CheckedContinuation<HTTPURLResponse, any Error>? = self.head.withLock { state in
            switch state {
            case .waiting(let continuation?):
                state = .done
                return continuation
            case .waiting(nil):
                state = .ended(result)
                return nil
            case .ended, .done:
                return nil
            }
        }
        continuation?.resume(with: result)
    }
}

/// Routes the session's callbacks to the exchange of each task.
private final class SessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    private let exchanges = Locked<[Int: Exchange]>([:])
    private let pinning: PinningPolicy

    init(pinning: PinningPolicy) {
        self.pinning = pinning
    }

    func register(_ exchange: Exchange, for task: URLSessionTask) {
        self.exchanges.withLock { $0[task.taskIdentifier] = exchange }
    }

    private func exchange(for task: URLSessionTask) -> Exchange? {
        self.exchanges.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        if let http = response as? HTTPURLResponse {
            self.exchange(for: dataTask)?.received(response: http)
            completionHandler(.allow)
        } else {
            completionHandler(.cancel)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        self.exchange(for: dataTask)?.received(data: data)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }

    /// Challenges: the server's trust is the platform's to judge (default handling); any other
    /// (Basic, Digest, NTLM, a client certificate) is answered without a credential, so the
    /// `401` (or the handshake's failure) reaches the pipeline instead of the task waiting forever.
    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        #if canImport(Darwin)
        // Apple platforms (not compiled here): the system judges the server's trust, and a
        // pinned host's pins are checked on top; any other protection space is rejected, so no
        // system credential (Negotiate, NTLM) is offered and the 401 is delivered.
        let space = challenge.protectionSpace
        if space.authenticationMethod == NSURLAuthenticationMethodServerTrust {
            guard !self.pinning.isEmpty else {
                completionHandler(.performDefaultHandling, nil)
                return
            }
            guard let trust = space.serverTrust else {
                self.exchange(for: task)?.rejectedTrust(
                    ServerTrustPinning.anchorMismatch(host: space.host, detail: "the platform gave no server trust to evaluate"))
                completionHandler(.cancelAuthenticationChallenge, nil)
                return
            }
            switch ApplePinning.check(trust, host: space.host, port: space.port, policy: self.pinning) {
            case .unpinned:
                completionHandler(.performDefaultHandling, nil)
            case .passed:
                completionHandler(.useCredential, URLCredential(trust: trust))
            case .refused(let refusal):
                self.exchange(for: task)?.rejectedTrust(refusal)
                completionHandler(.cancelAuthenticationChallenge, nil)
            }
        } else {
            completionHandler(.rejectProtectionSpace, nil)
        }
        #else
        // FoundationNetworking waits forever on default handling without a stored credential and
        // has no "continue without credential": the task is cancelled, and its exchange answers
        // with the 401 the challenge carries (its body, as far as it had arrived).
        self.exchange(for: task)?.challenged(by: challenge.failureResponse as? HTTPURLResponse)
        completionHandler(.cancelAuthenticationChallenge, nil)
        #endif
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let exchange = self.exchanges.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        exchange?.completed(error: error)
    }
}

#if canImport(Security) && canImport(Darwin)
/// The Security-framework side of pinning on Apple platforms (not compiled or tested on Linux):
/// the system evaluates the chain — against only the pinned authorities when a host has some —
/// and the shared ``ServerTrustPinning`` code checks the leaf's public key.
///
/// As the AsyncHTTPClient transport's verifier does, a connection is checked against every
/// pinned host its certificate is valid for, not only the host the challenge names: the system
/// may carry another host's requests over it (HTTP/2 connection coalescing) without a new
/// challenge.
private enum ApplePinning {
    enum Outcome {
        /// No pinned host is concerned: the system's default handling decides.
        case unpinned
        case passed
        case refused(CourierError)
    }

    static func check(_ trust: SecTrust, host: String, port: Int, policy: PinningPolicy) -> Outcome {
        let chain = (SecTrustCopyCertificateChain(trust) as? [SecCertificate]) ?? []
        var concerned: [(host: String, pins: Set<TLSPin>)] = []
        if let pins = policy.pins(for: host, port: port) { concerned.append((host, pins)) }
        let challenged = policy.matchingKey(for: host, port: port)
        for (key, pins) in policy.pins where key != challenged {
            let (pattern, keyPort) = PinningPolicy.split(key)
            guard keyPort == nil || keyPort == port else { continue }
            // A wildcard pin concerns the certificate if it is valid for a name the wildcard covers.
            let name = pattern.hasPrefix("*.") ? "courier-pin-probe" + pattern.dropFirst(1) : pattern
            if Self.evaluate(chain, for: name, anchors: nil) == nil { concerned.append((name, pins)) }
        }
        guard !concerned.isEmpty else { return .unpinned }
        for (name, pins) in concerned {
            let anchorTexts = PinningPolicy.anchors(in: pins)
            let anchors =
                anchorTexts.isEmpty
                ? nil
                : anchorTexts.flatMap(ServerTrustPinning.certificates(inPEM:)).compactMap {
                    SecCertificateCreateWithData(nil, $0 as CFData)
                }
            if let failure = Self.evaluate(chain, for: name, anchors: anchors) {
                if anchors != nil { return .refused(ServerTrustPinning.anchorMismatch(host: name, detail: failure)) }
                var error = CourierError(.tls, "the TLS handshake failed: \(failure)")
                error.tlsReason = .untrustedIssuer
                return .refused(error)
            }
            let leaf = chain.first.map { SecCertificateCopyData($0) as Data }
            if let refusal = ServerTrustPinning.verdict(pins: pins, host: name, leafCertificate: leaf) { return .refused(refusal) }
        }
        // The host the challenge names must pass the system's own evaluation too.
        if policy.pins(for: host, port: port) == nil, let failure = Self.evaluate(chain, for: host, anchors: nil) {
            var error = CourierError(.tls, "the TLS handshake failed: \(failure)")
            error.tlsReason = .untrustedIssuer
            return .refused(error)
        }
        return .passed
    }

    /// Evaluates `chain` for `host` in a trust object of its own (with only `anchors` as roots
    /// when given): `nil` when trusted, else why not. Any call that fails is a refusal, so a
    /// pinned authority can never fall back to the system's roots.
    static func evaluate(_ chain: [SecCertificate], for host: String, anchors: [SecCertificate]?) -> String? {
        guard !chain.isEmpty else { return "the server presented no certificate" }
        var made: SecTrust?
        guard SecTrustCreateWithCertificates(chain as CFArray, SecPolicyCreateSSL(true, host as CFString), &made) == errSecSuccess,
            let trust = made
        else {
            return "the chain could not be evaluated"
        }
        if let anchors {
            guard !anchors.isEmpty,
                SecTrustSetAnchorCertificates(trust, anchors as CFArray) == errSecSuccess,
                SecTrustSetAnchorCertificatesOnly(trust, true) == errSecSuccess
            else { return "the pinned authorities could not be set as the only anchors" }
        }
        var failure: CFError?
        guard SecTrustEvaluateWithError(trust, &failure) else {
            return failure.map { ($0 as Error).localizedDescription } ?? "the system did not trust the chain"
        }
        return nil
    }
}
#endif
