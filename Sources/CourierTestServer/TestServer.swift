import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

/// A real HTTP server on a loopback port, for tests and the demo: HTTP/1.1 in clear text, or
/// HTTP/2 and HTTP/1.1 over TLS (negotiated by ALPN).
///
/// Every request goes to the handler, which returns a ``ScriptedResponse``, possibly one that
/// misbehaves. The server records requests and counts connections and requests abandoned by the
/// client before the response was complete.
///
/// ```swift
/// let server = try await TestServer.start(.http1) { request in .json("{\"ok\":true}") }
/// defer { Task { try await server.stop() } }
/// ```
public final class TestServer: Sendable {
    /// How the server listens.
    public enum Mode: Sendable {
        /// HTTP/1.1 without TLS.
        case http1
        /// TLS with ALPN offering `h2` and `http/1.1`.
        case tls(TestCertificates)
    }

    /// The handler that answers every request.
    public typealias Handler = @Sendable (RecordedRequest) async -> ScriptedResponse

    /// The port the server listens on.
    public let port: Int
    /// The mode the server was started in.
    public let mode: Mode
    let state: ServerState
    private let channel: any Channel

    private init(port: Int, mode: Mode, state: ServerState, channel: any Channel) {
        self.port = port
        self.mode = mode
        self.state = state
        self.channel = channel
    }

    /// The URL of the server's root: `http://127.0.0.1:PORT` or `https://localhost:PORT`.
    public var baseURL: URL {
        switch self.mode {
        case .http1: return URL(string: "http://127.0.0.1:\(self.port)")!
        case .tls: return URL(string: "https://localhost:\(self.port)")!
        }
    }

    /// The number of TCP connections accepted so far.
    public var connectionCount: Int { self.state.locked.withLockedValue { $0.connections } }
    /// The number of TCP connections open now.
    public var openConnectionCount: Int { self.state.locked.withLockedValue { $0.open } }
    /// The requests received so far, in order of arrival.
    public var requests: [RecordedRequest] { self.state.locked.withLockedValue { $0.requests } }
    /// The number of requests whose client went away before the response was complete.
    public var abandonedCount: Int { self.state.locked.withLockedValue { $0.abandoned } }

    /// Forgets recorded requests and counters.
    public func reset() {
        self.state.locked.withLockedValue { value in
            let open = value.open
            value = .init()
            value.open = open
        }
    }

    /// Starts a server on a loopback port (a free one when `port` is 0).
    ///
    /// - Parameter keepsRequestBodies: when false, request bodies are counted
    ///   (``RecordedRequest/bodyLength``) but not kept, so bulk uploads use no memory.
    /// - Parameter recordsRequests: when false, ``requests`` stays empty (a long-running server
    ///   keeps no memory per request; connections are still counted).
    /// - Parameter host: the loopback address to listen on (`127.0.0.1`, or `::1` for IPv6).
    /// - Parameter http2: the settings the server announces on HTTP/2 connections.
    /// - Parameter group: the event loops to run on (default: NIO's shared singleton).
    /// - Parameter listeningSocket: a socket already bound and listening (for example in another
    ///   network namespace), used instead of binding `host` and `port`.
    public static func start(
        _ mode: Mode, host: String = "127.0.0.1", port: Int = 0, listeningSocket: CInt? = nil, keepsRequestBodies: Bool = true,
        recordsRequests: Bool = true, http2: HTTP2Options = HTTP2Options(), group: (any EventLoopGroup)? = nil,
        handler: @escaping Handler
    ) async throws -> TestServer {
        let state = ServerState(handler: handler, keepsRequestBodies: keepsRequestBodies, recordsRequests: recordsRequests)
        let tls: NIOSSLContext?
        if case .tls(let certificates) = mode {
            tls = try NIOSSLContext(configuration: certificates.serverTLSConfiguration())
        } else {
            tls = nil
        }
        let bootstrap = ServerBootstrap(group: group ?? MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                // A connection accepted while the server stops is closed at once.
                let key = ObjectIdentifier(channel)
                let accepted = state.connections.withLockedValue { connections -> Bool in
                    guard !connections.stopped else { return false }
                    connections.open[key] = channel
                    return true
                }
                guard accepted else {
                    channel.close(promise: nil)
                    return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
                }
                let connectionID = state.locked.withLockedValue { value -> Int in
                    value.connections += 1
                    value.open += 1
                    return value.connections
                }
                channel.closeFuture.whenComplete { _ in
                    state.locked.withLockedValue { $0.open -= 1 }
                    state.connections.withLockedValue { _ = $0.open.removeValue(forKey: key) }
                }
                guard let tls else {
                    return channel.eventLoop.makeCompletedFuture {
                        try Self.configureHTTP1(channel.pipeline.syncOperations, state: state, connectionID: connectionID)
                    }
                }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                }.flatMap {
                    channel.configureHTTP2SecureUpgrade(
                        h2ChannelConfigurator: { channel in
                            channel.configureHTTP2Pipeline(
                                mode: .server,
                                initialLocalSettings: [
                                    HTTP2Setting(parameter: .maxConcurrentStreams, value: http2.maxConcurrentStreams),
                                    HTTP2Setting(parameter: .initialWindowSize, value: http2.initialWindowSize),
                                    HTTP2Setting(parameter: .maxHeaderListSize, value: 1 << 16),
                                ],
                                // A window announced as 0 stays closed: no WINDOW_UPDATE is sent.
                                targetWindowSize: http2.initialWindowSize == 0 ? 1 : 1 << 24
                            ) { stream in
                                stream.eventLoop.makeCompletedFuture {
                                    try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ServerCodec())
                                    try stream.pipeline.syncOperations.addHandler(
                                        ExchangeHandler(state: state, connectionID: connectionID, raw: false))
                                }
                            }.map { _ in }
                        },
                        http1ChannelConfigurator: { channel in
                            channel.eventLoop.makeCompletedFuture {
                                try Self.configureHTTP1(channel.pipeline.syncOperations, state: state, connectionID: connectionID)
                            }
                        }
                    )
                }
            }
        let listening = Self.allowingAHeldPort(bootstrap)
        let channel = try await (listeningSocket.map { listening.withBoundSocket($0) } ?? listening.bind(host: host, port: port)).get()
        guard let port = channel.localAddress?.port else {
            throw TestServerError.noPort
        }
        return TestServer(port: port, mode: mode, state: state, channel: channel)
    }

    /// The bootstrap, able to listen on a port a ``RefusingPort`` holds: Linux lets two sockets
    /// share an exact address and port when both set SO_REUSEADDR (set above); BSD sockets (Darwin)
    /// only when both set SO_REUSEPORT. (The Darwin branch is not built here: Courier's tests run
    /// on Linux.)
    private static func allowingAHeldPort(_ bootstrap: ServerBootstrap) -> ServerBootstrap {
        #if canImport(Darwin)
        return bootstrap.serverChannelOption(.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: 1)
        #else
        return bootstrap
        #endif
    }

    private static func configureHTTP1(_ pipeline: ChannelPipeline.SynchronousOperations, state: ServerState, connectionID: Int) throws {
        try pipeline.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
        try pipeline.addHandler(ExchangeHandler(state: state, connectionID: connectionID, raw: true))
    }

    /// Stops listening; open connections are closed. Stopping a stopped server does nothing.
    public func stop() async throws {
        // Closing the listener leaves accepted connections open: close them too, so a client's
        // pooled connection finds the server gone, as it would after a restart. From here on, a
        // connection the listener still accepts is closed as it is set up.
        let open = self.state.connections.withLockedValue { connections in
            connections.stopped = true
            return Array(connections.open.values)
        }
        for connection in open {
            try? await connection.close()
        }
        do {
            try await self.channel.close()
        } catch ChannelError.alreadyClosed {
            return
        }
    }
}

/// The settings a test server announces on its HTTP/2 connections.
public struct HTTP2Options: Sendable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    public var maxConcurrentStreams: Int
    /// SETTINGS_INITIAL_WINDOW_SIZE: 0 keeps every request body from being sent.
    public var initialWindowSize: Int

    /// Creates options; the defaults are generous (1,000 streams, 1 MiB windows).
    public init(maxConcurrentStreams: Int = 1000, initialWindowSize: Int = 1 << 20) {
        self.maxConcurrentStreams = maxConcurrentStreams
        self.initialWindowSize = initialWindowSize
    }
}

/// Errors of the test server itself.
public enum TestServerError: Error {
    /// The listening socket has no port.
    case noPort
}

final class ServerState: Sendable {
    struct Counters {
        var connections = 0
        var open = 0
        var requests: [RecordedRequest] = []
        var abandoned = 0
    }

    let handler: TestServer.Handler
    let keepsRequestBodies: Bool
    let recordsRequests: Bool
    let locked = NIOLockedValueBox(Counters())
    /// The accepted connections still open, closed by ``TestServer/stop()``, and whether it has
    /// been called.
    let connections = NIOLockedValueBox((open: [ObjectIdentifier: any Channel](), stopped: false))

    init(handler: @escaping TestServer.Handler, keepsRequestBodies: Bool, recordsRequests: Bool) {
        self.handler = handler
        self.keepsRequestBodies = keepsRequestBodies
        self.recordsRequests = recordsRequests
    }
}
