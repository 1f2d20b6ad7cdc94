import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

/// The tests over TLS run on both transports where URLSession can trust the test CA
/// (``TransportKind/overTLS``). FoundationNetworking does not say which HTTP version it spoke, so
/// on URLSession the response says ``HTTPVersion/unknown`` and the server's record shows HTTP/2.
@Suite("HTTP/2 over TLS and connection reuse")
struct HTTP2Tests {
    /// The version the response reports for an exchange the server saw over HTTP/2.
    static func reportedHTTP2(_ kind: TransportKind) -> HTTPVersion {
        kind == .asyncHTTPClient ? .http2 : .unknown
    }

    @Test(arguments: TransportKind.overTLS)
    func aResponseWithoutALengthOverHTTP2CarriesNoTransferEncodingField(_ kind: TransportKind) async throws {
        // RFC 9113 §8.2.2: HTTP/2 has no Transfer-Encoding. swift-nio-http2's HTTP/1 codec, which
        // AsyncHTTPClient reads HTTP/2 through, adds `transfer-encoding: chunked` to a head without
        // Content-Length: callers, logs and HAR files saw a field no server sent.
        let server = try await tlsServer { _ in
            ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")], body: Data(#"{"id":1,"title":"x"}"#.utf8))
                .with(.chunked(chunkSize: 4, delay: .zero))
        }
        try await withClient(kind, server: server) { client in
            let response = try await client.response(Endpoint<Article>(path: "/streamed"))
            #expect(response.version == Self.reportedHTTP2(kind))
            #expect(server.requests.first?.httpVersion == "HTTP/2")
            #expect(response.value.id == 1)
            #expect(response.headers[.transferEncoding] == nil, "\(response.headers)")
            #expect(response.headers[.contentLength] == nil)
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func alpnNegotiatesHTTP2OverTLS(_ kind: TransportKind) async throws {
        let server = try await tlsServer()
        try await withClient(kind, server: server) { client in
            let response = try await client.response(Endpoint<Echo>(path: "/echo"))
            #expect(response.version == Self.reportedHTTP2(kind))
            #expect(response.value.version == "HTTP/2")
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func hundredConcurrentRequestsShareOneHTTP2Connection(_ kind: TransportKind) async throws {
        let server = try await tlsServer()
        try await withClient(kind, server: server) { client in
            // One request first, so the pool knows the origin speaks HTTP/2.
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let versions = try await withThrowingTaskGroup(of: HTTPVersion.self) { group in
                for _ in 0..<100 {
                    // Deduplication off: each of the 100 must reach the server.
                    group.addTask { try await client.response(Endpoint<Article>(path: "/json").deduplication(.disabled)).version }
                }
                return try await group.reduce(into: [HTTPVersion]()) { $0.append($1) }
            }
            #expect(versions.count == 100)
            #expect(versions.allSatisfy { $0 == Self.reportedHTTP2(kind) })
            #expect(server.requests.count == 101)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
            #expect(server.connectionCount == 1)
            #expect(Set(server.requests.map(\.connectionID)).count == 1)
        }
    }

    /// RFC 9113 §6.5.2: SETTINGS_MAX_FRAME_SIZE lies between 2^14 and 2^24 - 1. A hostile or
    /// careless setting (2^24, which the documentation once allowed; one past 32 bits; negative)
    /// is brought into that range: no process stopped, no connection the server or the HTTP/2
    /// library refuses. AsyncHTTPClient only: the setting is its transport's.
    @Test(arguments: [1 << 24, Int(UInt32.max) + 1, Int.max, -1, 0])
    func aMaxFrameSizeOutOfRangeIsBroughtIntoIt(_ size: Int) async throws {
        let server = try await tlsServer()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.http2MaxFrameSize = size }) { client in
            let response = try await client.response(Endpoint<Echo>(path: "/echo"))
            #expect(response.version == .http2)
            #expect(response.value.version == "HTTP/2")
        }
    }

    @Test
    func http1OverTLSWhenHTTP2IsNotAllowed() async throws {
        let server = try await tlsServer()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.httpVersion = .http1Only }) { client in
            let response = try await client.response(Endpoint<Echo>(path: "/echo"))
            #expect(response.version == .http1_1)
            #expect(response.value.version == "HTTP/1.1")
        }
    }

    // AsyncHTTPClient only: URLSession on Linux (libcurl) reopens HTTP/1.1 connections on its own
    // schedule although the server keeps them alive, so there is no reuse to assert there.
    @Test
    func http1KeepAliveReusesTheConnection() async throws {
        let server = try await http1Server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            for _ in 0..<20 {
                _ = try await client.send(Endpoint<Article>(path: "/json"))
            }
            #expect(server.requests.count == 20)
            #expect(server.connectionCount == 1)
        }
    }

    @Test
    func untrustedCertificateIsATLSError() async throws {
        let server = try await tlsServer()
        let stranger = try TestCertificates.generate(commonName: "Some Other CA")
        try await withClient(
            .asyncHTTPClient, server: server,
            transportConfiguration: { configuration in
                configuration.tlsConfiguration = nil
                try? configuration.trust(pemCertificates: stranger.caPEMBytes)
            }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls)
            #expect(server.requests.isEmpty)
        }
    }

    @Test
    func cancellingAnHTTP2RequestResetsOnlyItsStream() async throws {
        let server = try await tlsServer()
        try await withClient(.asyncHTTPClient, server: server) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let stalled = client.start(Endpoint<Article>(path: "/stall"))
            #expect(await eventually { server.requests.count == 2 })
            stalled.cancel()
            #expect(await eventually { server.abandonedCount == 1 })
            let received = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(received.id == 1)
            #expect(server.connectionCount == 1)
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func misbehaviourOnAnHTTP2StreamIsATransportError(_ kind: TransportKind) async throws {
        let server = try await tlsServer()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/close-mid", decoding: .data)) }
            #expect(error?.kind == .transport)
            let timeout = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "/stall", timeout: .milliseconds(300)))
            }
            #expect(timeout?.kind == .timeout)
        }
    }
}
