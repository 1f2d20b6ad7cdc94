import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

/// The AsyncHTTPClient transport joins the DATA frames of one HTTP/2 read burst into larger body
/// chunks (`http2ReadCoalescing`), and where that meets the rest:
///
/// - coalescing × byte order and the end of the stream (streamed, collected, downloaded bodies)
/// - coalescing × the chunk limit, and switched off
/// - coalescing × multiplexing (several streams on one connection at once)
/// - coalescing × the response size limit
/// - coalescing × content decoding (a gzip body cut into frames, collected and streamed)
/// - coalescing × HEAD and 204 (a stream that ends with its HEADERS frame, no DATA)
/// - coalescing × trailers (a HEADERS frame that ends the stream after the DATA frames)
/// - coalescing × the cache (a body joined from frames is stored and served byte-exact)
/// - coalescing × the body idle timeout (bytes that came before a stall are delivered, then the
///   stream times out; coalescing on and off)
///
/// AsyncHTTPClient only: the frames are HTTP/2's, and URLSessionTransport on Linux
/// (FoundationNetworking) cannot be given the test CA, so it does not speak HTTP/2 to the test
/// server; on Apple platforms URLSession joins nothing of Courier's.
@Suite("HTTP/2 read coalescing")
struct HTTP2ReadCoalescingTests {
    /// The server's DATA frame size in these tests: far below the client's 1 MiB SETTINGS_MAX_FRAME_SIZE.
    static let frame = 1024

    /// A server answering `/pieces/SEED/LENGTH` with that payload in 1 KiB DATA frames, flushed together.
    static func server() async throws -> TestServer {
        try await tlsServer { request in
            let parts = request.path.split(separator: "/")
            let codings = ["gzip-pieces": "gzip", "br-pieces": "br", "zstd-pieces": "zstd"]
            guard parts.count == 3, parts[0] == "pieces" || codings[String(parts[0])] != nil, let seed = UInt64(parts[1]),
                let length = Int(parts[2])
            else {
                return .text("not found", status: 404)
            }
            if seed == 204 { return ScriptedResponse(status: 204, behaviour: .pieces(size: Self.frame)) }
            if let coding = codings[String(parts[0])] {
                let plain = payload(length, seed: seed)
                let compressed: Data =
                    switch coding {
                    case "br": ContentEncoder.brotli(plain)
                    case "zstd": ContentEncoder.zstd(plain)
                    default: (try? Gzip.compress(plain)) ?? Data()
                    }
                return ScriptedResponse(
                    status: 200, headers: [("Content-Type", "application/octet-stream"), ("Content-Encoding", coding)], body: compressed,
                    behaviour: .pieces(size: Self.frame))
            }
            let body = payload(length, seed: seed)
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/octet-stream")], body: body, behaviour: .pieces(size: Self.frame))
        }
    }

    /// A server answering every request with `body`, sent the way `behaviour` says.
    static func server(answering body: Data, _ behaviour: ScriptedResponse.Behaviour) async throws -> TestServer {
        try await tlsServer { _ in
            ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: body, behaviour: behaviour)
        }
    }

    /// The chunks of a streamed body, in order.
    static func chunks(_ client: Client, _ path: String) async throws -> (version: HTTPVersion, chunks: [Data]) {
        let response = try await client.stream(Endpoint<Data>(path: path, decoding: .data))
        var chunks: [Data] = []
        for try await chunk in response.body { chunks.append(chunk) }
        return (response.version, chunks)
    }

    @Test
    func theFramesOfABurstArriveJoinedInOrderAndComplete() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            let (version, chunks) = try await Self.chunks(client, "/pieces/11/262144")
            #expect(version == .http2)
            #expect(chunks.reduce(Data(), +) == payload(262_144, seed: 11))
            // 256 frames flushed at once reach the client in a few reads: some chunk holds more than one frame.
            #expect((chunks.map(\.count).max() ?? 0) > Self.frame)
            #expect(chunks.count < 256)
            #expect(!chunks.contains { $0.isEmpty })
            #expect((chunks.map(\.count).max() ?? 0) <= 1 << 20)
        }
    }

    @Test
    func aJoinedChunkStaysWithinTheLimit() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.http2ReadCoalescing = 4096 }) { client in
            let (_, chunks) = try await Self.chunks(client, "/pieces/12/262144")
            #expect(chunks.reduce(Data(), +) == payload(262_144, seed: 12))
            // Passed on once 4096 bytes are held: at most one frame beyond the limit.
            #expect(chunks.allSatisfy { $0.count < 4096 + Self.frame })
            #expect((chunks.map(\.count).max() ?? 0) > Self.frame)
        }
    }

    @Test
    func switchedOffEveryFrameIsAChunkOfItsOwn() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.http2ReadCoalescing = nil }) { client in
            let (version, chunks) = try await Self.chunks(client, "/pieces/13/262144")
            #expect(version == .http2)
            #expect(chunks.reduce(Data(), +) == payload(262_144, seed: 13))
            #expect(chunks.allSatisfy { $0.count <= Self.frame })
            // 256 frames of data, each one chunk or more (swift-nio-http2 passes on a frame cut by a
            // read in parts); the empty DATA frame that ends the stream is no chunk.
            #expect(chunks.count >= 256)
            #expect(!chunks.contains { $0.isEmpty })
        }
    }

    @Test
    func concurrentStreamsOnOneConnectionKeepTheirOwnBytes() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            _ = try await client.send(Endpoint<Data>(path: "/pieces/1/10", decoding: .data))
            let bodies = try await withThrowingTaskGroup(of: (UInt64, Data).self) { group in
                for seed in UInt64(20)..<28 {
                    group.addTask { (seed, try await Self.chunks(client, "/pieces/\(seed)/300000").chunks.reduce(Data(), +)) }
                }
                return try await group.reduce(into: [UInt64: Data]()) { $0[$1.0] = $1.1 }
            }
            #expect(bodies.count == 8)
            for (seed, body) in bodies {
                #expect(body == payload(300_000, seed: seed), "stream of seed \(seed)")
            }
            #expect(server.connectionCount == 1)
        }
    }

    @Test
    func aCollectedBodyAndADownloadAreByteExact() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-coalescing-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            let collected = try await client.response(Endpoint<Data>(path: "/pieces/31/500000", decoding: .data))
            #expect(collected.version == .http2)
            #expect(collected.value == payload(500_000, seed: 31))
            let download = try await client.download(
                Endpoint<Data>(path: "/pieces/32/2000000", decoding: .data),
                to: DownloadDestination(directory: folder, fileName: "joined.bin")
            ).value
            #expect(download.byteCount == 2_000_000)
            #expect(sha256(try Data(contentsOf: download.url)) == sha256(payload(2_000_000, seed: 32)))
        }
    }

    @Test
    func aJoinedBodyIsStoredAndServedFromTheCacheByteExact() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) {
            client in
            var endpoint = Endpoint<Data>(path: "/pieces/71/300000", decoding: .data)
            endpoint.cachePolicy = .cacheFor(.seconds(300))
            let first = try await client.response(endpoint)
            #expect(first.version == .http2)
            #expect(first.source == .network)
            #expect(first.value == payload(300_000, seed: 71))
            let second = try await client.response(endpoint)
            #expect(second.source == .cache)
            #expect(second.value == payload(300_000, seed: 71))
            #expect(server.requests.count == 1)
        }
    }

    @Test
    func theSizeLimitStillCountsEveryByte() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server, configure: { $0.maxResponseSize = 100_000 }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/pieces/41/300000", decoding: .data)) }
            #expect(error?.kind == .responseTooLarge)
            // Within the limit, the same route answers in full.
            let fits = try await client.send(Endpoint<Data>(path: "/pieces/42/90000", decoding: .data))
            #expect(fits == payload(90_000, seed: 42))
        }
    }

    /// Read coalescing × content coding: a compressed body in many small frames, in each coding.
    @Test(arguments: ["gzip", "br", "zstd"])
    func aCompressedBodyInFramesIsDecodedWhole(_ coding: String) async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            // Random bytes barely compress: the compressed body is about as many frames as the payload.
            let collected = try await client.response(Endpoint<Data>(path: "/\(coding)-pieces/61/400000", decoding: .data))
            #expect(collected.version == .http2)
            #expect(collected.value == payload(400_000, seed: 61))
            #expect(collected.headers[.contentEncoding] == nil)
            let (_, chunks) = try await Self.chunks(client, "/\(coding)-pieces/62/400000")
            #expect(chunks.reduce(Data(), +) == payload(400_000, seed: 62))
        }
    }

    @Test
    func headAndNoContentEndWithTheirHeaders() async throws {
        let server = try await Self.server()
        try await withClient(.asyncHTTPClient, server: server) { client in
            // RFC 9110 §9.3.2: a HEAD response has no content; §15.3.5: neither has a 204.
            let head = try await client.response(Endpoint<Data>(method: .head, path: "/pieces/51/100000", decoding: .data))
            #expect(head.version == .http2)
            #expect(head.status.code == 200)
            #expect(head.value.isEmpty)
            let empty = try await client.response(Endpoint<Data>(path: "/pieces/204/0", decoding: .data))
            #expect(empty.status.code == 204)
            #expect(empty.value.isEmpty)
            // The connection is still good for a body after them.
            #expect(try await client.send(Endpoint<Data>(path: "/pieces/52/70000", decoding: .data)) == payload(70_000, seed: 52))
        }
    }

    /// The coalescer holds bytes only within one delivery of reads: what arrived before the
    /// server stalled reaches the reader at once, and the body idle timeout then ends the stream.
    /// Were bytes held until more came, the reader would see nothing and time out all the same, so
    /// the test reads the bytes before the timeout ends the stream.
    @Test(arguments: [1 << 20, nil] as [Int?])
    func bytesBeforeAStallAreDeliveredThenTheIdleTimeoutEndsTheStream(coalescing: Int?) async throws {
        let body = payload(40_000, seed: 91)
        let server = try await Self.server(answering: body, .stallMidBody(afterBytes: 30_000, .seconds(30)))
        try await withClient(
            // Long enough that the bytes before the stall cannot be cut by it on a loaded machine.
            .asyncHTTPClient, server: server, configure: { $0.bodyIdleTimeout = .seconds(12) },
            transportConfiguration: {
                $0.http2ReadCoalescing = coalescing
            }
        ) { client in
            let stream = try await client.stream(Endpoint<Data>(path: "/stall", decoding: .data))
            #expect(stream.version == .http2)
            var received = Data()
            let error = await expectCourierError {
                for try await chunk in stream.body { received.append(chunk) }
            }
            #expect(error?.kind == .timeout)
            #expect(received == body.prefix(30_000))
        }
    }

    @Test
    func trailersAfterTheFramesEndTheBodyWhole() async throws {
        // RFC 9113 §8.1: trailers are a HEADERS frame after the DATA frames, ending the stream.
        // The coalescer passes the bytes it holds on before any frame that is not DATA, so the
        // body ends whole and in order, collected and streamed.
        let body = payload(200_000, seed: 81)
        let server = try await Self.server(
            answering: body, .piecesWithTrailers(size: Self.frame, trailers: [("x-checksum", "done"), ("grpc-status", "0")]))
        try await withClient(.asyncHTTPClient, server: server) { client in
            let collected = try await client.response(Endpoint<Data>(path: "/trailers", decoding: .data))
            #expect(collected.version == .http2)
            #expect(collected.value == body)
            let (_, chunks) = try await Self.chunks(client, "/trailers")
            #expect(chunks.reduce(Data(), +) == body)
            #expect(chunks.count < 196)
            // The connection still serves the next stream.
            #expect(try await client.send(Endpoint<Data>(path: "/trailers", decoding: .data)) == body)
        }
    }
}
