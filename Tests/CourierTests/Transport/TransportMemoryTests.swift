import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Large bodies both ways with bounded memory, on both transports. AsyncHTTPClient streams an
/// upload as it is produced and stops reading the socket while a reader lags behind;
/// `URLSessionTransport` spools a long streamed upload to a temporary file, and keeps what a slow
/// reader has not read in memory up to its limit and the rest in an unlinked temporary file
/// (FoundationNetworking traps when a running task is suspended). The memory figures themselves
/// are the transfer benchmark's (`Benchmarks/README.md`), not a pass/fail test's.
@Suite("Large bodies both ways, memory bounded, on both transports")
struct TransportMemoryTests {
    /// A transport of `kind`; URLSession's with a small in-memory limit and its own scratch
    /// directory, so the spill path is the one taken.
    func transport(_ kind: TransportKind, scratch: URL, memoryLimit: Int = 64 * 1024) -> (any Transport, @Sendable () async throws -> Void)
    {
        switch kind {
        case .asyncHTTPClient:
            return makeTransport(kind)
        case .urlSession:
            let transport = URLSessionTransport(responseMemoryLimit: memoryLimit, scratchDirectory: scratch)
            return (transport, { transport.shutdown() })
        }
    }

    func scratchDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("courier-memory-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Sizes of the files this process holds open under `prefix` (a path: this test's scratch
    /// directory, so parallel tests' files are not counted) that are already unlinked (Linux:
    /// `/proc/self/fd`); `nil` where that cannot be read.
    func unlinkedFiles(named prefix: String) -> [Int]? {
        #if os(Linux)
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return nil }
        var sizes: [Int] = []
        for entry in entries {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"),
                target.hasPrefix(prefix), target.hasSuffix("(deleted)")
            else { continue }
            var info = stat()
            if stat("/proc/self/fd/\(entry)", &info) == 0 { sizes.append(Int(info.st_size)) }
        }
        return sizes
        #else
        return nil
        #endif
    }

    @Test(arguments: TransportKind.allCases)
    func aLongStreamOfUnknownLengthIsUploadedWholeAndLeavesNoFileBehind(_ kind: TransportKind) async throws {
        // 6 MiB from a one-shot stream of 64 KiB chunks, length unknown: on URLSession it goes
        // through a spool file (longer than the 1 MiB sent from memory), on AsyncHTTPClient
        // straight onto the wire. Either way every byte arrives in order, and nothing stays in
        // the scratch directory.
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(6 << 20, seed: 11)
        let server = try await http1Server { request in .text("\(request.body.count) \(sha256(request.body))") }
        let (transport, shutdown) = self.transport(kind, scratch: scratch)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(120) })
        let chunks = stride(from: 0, to: content.count, by: 64 * 1024).map { content.subdata(in: $0..<min($0 + 64 * 1024, content.count)) }
        let body = RequestBody.stream(
            AsyncStream { continuation in
                for chunk in chunks { continuation.yield(chunk) }
                continuation.finish()
            })
        let answer = try await client.send(
            Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string).retry(.never))
        #expect(answer == "\(content.count) \(sha256(content))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty)
        try await shutdown()
        try await server.stop()
    }

    @Test(arguments: TransportKind.allCases, [false, true])
    func aLongStreamOfKnownLengthArrivesWholeAndFramedOnce(_ kind: TransportKind, lengthFieldSet: Bool) async throws {
        // 3 MiB from a stream that says its length. A sender MUST NOT send Content-Length in a
        // message with Transfer-Encoding (RFC 9112 §6.2): the server sees exactly one of them.
        // AsyncHTTPClient sends the length. URLSession on Linux sends the spool file as a stream,
        // which FoundationNetworking always frames as chunked on HTTP/1.1 (sending it from the
        // file instead crashed the process when the upload was cancelled: the test below), also
        // when the caller wrote a `Content-Length` field of its own.
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(3 << 20, seed: 16)
        let server = try await http1Server { request in .text("\(request.body.count) \(sha256(request.body))") }
        let (transport, shutdown) = self.transport(kind, scratch: scratch)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(120) })
        let body = RequestBody.stream(
            AsyncStream { continuation in
                continuation.yield(content)
                continuation.finish()
            }, length: content.count, contentType: "application/octet-stream")
        let fields: HTTPFields = lengthFieldSet ? [.contentLength: "\(content.count)"] : [:]
        let answer = try await client.send(
            Endpoint<String>(method: .post, path: "/upload", headers: fields, body: .body(body), decoding: .string).retry(.never))
        #expect(answer == "\(content.count) \(sha256(content))")
        // The spool file is removed, and no descriptor holds its space any more.
        #expect(
            await eventually { self.unlinkedFiles(named: scratch.path)?.isEmpty ?? true },
            "\(self.unlinkedFiles(named: scratch.path) ?? [])")
        let seen = try #require(server.requests.first)
        let length = seen.header("Content-Length")
        let coding = seen.header("Transfer-Encoding")
        #expect((length == nil) != (coding == nil), "Content-Length \(length ?? "-"), Transfer-Encoding \(coding ?? "-")")
        switch kind {
        case .asyncHTTPClient:
            #expect(length == "\(content.count)")
        case .urlSession:
            #if canImport(FoundationNetworking)
            #expect(coding?.lowercased() == "chunked")
            #endif
        }
        #expect(seen.header("Content-Type") == "application/octet-stream")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty)
        try await shutdown()
        try await server.stop()
    }

    /// A server that closes each connection, unanswered, at its second request, and answers
    /// any other with the length and digest of the body it received.
    static func closingServer() async throws -> TestServer {
        try await StaleConnectionTests.server { .text("\($0.body.count) \(sha256($0.body))") }
    }

    @Test
    func aSpooledUploadThePlatformResendsOnAFreshConnectionArrivesWhole() async throws {
        // URLSession only (AsyncHTTPClient's one resend is `StaleConnectionTests`'): the server
        // closes the connection, unanswered, at its second request, a 2 MiB PUT from a spool
        // file; libcurl sends it once more on a fresh connection, reading the body again from its
        // start: the session delegate gives it a new stream of the file (without one the resend
        // went out with an empty body, and the server answered it).
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(2 << 20, seed: 17)
        let server = try await Self.closingServer()
        let transport = URLSessionTransport(scratchDirectory: scratch)
        defer { transport.shutdown() }
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(60) })
        #expect(try await client.send(Endpoint<String>(path: "/first", decoding: .string).retry(.never)) == "0 \(sha256(Data()))")
        let body = RequestBody.stream(
            AsyncStream { continuation in
                continuation.yield(content)
                continuation.finish()
            })
        let answer = try await client.send(
            Endpoint<String>(method: .put, path: "/upload", body: .body(body), decoding: .string).retry(.never))
        #expect(answer == "\(content.count) \(sha256(content))")
        // Sent twice on the wire (the closed connection, then a fresh one), once by the pipeline.
        #expect(server.requests.filter { $0.path == "/upload" }.count == 2)
        #expect(await eventually { (try? FileManager.default.contentsOfDirectory(atPath: scratch.path))?.isEmpty == true })
        try await server.stop()
    }

    @Test
    func anUploadFromMemoryThePlatformResendsEndsAtTheDeadline() async throws {
        // URLSession on Linux only, a limit of the platform shown as it is (AsyncHTTPClient's one
        // resend is `StaleConnectionTests`'): the same closed connection under a 64 KiB PUT sent
        // from memory. libcurl resends it on a fresh connection, but FoundationNetworking cannot
        // read a body in memory again (given a new stream for it, it traps; given none, the
        // resend waits for bytes that never come): the caller gets kind `timeout` at its
        // deadline, and the server never answers the resend.
        #if canImport(FoundationNetworking)
        let content = payload(64 << 10, seed: 19)
        let server = try await Self.closingServer()
        let transport = URLSessionTransport()
        defer { transport.shutdown() }
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(60) })
        #expect(try await client.send(Endpoint<String>(path: "/first", decoding: .string).retry(.never)) == "0 \(sha256(Data()))")
        let error = await expectCourierError {
            _ = try await client.send(
                Endpoint<String>(
                    method: .put, path: "/upload", body: .data(content, contentType: "application/octet-stream"), timeout: .seconds(15),
                    decoding: .string
                ).retry(.never))
        }
        #expect(error?.kind == .timeout, "\(String(describing: error))")
        // The first attempt reached the server whole (the deadline is long, so that a slow
        // machine, or ThreadSanitizer, does not end the request before it has); the resend never did.
        #expect(server.requests.filter { $0.path == "/upload" && $0.body == content }.count == 1)
        try await server.stop()
        #endif
    }

    @Test(arguments: TransportKind.allCases, [1 << 10, 2 << 20])
    func aPostBodyWithoutATypeIsNeverLabelledAForm(_ kind: TransportKind, size: Int) async throws {
        // A body that says no `Content-Type`, sent from memory (1 KiB) or spooled (2 MiB): the
        // server never sees it labelled `application/x-www-form-urlencoded`, which
        // FoundationNetworking gives a `POST` without a type. AsyncHTTPClient sends no type.
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(size, seed: 18)
        let server = try await http1Server { request in .text("\(request.body.count)") }
        let (transport, shutdown) = self.transport(kind, scratch: scratch)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(60) })
        let body = RequestBody.stream(
            AsyncStream { continuation in
                continuation.yield(content)
                continuation.finish()
            }, length: size <= 1 << 20 ? size : nil)
        let answer = try await client.send(
            Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string).retry(.never))
        #expect(answer == "\(content.count)")
        let type = server.requests.first?.header("Content-Type")
        #expect(type == nil || type == "application/octet-stream", "\(type ?? "-")")
        try await shutdown()
        try await server.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aSlowReaderGetsEveryByteInOrder(_ kind: TransportKind) async throws {
        // The reader takes one chunk and then waits until the server has sent everything. On
        // URLSession the unread rest (beyond the 64 KiB held in memory) is then in an unlinked
        // temporary file, seen through /proc on Linux; AsyncHTTPClient instead stops reading the
        // socket, so the server's send stalls. Then the reader reads the rest: every byte, in order,
        // and the spill file is gone.
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(6 << 20, seed: 12)
        let server = try await http1Server { _ in
            ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: content)
        }
        let (transport, shutdown) = self.transport(kind, scratch: scratch)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(120) })
        let response = try await client.stream(Endpoint<Data>(path: "/big", decoding: .data))
        var iterator = response.body.makeAsyncIterator()
        var received = Data()
        if let first = try await iterator.next() { received.append(first) }
        let spillFiles = scratch.appendingPathComponent("courier-response-").path
        if kind == .urlSession, self.unlinkedFiles(named: spillFiles) != nil {
            // Everything but what memory holds (64 KiB) and the last write batch (up to 1 MiB,
            // written to the file once it is full) ends up in the file while the reader waits.
            let spilled = await eventually(seconds: 60) {
                (self.unlinkedFiles(named: spillFiles) ?? []).contains { $0 >= content.count - received.count - 64 * 1024 - (1 << 20) }
            }
            #expect(spilled, "the unread body did not go to the spill file: \(self.unlinkedFiles(named: spillFiles) ?? [])")
        }
        while let chunk = try await iterator.next() { received.append(chunk) }
        #expect(received.count == content.count)
        #expect(received == content)
        #expect(self.unlinkedFiles(named: spillFiles)?.isEmpty ?? true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty)
        try await shutdown()
        try await server.stop()
    }

    @Test
    func aReaderThatFallsTooFarBehindFailsTypedAndTheSpillStaysBounded() async throws {
        // URLSession only: AsyncHTTPClient stops reading the socket for a slow reader and never
        // spills (`aSlowReaderGetsEveryByteInOrder`). FoundationNetworking cannot pause a
        // transfer, so a reader that never catches up (or an endless body, or one libcurl
        // decompressed a thousandfold) spilled without end and could fill the disk.
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let length = 64 << 20
        let limit = 4 << 20
        let server = try await http1Server { _ in ScriptedResponse(behaviour: .generated(length: length)) }
        let transport = URLSessionTransport(responseMemoryLimit: 64 * 1024, responseSpillLimit: limit, scratchDirectory: scratch)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(120) })
        let response = try await client.stream(Endpoint<Data>(path: "/endless", decoding: .data))
        // Nothing is read until the session has delivered past the limit and the buffer failed.
        #expect(await eventually(seconds: 60) { transport.bufferFailures.withLock { $0 } == 1 })
        let spillFiles = scratch.appendingPathComponent("courier-response-").path
        let sizes = self.unlinkedFiles(named: spillFiles) ?? []
        #expect(sizes.allSatisfy { $0 <= limit }, "\(sizes)")
        var received = 0
        var onlyFiller = true
        let error = await expectCourierError {
            for try await chunk in response.body {
                received += chunk.count
                onlyFiller = onlyFiller && chunk.allSatisfy { $0 == UInt8(ascii: "a") }
            }
        }
        #expect(error?.kind == .responseTooLarge, "\(String(describing: error))")
        // What was buffered comes first, whole: the limit's worth, never the whole body.
        #expect(received > 0 && received <= limit)
        #expect(onlyFiller)
        #expect(await eventually { self.unlinkedFiles(named: spillFiles)?.isEmpty ?? true })
        transport.shutdown()
        try await server.stop()
    }

    @Test
    func aResponseThatCannotSpillFailsTypedAfterWhatMemoryHeld() async throws {
        // URLSession only: AsyncHTTPClient applies backpressure and never spills. With no
        // directory to spill to, the reader still gets the bytes memory held, in order, and then a
        // `transport` error that says why — never a crash, never a silently short body.
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("courier-missing-\(UUID().uuidString)")
        let content = payload(4 << 20, seed: 13)
        let server = try await http1Server { _ in
            ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: content)
        }
        let transport = URLSessionTransport(responseMemoryLimit: 64 * 1024, scratchDirectory: missing)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(60) })
        let response = try await client.stream(Endpoint<Data>(path: "/big", decoding: .data))
        // Nothing is read until the session has delivered past the limit and the spill failed.
        #expect(await eventually { transport.bufferFailures.withLock { $0 } == 1 })
        var received = Data()
        let error = await expectCourierError {
            for try await chunk in response.body { received.append(chunk) }
        }
        #expect(error?.kind == .transport)
        #expect(error?.message.contains("could not be buffered") == true, "\(String(describing: error))")
        #expect(received.count < content.count)
        #expect(received == content.prefix(received.count))
        transport.shutdown()
        try await server.stop()
    }

    @Test
    func anUploadThatCannotBeSpooledFailsTypedBeforeAnythingIsSent() async throws {
        // URLSession only (AsyncHTTPClient streams and never spools): a stream longer than what is
        // sent from memory, with no directory to spool to, is a `transport` error naming the
        // directory, and the server never sees the request.
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("courier-missing-\(UUID().uuidString)")
        let server = try await http1Server { _ in .text("ok") }
        let transport = URLSessionTransport(scratchDirectory: missing)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let body = RequestBody.stream(
            AsyncStream { continuation in
                continuation.yield(payload(2 << 20, seed: 14))
                continuation.finish()
            })
        let error = await expectCourierError {
            _ = try await client.send(Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string).retry(.never))
        }
        #expect(error?.kind == .transport)
        #expect(error?.message.contains(missing.path) == true, "\(String(describing: error))")
        #expect(server.requests.isEmpty)
        transport.shutdown()
        try await server.stop()
    }

    /// Transfers × cancellation: long streamed uploads cancelled while they go out, at many
    /// points of their way, end with kind `cancelled`, never crash the process, and leave no
    /// spooled file behind; the transport then sends the next upload whole.
    ///
    /// URLSession only: AsyncHTTPClient streams an upload as it is produced and spools nothing.
    @Test
    func spooledUploadsCancelledOnTheirWayEndCancelledAndLeaveNoFile() async throws {
        let scratch = try self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let content = payload(4 << 20, seed: 15)
        let server = try await http1Server { request in .text("\(request.body.count)") }
        let transport = URLSessionTransport(scratchDirectory: scratch)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.timeout = .seconds(60) })
        var kinds: [CourierError.Kind?] = []
        for round in 0..<40 {
            let sending = Task { try await client.send(streamedUpload(content)) }
            // The cancel lands at a different point of each upload's way (spooling, the task being
            // made, the body going out): a spread of moments, not a wait for a state.
            try await Task.sleep(for: .microseconds(round * 500))
            sending.cancel()
            do {
                let answer = try await sending.value
                // Sent whole before the cancel.
                #expect(answer == "\(content.count)")
                kinds.append(nil)
            } catch let error as CourierError {
                kinds.append(error.kind)
            } catch {
                Issue.record("not a CourierError: \(error)")
            }
        }
        #expect(kinds.allSatisfy { $0 == nil || $0 == .cancelled }, "\(kinds)")
        #expect(kinds.contains(.cancelled))
        // Every spooled file is removed once its task has ended.
        #expect(await eventually { (try? FileManager.default.contentsOfDirectory(atPath: scratch.path))?.isEmpty == true })
        #expect(try await client.send(streamedUpload(content)) == "\(content.count)")
        transport.shutdown()
        try await server.stop()
    }
}
