import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@Suite("Streaming responses and compression")
struct StreamingAndCompressionTests {
    static let eventStream =
        "\u{FEFF}data: hello\n\n: a comment\nevent: update\ndata: 1\ndata:2\nid: 7\n\nretry: 1500\ndata: x\r\n\r\ndata: unterminated"

    static func origin(_ request: RecordedRequest) async -> ScriptedResponse {
        switch request.path {
        case "/lines":
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "text/plain")], body: Data("one\r\ntwo\nthree\rfour\r\n\r\nlast".utf8),
                behaviour: .chunked(chunkSize: 3, delay: .zero))
        case "/events":
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "text/event-stream")], body: Data(Self.eventStream.utf8),
                behaviour: .chunked(chunkSize: 4, delay: .zero))
        case "/endless-event":
            // One small event, then 4 MiB of data lines that never end an event.
            let line = "data: " + String(repeating: "x", count: 1017) + "\n"
            let body = "data: first\n\n" + String(repeating: line, count: 4096)
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "text/event-stream")], body: Data(body.utf8),
                behaviour: .chunked(chunkSize: 64 * 1024, delay: .zero))
        case "/missing":
            return .text("gone", status: 404)
        case "/echo-gzip":
            // Sends the (compressed) request body back, labelled as gzip.
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/json"), ("Content-Encoding", "gzip")], body: request.body)
        default:
            return .text("not found", status: 404)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStreamedBodyArrivesInChunksAndSplitsIntoLines(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(kind, server: server) { client in
            let chunked = try await client.stream(Endpoint<Data>(path: "/lines", decoding: .data))
            var chunks = 0
            var bytes = Data()
            for try await chunk in chunked.body {
                chunks += 1
                bytes += chunk
            }
            #expect(chunks > 1)
            #expect(bytes == Data("one\r\ntwo\nthree\rfour\r\n\r\nlast".utf8))

            var lines: [String] = []
            for try await line in try await client.stream(Endpoint<Data>(path: "/lines", decoding: .data)).lines() { lines.append(line) }
            #expect(lines == ["one", "two", "three", "four", "", "last"])

            let error = await expectCourierError { _ = try await client.stream(Endpoint<Data>(path: "/missing", decoding: .data)) }
            #expect(error?.kind == .httpStatus)
            #expect(error?.body == Data("gone".utf8))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func serverSentEventsAreParsedAsTheyArrive(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(kind, server: server) { client in
            var events: [ServerSentEvent] = []
            for try await event in try await client.stream(Endpoint<Data>(path: "/events", decoding: .data)).events() {
                events.append(event)
            }
            #expect(
                events == [
                    ServerSentEvent(data: "hello"),
                    ServerSentEvent(event: "update", data: "1\n2", id: "7"),
                    ServerSentEvent(data: "x", id: "7", retry: 1500),
                ])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anEventLargerThanTheLimitFailsTypedAfterTheEventsBeforeIt(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(kind, server: server) { client in
            var events: [ServerSentEvent] = []
            let error = await expectCourierError {
                for try await event in try await client.stream(Endpoint<Data>(path: "/endless-event", decoding: .data)).events() {
                    events.append(event)
                }
            }
            #expect(events == [ServerSentEvent(data: "first")])
            #expect(error?.kind == .responseTooLarge)
            #expect(error?.limit == 1 << 20)

            // A lower limit applies as given; a limit of the longest data (the unfinished
            // "unterminated", 12 bytes) lets every event through.
            let small = await expectCourierError {
                for try await _ in try await client.stream(Endpoint<Data>(path: "/events", decoding: .data)).events(maxEventSize: 2) {}
            }
            #expect(small?.kind == .responseTooLarge)
            var exact: [ServerSentEvent] = []
            for try await event in try await client.stream(Endpoint<Data>(path: "/events", decoding: .data)).events(maxEventSize: 12) {
                exact.append(event)
            }
            #expect(exact.map(\.data) == ["hello", "1\n2", "x"])
            // A limit of Int.max (no limit) must not overflow.
            var unbounded: [ServerSentEvent] = []
            for try await event in try await client.stream(Endpoint<Data>(path: "/events", decoding: .data)).events(maxEventSize: .max) {
                unbounded.append(event)
            }
            #expect(unbounded.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aLineLongerThanTheLimitFailsTyped(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                for try await _ in try await client.stream(Endpoint<Data>(path: "/lines", decoding: .data)).lines(maxLineLength: 3) {}
            }
            #expect(error?.kind == .responseTooLarge)
        }
    }

    static func compressed(_ text: String, tool: [String]) async throws -> Data {
        try await runTool(tool, input: Data(text.utf8))
    }

    @Test(arguments: TransportKind.allCases, ["gzip", "deflate (zlib)", "deflate (raw)"])
    func compressedResponsesAreDecodedTransparently(_ kind: TransportKind, _ coding: String) async throws {
        let json = #"{"id":9,"title":"\#(String(repeating: "squeeze ", count: 200))"}"#
        // Made by independent encoders: the gzip tool and Python's zlib.
        let body: Data
        switch coding {
        case "gzip": body = try await Self.compressed(json, tool: ["gzip", "-c"])
        case "deflate (zlib)":
            body = try await Self.compressed(
                json, tool: ["python3", "-c", "import sys, zlib; sys.stdout.buffer.write(zlib.compress(sys.stdin.buffer.read()))"])
        default:
            body = try await Self.compressed(
                json,
                tool: [
                    "python3", "-c",
                    "import sys, zlib; c = zlib.compressobj(wbits=-15); sys.stdout.buffer.write(c.compress(sys.stdin.buffer.read()) + c.flush())",
                ])
        }
        #expect(body.count < json.utf8.count / 4)
        let server = try await http1Server { _ in
            ScriptedResponse(
                status: 200,
                headers: [("Content-Type", "application/json"), ("Content-Encoding", coding.hasPrefix("gzip") ? "gzip" : "deflate")],
                body: body)
        }
        try await withClient(kind, server: server) { client in
            let response = try await client.response(Endpoint<Article>(path: "/article"))
            #expect(response.value.id == 9)
            #expect(response.headers[.contentEncoding] == nil)
            #expect(server.requests.first?.header("Accept-Encoding") == "gzip, deflate")
            var streamed = Data()
            for try await chunk in try await client.stream(Endpoint<Data>(path: "/article", decoding: .data)).body { streamed += chunk }
            #expect(streamed == Data(json.utf8))
        }
    }

    @Test
    func aDecompressionBombFailsTypedWithoutExpanding() async throws {
        // URLSession differs: libcurl inflates the body itself, and both the collected and the streamed call fail as .transport ("Failed writing received data to disk/application"), not .responseTooLarge
        // 256 MiB of zeros compress to about 250 KB.
        var zeros = Data(count: 1 << 20)
        var bomb = Data()
        let chunk = try Gzip.compress(zeros)
        zeros = Data()
        #expect(chunk.count < 2_000)
        // gzip members may be concatenated; each decodes to 1 MiB, but we stop at the limits.
        for _ in 0..<256 { bomb += chunk }
        let bombBody = bomb
        let server = try await http1Server { _ in
            ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/octet-stream"), ("Content-Encoding", "gzip")], body: bombBody)
        }
        try await withClient(.asyncHTTPClient, server: server) { client in
            // Collected: the client's maximum response size (10 MiB) stops it.
            let collected = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/bomb", decoding: .data)) }
            #expect(collected?.kind == .responseTooLarge)
            // Streamed: the ratio limit stops it.
            let streamed = await expectCourierError {
                for try await _ in try await client.stream(Endpoint<Data>(path: "/bomb", decoding: .data)).body {}
            }
            #expect(streamed?.kind == .responseTooLarge)
            #expect(streamed?.message.contains("expands") == true)
        }
    }

    /// Corrupt gzip and an unknown coding are kind `decoding` on both transports; a truncated
    /// gzip body is `transport` on AsyncHTTPClient.
    ///
    /// URLSession differs for truncation: libcurl decodes the body itself on Linux and accepts gzip
    /// missing its last 6 trailer bytes (the decoded value arrives), so that case runs on
    /// AsyncHTTPClient only.
    @Test(arguments: [
        ("corrupt", TransportKind.asyncHTTPClient), ("corrupt", .urlSession), ("unsupported", .asyncHTTPClient),
        ("unsupported", .urlSession), ("truncated", .asyncHTTPClient),
    ])
    func badCompressedDataFailsTyped(_ damage: String, _ kind: TransportKind) async throws {
        var body = try Gzip.compress(Data(#"{"id":1,"title":"t"}"#.utf8))
        var encoding = "gzip"
        switch damage {
        case "corrupt":
            body[body.count / 2] ^= 0xff
            body[12] ^= 0x55
        case "truncated": body = body.prefix(body.count - 6)
        default: encoding = "br"
        }
        let (sentBody, sentEncoding) = (body, encoding)
        let server = try await http1Server { _ in
            ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/json"), ("Content-Encoding", sentEncoding)], body: sentBody)
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/a")) }
            #expect(error?.kind == (damage == "truncated" ? .transport : .decoding))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestBodyIsGzippedWhenTheEndpointAsks(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        let original = #"{"id":3,"title":"\#(String(repeating: "compress me ", count: 100))"}"#
        try await withClient(kind, server: server) { client in
            var endpoint = Endpoint<Article>(
                method: .post, path: "/echo-gzip", body: .data(Data(original.utf8), contentType: "application/json"))
            endpoint.compressesRequestBody = true
            let echoed = try await client.send(endpoint)
            let received = try #require(server.requests.first)
            #expect(received.header("Content-Encoding") == "gzip")
            #expect(received.body.count < original.utf8.count / 4)
            // An independent decoder agrees.
            let unzipped = try await runTool(["gzip", "-dc"], input: received.body)
            #expect(unzipped == Data(original.utf8))
            #expect(echoed.id == 3)
        }
    }
}
