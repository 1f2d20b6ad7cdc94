import AsyncHTTPClient
import Courier
import Foundation
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

/// A transport over AsyncHTTPClient: HTTP/1.1 and HTTP/2 (negotiated by ALPN), pooled connections,
/// streaming bodies in both directions, and custom trust.
///
/// Each transport owns one `HTTPClient`, so one connection pool: give each `Client` its own
/// transport, or share one transport between clients that talk to the same hosts. Call
/// ``shutdown()`` when done; a transport that is released without it shuts its pool down in the
/// background.
///
/// ```swift
/// let transport = AsyncHTTPClientTransport()
/// let client = Client(configuration: .init(transport: transport, baseURL: api))
/// defer { Task { try? await transport.shutdown() } }
/// ```
public final class AsyncHTTPClientTransport: Transport {
    /// How the transport connects.
    public struct Configuration: Sendable {
        /// Which HTTP versions may be negotiated.
        public var httpVersion: HTTPVersionPolicy
        /// The TLS settings for every connection; `nil` uses the system trust store.
        public var tlsConfiguration: TLSConfiguration?
        /// How long establishing a connection may take.
        public var connectTimeout: Duration
        /// How long a response may go without receiving a byte, while the transport asks for
        /// one, before it fails with kind `timeout` (a paused body reader is not counted over
        /// HTTP/1.1; over HTTP/2 the limit is the connection's).
        public var readTimeout: Duration?
        /// How long an idle connection stays in the pool.
        public var idleTimeout: Duration
        /// The most HTTP/1.1 connections per host (at least 1: a smaller value counts as 1).
        public var maxConnectionsPerHost: Int
        /// TLS pins by host: public-key pins are checked on every new connection before it carries
        /// a request; certificate-authority pins replace the trust roots for that host.
        public var pinning: PinningPolicy
        /// Addresses to connect to instead of resolving a host name, like curl's `--resolve`
        /// (host → IP address; DNS pre-resolution or an HTTPDNS answer): the request keeps its URL,
        /// `Host` and TLS server name, and the certificate is still checked against the host.
        public var resolvedHosts: [String: String]
        /// The largest HTTP/2 DATA frame the server may send (SETTINGS_MAX_FRAME_SIZE): 16,384 to
        /// 16,777,215 bytes (RFC 9113 §6.5.2), a value outside brought to the nearer end; `nil`
        /// keeps the protocol's 16 KiB. Larger frames cut per-frame work on bulk bodies.
        public var http2MaxFrameSize: Int?
        /// The most bytes of one HTTP/2 stream's DATA frames joined into one body chunk when they
        /// arrive together (1 MiB by default); `nil` passes every frame on as it came.
        ///
        /// Servers pick their frame size (nginx: 8 KiB), and AsyncHTTPClient's cost per frame of a
        /// burst grows with the burst: joined, a large download over HTTP/2 runs much faster, for
        /// one copy of the bytes (measured: `Benchmarks/README.md`, "Performance choices in the code").
        public var http2ReadCoalescing: Int?
        /// The event loops the transport's connections run on; `nil` (the default) shares
        /// SwiftNIO's `MultiThreadedEventLoopGroup.singleton` on every platform, so TLS runs in
        /// SwiftNIO's own handler, where pins and TLS failures are checked and named as on Linux.
        /// (AsyncHTTPClient's own default on Apple platforms is a Network.framework group, whose
        /// TLS the transport cannot see: with public-key pins, every request over it is refused.)
        /// A server application passes its own group here.
        public var eventLoopGroup: (any EventLoopGroup)?

        /// Creates a configuration; `configure` may change any default.
        public init() {
            self.init { _ in }
        }

        /// Creates a configuration; `configure` may change any default and may throw — call
        /// ``trust(pemCertificates:)`` inside it — in which case so does this initialiser.
        public init(configure: (inout Configuration) throws -> Void) rethrows {
            self.httpVersion = .automatic
            self.tlsConfiguration = nil
            self.connectTimeout = .seconds(10)
            self.readTimeout = .seconds(30)
            self.idleTimeout = .seconds(60)
            self.maxConnectionsPerHost = 8
            self.pinning = PinningPolicy()
            self.resolvedHosts = [:]
            self.http2MaxFrameSize = 1 << 20
            self.http2ReadCoalescing = 1 << 20
            try configure(&self)
        }

        /// Trusts only the given certificate authorities (PEM), in addition to nothing else.
        ///
        /// Host names are still verified.
        public mutating func trust(pemCertificates pem: [UInt8]) throws {
            var tls = self.tlsConfiguration ?? TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(pem))
            self.tlsConfiguration = tls
        }
    }

    /// Which HTTP versions a transport may use.
    public enum HTTPVersionPolicy: Sendable {
        /// HTTP/2 when the server offers it over TLS (ALPN), otherwise HTTP/1.1.
        case automatic
        /// Always HTTP/1.1.
        case http1Only
        /// HTTP/2 only: a response over any other version fails with kind `tls` (reason
        /// `handshakeFailure`, never retried); a cleartext `http` URL fails with `invalidRequest`
        /// before anything is sent (AsyncHTTPClient has no HTTP/2 over cleartext, h2c). The version
        /// is known only once the response head arrives — AsyncHTTPClient's pool offers both `h2`
        /// and `http/1.1` by ALPN — so a server that speaks only HTTP/1.1 has received the request.
        case http2Only
    }

    private let requiresHTTP2: Bool

    /// The underlying client, for advanced use.
    public let httpClient: HTTPClient
    private let pinning: PinningPolicy
    /// `Configuration.resolvedHosts`, with lower-case host names: where the TLS diagnosis connects.
    private let resolvedHosts: [String: String]
    private let pinnedTLS: [String: TLSConfiguration]
    private let tlsConfiguration: TLSConfiguration?
    private let isShutDown = Locked(false)
    /// Every connection the pool opened and has not closed yet.
    private let connections: OpenConnections

    /// Creates a transport with its own connection pool.
    ///
    /// A certificate-authority pin that is not valid PEM is dropped with no effect on other hosts;
    /// use ``init(validating:)`` to get an error instead.
    public convenience init(configuration: Configuration = Configuration()) {
        // Invalid anchors cannot be reported from a non-throwing initializer: such a host then has
        // an empty trust store, so every connection to it fails (never a silent pass).
        self.init(unchecked: configuration)
    }

    /// Creates a transport, failing if a pin cannot be enforced (an unreadable certificate-authority pin).
    public convenience init(validating configuration: Configuration) throws {
        for (host, pins) in configuration.pinning.pins {
            for pem in PinningPolicy.anchors(in: pins) {
                do {
                    _ = try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))
                } catch {
                    throw CourierError.invalidRequest("the certificate pin for \(host) is not a readable PEM certificate: \(error)")
                }
            }
        }
        self.init(unchecked: configuration)
    }

    private init(unchecked configuration: Configuration) {
        var config = HTTPClient.Configuration()
        config.redirectConfiguration = .disallow
        config.tlsConfiguration = configuration.tlsConfiguration
        config.httpVersion = configuration.httpVersion == .http1Only ? .http1Only : .automatic
        // Keyed as requests name hosts: lower-cased, a Unicode name in its IDNA form.
        config.dnsOverride = Dictionary(
            configuration.resolvedHosts.map { (PinningPolicy.asciiHost($0.key).lowercased(), $0.value) }, uniquingKeysWith: { $1 })
        self.resolvedHosts = config.dnsOverride
        config.timeout.connect = Self.timeAmount(configuration.connectTimeout)
        let readTimeout = configuration.readTimeout.map(Self.timeAmount)
        // Every new TLS connection is checked once its handshake is done: no identity taken from
        // the Common Name, and the public-key pins (see PinVerifier). Off only when the caller
        // turned certificate verification off.
        let verifies = configuration.tlsConfiguration?.certificateVerification ?? .fullVerification == .fullVerification
        // Only Apple platforms have event loops that run TLS out of sight (Network.framework's).
        #if canImport(Darwin)
        let tlsMayBeHidden = !(configuration.eventLoopGroup.map { $0 is MultiThreadedEventLoopGroup } ?? true)
        #else
        let tlsMayBeHidden = false
        #endif
        let verifier =
            verifies || configuration.pinning.checksPublicKeys
            ? PinVerifier(
                policy: configuration.pinning, requiresSubjectAlternativeName: verifies, hostnameVerified: verifies,
                tlsMayBeHidden: tlsMayBeHidden) : nil
        // RFC 9113 §6.5.2: a value outside 2^14...2^24-1 is a connection error for the peer, and
        // one that does not fit a setting's 32 bits stops the process in the HTTP/2 library.
        let maxFrameSize = configuration.http2MaxFrameSize.map { min(max($0, 1 << 14), (1 << 24) - 1) }
        let connections = OpenConnections()
        self.connections = connections
        let install: @Sendable (any Channel) -> EventLoopFuture<Void> = { channel in
            connections.add(channel)
            let pinned = verifier?.verify(channel) ?? channel.eventLoop.makeSucceededVoidFuture()
            return pinned.flatMap {
                guard let readTimeout else { return channel.eventLoop.makeSucceededVoidFuture() }
                return channel.eventLoop.submit {
                    try channel.pipeline.syncOperations.addHandler(ReadIdleHandler(timeout: readTimeout), position: .first)
                }
            }.flatMapErrorThrowing { error in
                channel.close(promise: nil)
                throw error
            }
        }
        config.http1_1ConnectionDebugInitializer = { channel in
            install(channel).flatMap { StatusLineGuard.install(on: channel) }
        }
        config.http2ConnectionDebugInitializer = { channel in
            install(channel).flatMap {
                GoAwayWatcher.install(on: channel)
            }.flatMap {
                // A response head up to the size HTTP/1.1's parser takes (80 KiB), where
                // swift-nio-http2 stops at 16 KiB and ends the whole connection for a larger one
                // (a big `Set-Cookie` or policy header): applied once the server acknowledges it,
                // before it answers any request sent after it.
                var parameters = [HTTP2Setting(parameter: .maxHeaderListSize, value: Self.http2MaxHeaderListSize)]
                // Larger DATA frames: far fewer frames (and buffers) per megabyte of a bulk body.
                if let maxFrameSize { parameters.append(HTTP2Setting(parameter: .maxFrameSize, value: maxFrameSize)) }
                return channel.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(parameters))))
            }
        }
        // DATA frame coalescing, first in each stream's pipeline, installed at once on the
        // stream's event loop (where AsyncHTTPClient calls this): no extra loop tick before the
        // request is written, and the loop's cached succeeded future, not a new one. With a read
        // timeout, each stream also hears of it when its connection closes for it (one small
        // handler a stream). With neither, no initializer at all: nothing of ours per stream.
        let coalescing = configuration.http2ReadCoalescing
        let noticesReadTimeout = readTimeout != nil
        if coalescing != nil || noticesReadTimeout {
            config.http2StreamChannelDebugInitializer = { channel in
                let install: @Sendable () throws -> Void = {
                    if let coalescing {
                        try channel.pipeline.syncOperations.addHandler(DataFrameCoalescer(limit: coalescing), position: .first)
                    }
                    if noticesReadTimeout {
                        try channel.pipeline.syncOperations.addHandler(ReadIdleStreamNotice(), position: .first)
                    }
                }
                guard channel.eventLoop.inEventLoop else { return channel.eventLoop.submit(install) }
                do {
                    try install()
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        }
        self.pinning = configuration.pinning
        self.tlsConfiguration = config.tlsConfiguration
        self.requiresHTTP2 = configuration.httpVersion == .http2Only
        var pinnedTLS: [String: TLSConfiguration] = [:]
        for (host, pins) in configuration.pinning.pins {
            let anchors = PinningPolicy.anchors(in: pins)
            guard !anchors.isEmpty else { continue }
            var tls = config.tlsConfiguration ?? TLSConfiguration.makeClientConfiguration()
            let certificates = anchors.flatMap { (try? NIOSSLCertificate.fromPEMBytes(Array($0.utf8))) ?? [] }
            tls.trustRoots = .certificates(certificates)
            tls.additionalTrustRoots = []
            // An authority pin is a chain that must end at it: with verification turned off, the
            // chain is still checked against the pinned roots (the host name stays unchecked).
            if tls.certificateVerification == .none { tls.certificateVerification = .noHostnameVerification }
            pinnedTLS[host] = tls
        }
        self.pinnedTLS = pinnedTLS
        config.connectionPool.idleTimeout = Self.timeAmount(configuration.idleTimeout)
        // At least one: none would leave every request waiting, and a negative limit stops the
        // process in the connection pool.
        config.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(1, configuration.maxConnectionsPerHost)
        config.decompression = .disabled
        // Fail fast on refused or failed connections: retries are the pipeline's decision, not the pool's.
        config.connectionPool.retryConnectionEstablishment = false
        self.httpClient = HTTPClient(
            eventLoopGroup: configuration.eventLoopGroup ?? MultiThreadedEventLoopGroup.singleton, configuration: config)
    }

    deinit {
        if self.claimShutdown() { self.httpClient.shutdown { _ in } }
    }

    /// Closes every connection; the transport cannot be used afterwards (a request then fails
    /// with kind `transport`, "the transport is shut down", and is not retried; so does a request
    /// still running, unless its caller cancelled it first). A second call returns at once.
    ///
    /// Connections get ``shutdownGracePeriod`` to close on their own (an HTTP/2 connection says
    /// GOAWAY first); any still open then are closed. Without that, a connection whose HTTP/2
    /// state had gone wrong (a flood of PINGs past swift-nio-http2's limit) kept the shutdown
    /// waiting until the read timeout closed it, 37 s with the defaults. A connection attempt
    /// still under way is waited for, up to ``Configuration/connectTimeout``: AsyncHTTPClient's
    /// pool gives no way to abandon it.
    public func shutdown() async throws {
        guard self.claimShutdown() else { return }
        let connections = self.connections
        let watchdog = Task {
            try await Task.sleep(for: Self.shutdownGracePeriod)
            connections.closeAll()
        }
        defer { watchdog.cancel() }
        try await self.httpClient.shutdown()
    }

    /// How long ``shutdown()`` lets connections close on their own before closing them.
    public static let shutdownGracePeriod = Duration.seconds(1)

    /// True for the first caller only.
    private func claimShutdown() -> Bool {
        self.isShutDown.withLock { shut in
            defer { shut = true }
            return !shut
        }
    }

    /// Sends the request and returns when the response head arrives; the body streams afterwards.
    public func send(_ request: Courier.Request) async throws -> RawResponse {
        // The work around the one wait is done in synchronous helpers: their values live on the
        // thread's stack, not in this async frame (one per request, allocated from the task).
        let (outgoing, pinnedHost) = try self.outgoing(for: request)
        let deadline: NIODeadline = request.remainingTime.map { .now() + Self.timeAmount($0) } ?? .distantFuture
        let response: HTTPClientResponse
        do {
            response = try await self.httpClient.execute(outgoing, deadline: deadline)
        } catch {
            response = try await self.recover(from: error, outgoing: outgoing, request: request, pinnedHost: pinnedHost, deadline: deadline)
        }
        return try self.rawResponse(from: response)
    }

    /// AsyncHTTPClient's request for `request`, and the pinned host it goes to, if any.
    @inline(never)
    private func outgoing(for request: Courier.Request) throws -> (HTTPClientRequest, pinnedHost: String?) {
        if self.requiresHTTP2, request.head.scheme?.lowercased() != "https" {
            throw CourierError.invalidRequest("HTTP/2 was required, and AsyncHTTPClient speaks it over TLS only (no h2c): use https")
        }
        var outgoing = HTTPClientRequest(url: request.urlString)
        var pinnedHost: String?
        if !self.pinning.isEmpty, Authority(scheme: request.head.scheme, authority: request.head.authority) == nil {
            // A target that cannot be read could be a pinned host in disguise: never unchecked.
            throw CourierError.invalidRequest("the request's target '\(request.head.authority ?? "")' cannot be checked against the pins")
        }
        if !self.pinning.isEmpty, let target = Authority(scheme: request.head.scheme, authority: request.head.authority),
            // The port written, else 443, whatever the scheme, as on URLSession: a pin for
            // `host:443` covers `http://host/` too (the host is pinned where it speaks TLS, and
            // must not be reached in clear text). Not `target.port`, which is 80 for that URL.
            let key = self.pinning.matchingKey(for: target.host, port: Authority.split(request.head.authority ?? "")?.port ?? 443)
        {
            let host = target.host
            try TransportRules.refuseCleartext(toPinnedHost: host, scheme: request.head.scheme)
            if let tls = self.pinnedTLS[key] {
                // Pinned authorities are the only trust roots: a chain that ends elsewhere is a
                // pin mismatch. (Public-key pins are checked by `PinVerifier` after the chain.)
                pinnedHost = host
                outgoing.tlsConfiguration = tls
            }
        }
        outgoing.method = HTTPMethod(rawValue: request.head.method.rawValue)
        var headers = HTTPHeaders()
        headers.reserveCapacity(request.head.headerFields.count + 1)
        try TransportRules.wireFields(of: request) { name, value in headers.add(name: name, value: value) }
        if let body = request.body {
            outgoing.body = try Self.outgoingBody(body)
        }
        outgoing.headers = headers
        return (outgoing, pinnedHost)
    }

    /// The body to send, claimed (a one-shot body can be claimed once).
    private static func outgoingBody(_ body: RequestBody) throws -> HTTPClientRequest.Body {
        let stream = try body.claim()
        if let bytes = body.bytes {
            return .bytes(ByteBuffer(data: bytes))
        }
        return .stream(stream.map { ByteBuffer(data: $0) }, length: body.length.map { .known(Int64($0)) } ?? .unknown)
    }

    /// After `execute` failed: a pooled connection closed under the request before any response
    /// arrived lets an idempotent request be sent again (RFC 9110, 9.2.2), once, on a fresh
    /// connection; anything else is mapped to a `CourierError`.
    @inline(never)
    private func recover(
        from error: any Error, outgoing: HTTPClientRequest, request: Courier.Request, pinnedHost: String?, deadline: NIODeadline
    ) async throws -> HTTPClientResponse {
        guard Self.isStaleConnection(error), Self.isIdempotent(request), request.body?.isReplayable ?? true, !Task.isCancelled else {
            throw await self.failure(error, request: request, pinnedHost: pinnedHost, tls: outgoing.tlsConfiguration)
        }
        var again = outgoing
        do {
            if let body = request.body {
                again.body = try Self.outgoingBody(body)
            }
            return try await self.httpClient.execute(again, deadline: deadline)
        } catch {
            throw await self.failure(error, request: request, pinnedHost: pinnedHost, tls: again.tlsConfiguration)
        }
    }

    /// The largest response head taken over HTTP/2 (`SETTINGS_MAX_HEADER_LIST_SIZE`, RFC 9113
    /// §6.5.2): 80 KiB, what AsyncHTTPClient's HTTP/1.1 parser takes.
    static let http2MaxHeaderListSize = 80 * 1024

    /// Courier's response for AsyncHTTPClient's: the head converted, the body streaming.
    @inline(never)
    private func rawResponse(from response: HTTPClientResponse) throws -> RawResponse {
        var fields = HTTPFields()
        fields.reserveCapacity(response.headers.count)
        // HTTP/2 has no `Transfer-Encoding` (RFC 9113 §8.2.2): swift-nio-http2's HTTP/1 codec adds
        // `transfer-encoding: chunked` to a head without a length, which no server sent.
        let isHTTP2 = response.version.major >= 2
        for (name, value) in response.headers {
            if isHTTP2, name.utf8.count == 17, FieldText.lowercased(name) == "transfer-encoding" { continue }
            if let fieldName = HTTPField.Name(name) {
                fields.append(HTTPField(name: fieldName, value: value))
            }
        }
        let reader = BodyReader(response.body)
        let isShutDown = self.isShutDown
        let stream = ByteStream.readOnce(onCancel: { reader.cancel() }) {
            // The body can be iterated once: when that iterator goes (a loop left early), the body
            // is given up, as when AsyncHTTPClient's own iterator goes (after the end, a no-op).
            let iteration = BodyReader.Iteration(reader)
            return {
                do {
                    return try await iteration.reader.next()
                } catch let error as CourierError {
                    throw error
                } catch {
                    // The head came, so the connection was made: whatever cut the body short
                    // (a reset, a close) is no failure to connect.
                    var mapped = Self.mapError(error)
                    mapped.couldNotConnect = false
                    if mapped.kind == .transport || mapped.kind == .cancelled, !Task.isCancelled, isShutDown.withLock({ $0 }) {
                        // Nobody cancelled the read: the transport's shutdown ended it (as `failure` says of a head).
                        throw CourierError.transportShutDown(underlying: error)
                    }
                    throw mapped
                }
            }
        }
        let version: Courier.HTTPVersion =
            response.version.major >= 2 ? .http2 : Courier.HTTPVersion(major: response.version.major, minor: response.version.minor)
        // HTTP/2's `:status` is not checked for three digits on its way here (`2000` arrives as
        // a final response): a malformed response, never a crash.
        let expected: Int?
        do {
            _ = try StatusCode.checked(Int(response.status.code))
            // Content-Length is 1*DIGIT (RFC 9110 §8.6), one field (repeated ones read as one value
            // joined by ", ", as on URLSession); one too large for `Int` saturates, so the size
            // limit rejects it. HTTP/1.1's parser refuses the rest before this; over HTTP/2 (`+2`,
            // a repeated field) they are refused here, as the other transport does.
            expected = try fields[.contentLength].map(TransportRules.announcedLength)
        } catch {
            stream.cancel()
            throw error
        }
        if self.requiresHTTP2, version.major < 2 {
            stream.cancel()
            var error = CourierError(.tls, "HTTP/2 was required, and the server answered over \(version)")
            error.tlsReason = .handshakeFailure
            throw error
        }
        return RawResponse(
            head: HTTPResponse(
                status: HTTPResponse.Status(code: Int(response.status.code), reasonPhrase: response.status.reasonPhrase),
                headerFields: fields),
            body: .stream(stream, expectedLength: expected),
            version: version
        )
    }

    static func isStaleConnection(_ error: any Error) -> Bool {
        if let error = error as? ChannelError, error == .ioOnClosedChannel || error == .alreadyClosed { return true }
        if let error = error as? HTTPClientError, error == .remoteConnectionClosed { return true }
        return false
    }

    static func isIdempotent(_ request: Courier.Request) -> Bool {
        switch request.head.method {
        case .get, .head, .options, .put, .delete, .trace: return true
        default: return false
        }
    }

    /// The duration as a `TimeAmount`, saturating (a timeout of 10^10 seconds is the longest
    /// `TimeAmount`, not an overflow).
    static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(duration.saturatingNanoseconds)
    }

    /// The error for a failed exchange: ``mapError(_:pinnedHost:)``, and for a certificate chain
    /// BoringSSL rejected, the reason ``TLSDiagnosis`` finds on a second, rejected handshake.
    private func failure(_ error: any Error, request: Courier.Request, pinnedHost: String?, tls: TLSConfiguration?) async -> CourierError {
        var mapped = Self.mapError(error, pinnedHost: pinnedHost)
        if mapped.kind == .transport || mapped.kind == .cancelled, !Task.isCancelled, self.isShutDown.withLock({ $0 }) {
            // Nobody cancelled this exchange: the transport's shutdown ended it, or came first.
            return CourierError.transportShutDown(underlying: error)
        }
        guard mapped.kind == .tls || mapped.kind == .pinMismatch, TLSDiagnosis.isCertificateVerifyFailure(error), !Task.isCancelled,
            let target = Authority(scheme: request.head.scheme, authority: request.head.authority)
        else { return mapped }
        let host = target.host
        let port = target.port ?? 443
        let timeout = min(request.remainingTime ?? .seconds(5), .seconds(5))
        let configuration = tls ?? self.tlsConfiguration ?? TLSConfiguration.makeClientConfiguration()
        if let reason = await TLSDiagnosis.reason(
            host: host, address: self.resolvedHosts[host.lowercased()], port: port, configuration: configuration,
            group: self.httpClient.eventLoopGroup, timeout: Self.timeAmount(timeout)
        ) {
            // Under pinned authorities only an untrusted issuer is the pins' doing: an expired
            // certificate or one for another host is that, whoever issued it.
            if mapped.kind == .pinMismatch {
                if reason == .untrustedIssuer { return mapped }
                mapped = CourierError(.tls, Self.tlsMessage(reason, error), underlying: error)
            }
            mapped.tlsReason = reason
            mapped.message = Self.tlsMessage(reason, error)
        }
        return mapped
    }

    /// The message of a TLS failure: the reason in words, then the platform's own text.
    static func tlsMessage(_ reason: TLSFailureReason?, _ error: any Error) -> String {
        TransportRules.tlsMessage(reason, platformText: "\(error)")
    }

    static func mapError(_ error: any Error, pinnedHost: String? = nil) -> CourierError {
        if let closed = error as? NIOHTTP2Errors.StreamClosed, closed.errorCode == .refusedStream {
            // Refused by the server's RST_STREAM, or above the last stream ID of its GOAWAY (which
            // GoAwayWatcher closes as refused): either way not processed (RFC 9113 §8.7, §6.8).
            var refused = CourierError(
                .transport,
                "the server did not process HTTP/2 stream \(closed.streamID) (refused, or above its GOAWAY's last stream ID); it may be sent again",
                underlying: error)
            refused.wasNotProcessed = true
            return refused
        }
        if let mismatch = error as? PinMismatch {
            var mapped = CourierError(.pinMismatch, mismatch.description, underlying: error)
            mapped.tlsReason = .pinMismatch
            return mapped
        }
        if let unnamed = error as? NoSubjectAlternativeName {
            var mapped = CourierError(.tls, unnamed.description, underlying: error)
            mapped.tlsReason = .hostnameMismatch
            return mapped
        }
        if let pinnedHost, TLSDiagnosis.isCertificateVerifyFailure(error) {
            // A pinned host whose chain does not end at a pinned authority fails the handshake.
            var mapped = CourierError(
                .pinMismatch, "the certificate presented for \(pinnedHost) does not chain to a pinned authority: \(error)",
                underlying: error)
            mapped.tlsReason = .pinMismatch
            return mapped
        }
        if let error = error as? CourierError { return error }
        if error is CancellationError { return .init(.cancelled, "the request was cancelled", underlying: error) }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout:
                return CourierError(.timeout, "the request timed out", underlying: error)
            case .connectTimeout, .tlsHandshakeTimeout:
                return CourierError(.timeout, "connecting timed out", underlying: error)
            case .cancelled, .requestStreamCancelled:
                guard Task.isCancelled else {
                    // Nobody cancelled this exchange (the head's or the body reader's task): the
                    // pool ended it, its connection closed under it — say by swift-nio-http2's
                    // limit on a flood of control frames. A transport failure, which the retry
                    // stage may send again; never `cancelled`, which the caller reads as its own doing.
                    return CourierError(
                        .transport, "the connection was closed under the exchange: \(error.shortDescription)", underlying: error)
                }
                return CourierError(.cancelled, "the request was cancelled", underlying: error)
            case .remoteConnectionClosed:
                var mapped = CourierError(.transport, "the connection was closed before the response completed", underlying: error)
                mapped.couldNotConnect = true
                return mapped
            default:
                return CourierError(.transport, "HTTP client error: \(error.shortDescription)", underlying: error)
            }
        }
        if error is ReadIdleTimeoutError {
            return CourierError(.timeout, "nothing was received within the read timeout", underlying: error)
        }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            // A rejected chain's reason is not in the error: `failure` finds it (nil until then).
            let reason: TLSFailureReason?
            if TLSDiagnosis.isCertificateVerifyFailure(error) {
                reason = nil
            } else if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
                reason = .hostnameMismatch
            } else {
                reason = .handshakeFailure
            }
            var mapped = CourierError(.tls, Self.tlsMessage(reason, error), underlying: error)
            mapped.tlsReason = reason
            return mapped
        }
        if error is HTTPParserError {
            return CourierError(.transport, "the server sent a malformed response: \(error)", underlying: error)
        }
        var mapped = CourierError(.transport, "the exchange failed: \(error)", underlying: error)
        mapped.couldNotConnect = Self.isConnectionFailure(error)
        return mapped
    }

    /// Whether `error` says the connection failed before any byte of a response: refused,
    /// reset, aborted or closed, no route, or a name that does not resolve.
    static func isConnectionFailure(_ error: any Error) -> Bool {
        if let io = error as? IOError { return TransportRules.connectionErrnos.contains(io.errnoCode) }
        // The name did not resolve, or every address of the host failed to connect.
        return error is SocketAddressError || error is SocketAddressError.UnknownHost || error is NIOConnectionError
    }
}

/// Reads AsyncHTTPClient's response body for the one reader of a ``ByteStream``, and stops it
/// when the stream is cancelled: AsyncHTTPClient ends a body (and its request on the wire) only
/// when its iterator goes, so cancelling drops the iterator — at once when no read is in flight,
/// else when that read returns (a read waiting on a stalled server ends with the caller's task,
/// the deadline or the read timeout, not with the cancel) — and every later read fails with
/// kind `cancelled`.
final class BodyReader: @unchecked Sendable {
    private struct State {
        var body: HTTPClientResponse.Body?
        var iterator: HTTPClientResponse.Body.AsyncIterator?
        var isReading = false
        var isCancelled = false
    }

    // One allocation for the lock and what it guards.
    private let state: NIOLockedValueBox<State>

    init(_ body: HTTPClientResponse.Body) {
        self.state = NIOLockedValueBox(State(body: body))
    }

    /// The one iteration of the body: cancels it when the iterator that holds it goes.
    final class Iteration: Sendable {
        let reader: BodyReader
        init(_ reader: BodyReader) { self.reader = reader }
        deinit { self.reader.cancel() }
    }

    /// The next chunk of bytes; `nil` at the end. One read at a time (the iterator contract).
    func next() async throws -> Data? {
        guard var iterator = self.take() else { throw CourierError(.cancelled, "the response body was cancelled") }
        var result: Result<Data?, any Error>
        do {
            // An empty part (HTTP/2's END_STREAM on an empty DATA frame) is no chunk.
            var chunk: Data?
            while let buffer = try await iterator.next() {
                if buffer.readableBytes > 0 {
                    chunk = Data(buffer: buffer, byteTransferStrategy: .noCopy)
                    break
                }
            }
            result = .success(chunk)
        } catch {
            result = .failure(error)
        }
        // A cancellation during the read drops the iterator now (outside the lock: its release
        // ends the request).
        if !self.putBack(iterator) { result = .failure(CourierError(.cancelled, "the response body was cancelled")) }
        return try result.get()
    }

    /// Stops the body: the iterator (or the body, before a read) goes unless a read holds it.
    func cancel() {
        let dropped = self.state.withLockedValue { state -> (HTTPClientResponse.Body?, HTTPClientResponse.Body.AsyncIterator?) in
            state.isCancelled = true
            guard !state.isReading else { return (nil, nil) }
            defer {
                state.body = nil
                state.iterator = nil
            }
            return (state.body, state.iterator)
        }
        _ = dropped
    }

    private func take() -> HTTPClientResponse.Body.AsyncIterator? {
        self.state.withLockedValue { state in
            guard !state.isCancelled else { return nil }
            if state.iterator == nil, let body = state.body {
                state.iterator = body.makeAsyncIterator()
                state.body = nil
            }
            state.isReading = true
            defer { state.iterator = nil }
            return state.iterator
        }
    }

    private func putBack(_ iterator: HTTPClientResponse.Body.AsyncIterator) -> Bool {
        self.state.withLockedValue { state in
            state.isReading = false
            guard !state.isCancelled else { return false }
            state.iterator = iterator
            return true
        }
    }
}

/// The connections a transport's pool has open, so that shutdown can close the ones that do not
/// close on their own.
final class OpenConnections: Sendable {
    private let channels = Locked<[ObjectIdentifier: any Channel]>([:])

    /// Tracks `channel` until it closes.
    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        self.channels.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { [weak self] _ in
            self?.channels.withLock { $0[id] = nil }
        }
    }

    /// Closes every connection still open.
    func closeAll() {
        for channel in self.channels.withLock({ Array($0.values) }) {
            channel.close(promise: nil)
        }
    }
}
