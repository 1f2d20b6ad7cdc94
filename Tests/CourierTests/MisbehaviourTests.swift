import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@Suite("A misbehaving server yields the right CourierError")
struct MisbehaviourTests {
    @Test(arguments: TransportKind.allCases)
    func closeBeforeRespondingIsATransportError(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/close-before")) }
            #expect(error?.kind == .transport)
        }
    }

    @Test(arguments: TransportKind.allCases, ["000", "050", "099"])
    func anHTTP1StatusBelow100IsATransportErrorAndTheClientGoesOn(kind: TransportKind, status: String) async throws {
        // RFC 9110 §15: a status code is three digits from 100 to 599 (and up to 999 read). NIO's
        // parser takes `099`, which AsyncHTTPClient then handled as an informational response
        // and trapped on the body after it: one hostile status line stopped the process.
        let server = try await http1Server { request in
            guard request.path == "/bad-status" else { return await Routes.standard(request) }
            return ScriptedResponse(behaviour: .rawResponse("HTTP/1.1 \(status) X\r\nContent-Length: 1\r\n\r\nx"))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/bad-status", decoding: .data)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// RFC 9110 §7.8: a server MUST NOT switch to a protocol the request's `Upgrade` did not
    /// name, and Courier's requests name none; a 101 is then no answer to read.
    @Test(arguments: TransportKind.allCases)
    func anUnaskedForSwitchingProtocolsIsATransportErrorAndTheClientGoesOn(kind: TransportKind) async throws {
        let server = try await http1Server { request in
            guard request.path == "/switch" else { return await Routes.standard(request) }
            return ScriptedResponse(
                behaviour: .rawResponse(
                    "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                        + "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/switch", decoding: .data)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// A status line of an HTTP version Courier does not speak (RFC 9112 §2.3: a major version
    /// 1 with a minor one above 1, or another major version) is a malformed answer from the
    /// server, kind `transport`, on both transports; URLSession once called it an invalid request.
    @Test(arguments: TransportKind.allCases, ["HTTP/1.2", "HTTP/3.7"])
    func aStatusLineOfAnUnknownHTTPVersionIsATransportError(kind: TransportKind, version: String) async throws {
        let server = try await http1Server { request in
            guard request.path == "/version" else { return await Routes.standard(request) }
            return ScriptedResponse(behaviour: .rawResponse("\(version) 200 OK\r\nContent-Length: 1\r\n\r\nx"))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/version", decoding: .data)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// The message of a malformed answer quotes what the platform said, never the URL asked for,
    /// whose query may hold a key or a signature (URLSession put the failing URL among its texts).
    @Test(arguments: TransportKind.allCases)
    func aMalformedAnswersMessageHoldsNothingOfTheURL(kind: TransportKind) async throws {
        let server = try await http1Server { request in
            guard request.path.hasPrefix("/version") else { return await Routes.standard(request) }
            return ScriptedResponse(behaviour: .rawResponse("HTTP/1.2 200 OK\r\nContent-Length: 1\r\n\r\nx"))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(path: "/version?api_key=SECRETK&X-Amz-Credential=SECRETC", decoding: .data))
            }
            #expect(error?.kind == .transport)
            #expect(error?.message.contains("SECRET") == false, "\(error?.message ?? "")")
        }
    }

    /// An answer that is no HTTP at all (another protocol's greeting on the port) is a malformed
    /// answer from the server, kind `transport`, on both transports; URLSession called it an
    /// invalid request and blamed the URL (libcurl reads it as HTTP/0.9, which it refuses).
    @Test(arguments: TransportKind.allCases, ["SSH-2.0-OpenSSH_9.6\r\n", "hello\r\n\r\n"])
    func anAnswerThatIsNoHTTPIsATransportError(kind: TransportKind, answer: String) async throws {
        let server = try await http1Server { request in
            guard request.path == "/other" else { return await Routes.standard(request) }
            return ScriptedResponse(behaviour: .rawResponse(answer))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/other", decoding: .data)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// A `Content-Length` past what a signed 64-bit count holds is an oversized answer; one that
    /// is not a number (`2x`, `+2`), or past even an unsigned 64-bit count (which AsyncHTTPClient's
    /// parser refuses), is a malformed one (RFC 9110 §8.6, RFC 9112 §6.3 ¶5), alike on both
    /// transports. URLSession read the large ones as "no length" and the others as 2, and
    /// returned the bytes it got as a success.
    @Test(arguments: TransportKind.allCases, ["10000000000000000000", "99999999999999999999", "2x", "+2"])
    func aContentLengthThatIsNoCountIsRefusedAlike(kind: TransportKind, length: String) async throws {
        let server = try await http1Server { request in
            guard request.path == "/length" else { return await Routes.standard(request) }
            return ScriptedResponse(behaviour: .rawResponse("HTTP/1.1 200 OK\r\nContent-Length: \(length)\r\n\r\nok"))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/length", decoding: .data)) }
            let expected: CourierError.Kind = length.allSatisfy(\.isWholeNumber) && UInt64(length) != nil ? .responseTooLarge : .transport
            #expect(error?.kind == expected, "\(String(describing: error))")
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// RFC 9112 §6.3 ¶3: a response with both `Transfer-Encoding` and `Content-Length` — the
    /// mark of response splitting — "ought to be handled as an error"; the length is no length
    /// of the body either way. URLSession (libcurl de-chunks it) took the length for the body's
    /// and refused five bytes as too large, or announced a wrong size.
    @Test(arguments: TransportKind.allCases, ["99999999", "3"])
    func aResponseWithTransferEncodingAndContentLengthIsRefusedAlike(kind: TransportKind, length: String) async throws {
        let server = try await http1Server { request in
            guard request.path == "/both" else { return await Routes.standard(request) }
            return ScriptedResponse(
                behaviour: .rawResponse(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: \(length)\r\nConnection: close\r\n\r\n"
                        + "5\r\nhello\r\n0\r\n\r\n"))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/both", decoding: .data)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            let streamed = await expectCourierError { _ = try await client.stream(Endpoint<Data>(path: "/both", decoding: .data)) }
            #expect(streamed?.kind == .transport, "\(String(describing: streamed))")
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    @Test(arguments: TransportKind.allCases, [5, 20])
    func aRequestBodyThatBreaksItsAnnouncedLengthIsRefusedAlikeAndNotRetried(kind: TransportKind, sent: Int) async throws {
        // A streamed body announced as 10 bytes that brings 5 or 20 (a file that changed after it
        // was measured): AsyncHTTPClient failed it as a transport error, which was retried, and
        // URLSession sent the other number of bytes without a word. Both refuse it now.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let sends = Locked(0)
            let body = RequestBody.stream(length: 10, contentType: "application/octet-stream") {
                sends.withLock { $0 += 1 }
                return ByteStream(chunks: [Data(repeating: 0x61, count: sent)])
            }
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(method: .put, path: "/echo", body: .body(body), decoding: .data))
            }
            #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
            #expect(error?.message.contains("announced") == true)
            #expect(server.requests.isEmpty)
            // Replayable, idempotent, and still sent once: the failure is not retried.
            #expect(sends.withLock { $0 } == 1)
            // The same body at its announced length goes through.
            let right = RequestBody.stream(length: 10, contentType: "application/octet-stream") {
                ByteStream(chunks: [Data(repeating: 0x61, count: 10)])
            }
            _ = try await client.send(Endpoint<Data>(method: .put, path: "/echo", body: .body(right), decoding: .data))
            #expect(server.requests.count == 1)
            #expect(server.requests.first?.body.count == 10)
        }
    }

    @Test(arguments: TransportKind.allCases, [5, 20])
    func aCompressedRequestBodyThatBreaksItsAnnouncedLengthIsRefusedToo(kind: TransportKind, sent: Int) async throws {
        // Compressed, the body goes out chunked with no length of its own: the plain stream is
        // still held to the length it announced, or a file that changed went out as a valid
        // gzip of other bytes and the server answered 2xx.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let sends = Locked(0)
            let body = RequestBody.stream(length: 10, contentType: "application/octet-stream") {
                sends.withLock { $0 += 1 }
                return ByteStream(chunks: [Data(repeating: 0x61, count: sent)])
            }
            var endpoint = Endpoint<Data>(method: .put, path: "/echo", body: .body(body), decoding: .data)
            endpoint.compressesRequestBody = true
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
            #expect(error?.message.contains("announced") == true)
            #expect(server.requests.isEmpty)
            #expect(sends.withLock { $0 } == 1)
        }
    }

    /// Sets the request's body to one whose content type carries a line break, as a middleware
    /// that passes on an untrusted value would.
    struct BodyWithContentType: Middleware {
        let contentType: String
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            var request = request
            request.body = .data(Data("x".utf8), contentType: self.contentType)
            return try await next(request)
        }
    }

    @Test(
        arguments: TransportKind.allCases,
        ["text/plain\r\nX-Injected: yes", "text/plain\nX-Injected: yes", "text/plain\0", "text/plain\u{0B}", "text/plain\u{7F}"])
    func aBodysContentTypeWithAControlCharacterIsRefusedNotSent(kind: TransportKind, contentType: String) async throws {
        // RFC 9110 §5.5: CR, LF, NUL and the other control characters but a tab are never valid
        // in a field value (a line break would smuggle another field). A body's content type
        // is a field value too, whether the endpoint or a middleware set it: refused as the
        // endpoint's own header fields are, before anything reaches the server.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(
                    Endpoint<Data>(
                        method: .put, path: "/echo", body: .body(.data(Data("x".utf8), contentType: contentType)), decoding: .data))
            }
            #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
            #expect(server.requests.isEmpty)
        }
        let viaMiddleware = try await http1Server()
        try await withClient(kind, server: viaMiddleware, configure: { $0.middleware = [BodyWithContentType(contentType: contentType)] }) {
            client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(method: .put, path: "/echo", decoding: .data))
            }
            #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
            #expect(viaMiddleware.requests.isEmpty)
        }
        // A plain content type from the same middleware goes through as it is.
        let plain = try await http1Server()
        try await withClient(kind, server: plain, configure: { $0.middleware = [BodyWithContentType(contentType: "text/plain")] }) {
            client in
            _ = try await client.send(Endpoint<Data>(method: .put, path: "/echo", decoding: .data))
            #expect(plain.requests.count == 1)
            #expect(plain.requests.first?.headers.first { $0.0.lowercased() == "content-type" }?.1 == "text/plain")
        }
    }

    /// Collects the response's body and hands on the same response, whose body has then been read.
    struct ReadsTheBodyFirst: Middleware {
        func intercept(_ request: Request, next: Next) async throws -> RawResponse {
            let response = try await next(request)
            _ = try await response.body.collect(upTo: 1 << 20)
            return response
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStreamedBodyReadTwiceFailsTypedInsteadOfTrappingOrLookingEmpty(kind: TransportKind) async throws {
        // AsyncHTTPClient's body traps on a second iterator (the process died); URLSession's
        // ended at once, as an empty body that succeeded. Both refuse the second read now.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let response = try await client.stream(Endpoint<Data>(path: "/chunked", decoding: .data))
            var first = 0
            for try await chunk in response.body { first += chunk.count }
            #expect(first > 0)
            let again = await expectCourierError { for try await _ in response.body {} }
            #expect(again?.kind == .invalidRequest, "\(String(describing: again))")
            // A second reader's refusal leaves the first reader's body alone: it reads on to the end.
            let whole = try await client.send(Endpoint<Data>(path: "/chunked", decoding: .data))
            let reading = try await client.stream(Endpoint<Data>(path: "/chunked", decoding: .data))
            var iterator = reading.body.makeAsyncIterator()
            var read = try await iterator.next()?.count ?? 0
            let second = await expectCourierError { for try await _ in reading.body {} }
            #expect(second?.kind == .invalidRequest)
            while let chunk = try await iterator.next() { read += chunk.count }
            #expect(read == whole.count)
        }
        let collected = try await http1Server()
        try await withClient(kind, server: collected, configure: { $0.middleware = [ReadsTheBodyFirst()] }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/chunked", decoding: .data)) }
            #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func closeMidBodyIsATransportErrorNotATruncatedSuccess(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/close-mid", decoding: .data)) }
            #expect(error?.kind == .transport)
        }
    }

    /// A status the endpoint does not accept is the answer whatever the size of its body (an
    /// error page past the maximum response size): kind `httpStatus` with the status and fields,
    /// without the body. It was `responseTooLarge`, so a 401 did not ask for a new sign-in and a
    /// 503 was counted as a size failure. An accepted status with such a body still is one.
    @Test(arguments: TransportKind.allCases)
    func aRejectedStatusWithABodyTooLargeIsStillThatStatus(_ kind: TransportKind) async throws {
        let page = String(repeating: "<p>unavailable</p>", count: 200)
        let server = try await http1Server { request in
            .text(page, status: request.path == "/ok" ? 200 : Int(request.path.dropFirst()) ?? 500, headers: [("X-Trace", "page")])
        }
        try await withClient(kind, server: server, configure: { $0.maxResponseSize = 1000 }) { client in
            for status in [401, 503] {
                let error = await expectCourierError {
                    _ = try await client.send(Endpoint<Data>(path: "/\(status)", decoding: .data).retry(.never))
                }
                #expect(error?.kind == .httpStatus, "\(status)")
                #expect(error?.status?.code == status)
                #expect(error?.headers?[HTTPField.Name("X-Trace")!] == "page")
                #expect(error?.body == nil)
            }
            let accepted = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/ok", decoding: .data)) }
            #expect(accepted?.kind == .responseTooLarge)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBodyLostAfterTheHeadCarriesTheStatusAndFieldsOfItsResponse(kind: TransportKind) async throws {
        // A caller (the outbox, say) must tell a request the server answered from one it may
        // never have seen: the error of a body too large or cut short names the response's head.
        let server = try await http1Server { request in
            switch request.path {
            case "/big": return .json(String(repeating: "x", count: 5000), status: 201, headers: [("X-Trace", "big")])
            default:
                return .json(String(repeating: "x", count: 800), status: 202, headers: [("X-Trace", "cut")]).with(
                    .closeMidBody(afterBytes: 100))
            }
        }
        try await withClient(kind, server: server, configure: { $0.maxResponseSize = 1000 }) { client in
            let big = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/big", decoding: .data)) }
            #expect(big?.kind == .responseTooLarge)
            #expect(big?.status?.code == 201)
            #expect(big?.headers?[HTTPField.Name("X-Trace")!] == "big")
            let cut = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/cut", decoding: .data)) }
            #expect(cut?.kind == .transport)
            #expect(cut?.status?.code == 202)
            #expect(cut?.headers?[HTTPField.Name("X-Trace")!] == "cut")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func stallingServerTimesOut(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "/stall", timeout: .milliseconds(300)))
            }
            #expect(error?.kind == .timeout)
        }
    }

    @Test
    func bodyThatStallsCompletelyEndsWithTheIdleReadTimeout() async throws {
        // AsyncHTTPClient only: the idle read timeout is a transportConfiguration setting
        let server = try await http1Server()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.readTimeout = .milliseconds(300) }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/slow-body")) }
            #expect(error?.kind == .timeout)
        }
    }

    /// Over HTTP/2 too (RFC 9113: the read timeout closes the connection, which ends its
    /// streams without an error of their own): a stalled server is kind `timeout`, once — not a
    /// connection that closed under the request, sent again as a stale one (RFC 9110 §9.2.2
    /// allows that only for a request the server never saw) and then reported as a connection
    /// that could not be made. AsyncHTTPClient only: the read timeout is its transport's setting.
    @Test(arguments: ["/stall", "/slow-body"])
    func aStalledHTTP2ServerIsATimeoutSentOnce(_ path: String) async throws {
        let server = try await tlsServer()
        try await withClient(
            .asyncHTTPClient, server: server, configure: { $0.retry = .never },
            // Seconds, not less: the handshake and the request's write must not be cut by it.
            transportConfiguration: { $0.readTimeout = .seconds(3) }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: path)) }
            #expect(error?.kind == .timeout, "\(error?.description ?? "")")
            #expect(error?.couldNotConnect == false)
            #expect(server.requests.filter { $0.path == path }.count == 1)
        }
    }

    @Test
    func aReaderThatPausesLongerThanTheReadTimeoutStillGetsEveryByte() async throws {
        // AsyncHTTPClient only: the read timeout is its transport's setting (`URLSessionTransport`
        // has none of its own). A reader that pauses makes the transport stop reading the socket
        // (back-pressure); the server's silence then was taken for a stalled server, and the
        // body failed with kind `timeout` blaming it.
        // (A read timeout of 5 s, not less: this path must succeed, and a loaded machine can hold
        // the event loop for seconds while a read is pending.)
        let server = try await http1Server()
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.readTimeout = .seconds(5) }) { client in
            let response = try await client.stream(Endpoint<Data>(path: "/big-announced", decoding: .data))
            var iterator = response.body.makeAsyncIterator()
            var received = try await iterator.next()?.count ?? 0
            // Two read timeouts and more, with the body unread: the timeout would have fired by
            // now (its check runs four times per timeout).
            try await Task.sleep(for: .seconds(11))
            while let chunk = try await iterator.next() { received += chunk.count }
            #expect(received == 4 << 20)
            // A stalled server still times out.
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/slow-body")) }
            #expect(error?.kind == .timeout)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func bodyTricklingPastTheDeadlineTimesOut(kind: TransportKind) async throws {
        let server = try await http1Server { _ in
            // 1,000 chunks 100 ms apart: the body could not end before the deadline however slow the machine.
            .text(String(repeating: "x", count: 4000)).with(.chunked(chunkSize: 4, delay: .milliseconds(100)))
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<String>(path: "/trickle", timeout: .milliseconds(350), decoding: .string))
            }
            #expect(error?.kind == .timeout)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func malformedResponseIsATransportError(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/malformed")) }
            #expect(error?.kind == .transport)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func truncatedHeadIsATransportError(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/truncated")) }
            #expect(error?.kind == .transport)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func bytesBeyondTheAnnouncedLengthAreNeverDelivered(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            // The announced 10 bytes are the response; the extra bytes are not part of it.
            do {
                let text = try await client.send(Endpoint<String>(path: "/larger", decoding: .string))
                #expect(text == "0123456789")
            } catch let error as CourierError {
                #expect(error.kind == .transport)
            }
            // The connection with garbage on it is not reused for the next request.
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aHeadResponsesContentLengthIsNoSizeOfItsBody(kind: TransportKind) async throws {
        // RFC 9110 §9.3.2 and §8.6: the answer to HEAD carries the Content-Length a GET would
        // get; RFC 9112 §6.3: it has no content. An 11 MiB resource under a 1 MiB limit: the
        // HEAD succeeds (deduplicated, so its empty body is read), the GET fails as too large.
        let size = 11 << 20
        let server = try await http1Server { _ in
            ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: Data(count: size))
        }
        try await withClient(kind, server: server, configure: { $0.maxResponseSize = 1 << 20 }) { client in
            let head = try await client.response(Endpoint<Data>(method: .head, path: "/big", decoding: .data))
            #expect(head.status.code == 200)
            #expect(head.value.isEmpty)
            #expect(head.headers[.contentLength] == "\(size)")
            let get = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/big", decoding: .data)) }
            #expect(get?.kind == .responseTooLarge)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func announcedLengthOverTheLimitFailsWithoutReading(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.maxResponseSize = 1 << 20 }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/big-announced", decoding: .data)) }
            #expect(error?.kind == .responseTooLarge)
            #expect(error?.limit == 1 << 20)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func streamedBodyOverTheLimitStopsReadingAndFails(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.maxResponseSize = 1 << 20 }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/big-chunked", decoding: .data)) }
            #expect(error?.kind == .responseTooLarge)
            if kind == .asyncHTTPClient {
                // With back-pressure, the client hangs up long before the 32 MiB body has been
                // written: reading stopped at the limit.
                #expect(await eventually { server.abandonedCount == 1 })
            }
            // URLSession on Linux has no back-pressure: libcurl may receive the rest before the
            // cancellation lands; the transport drops it, and the caller still gets the typed error.
        }
    }

    @Test(arguments: TransportKind.allCases)
    func chunkedBodyArrivingInPiecesIsReassembled(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let received = try await client.send(Endpoint<Article>(path: "/chunked"))
            #expect(received == Article(id: 7, title: "in many small pieces"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func connectionRefusedIsATransportError(kind: TransportKind) async throws {
        let refusing = try RefusingPort()
        let port = refusing.port
        defer { withExtendedLifetime(refusing) {} }
        let ahc = AsyncHTTPClientTransport()
        let transport: any Transport = kind == .asyncHTTPClient ? ahc : URLSessionTransport()
        let client = Client(configuration: .init(transport: transport, baseURL: URL(string: "http://127.0.0.1:\(port)")!))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
        #expect(error?.kind == .transport)
        try await ahc.shutdown()
    }
}
