import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Crypto
import Foundation
import HTTPTypes
import Testing

/// Runs a command with `input` on standard input and returns its standard output (its blocking
/// reads and writes on threads of their own).
func runTool(_ arguments: [String], input: Data) async throws -> Data {
    try await onOwnThread {
        let stdin = makePipe()
        let stdout = makePipe()
        let process: ChildProcess
        do {
            process = try ChildProcess(executable: "/usr/bin/env", arguments: arguments, stdin: stdin.read, stdout: stdout.write)
        } catch {
            for fd in [stdin.read, stdin.write, stdout.read, stdout.write] { close(fd) }
            throw error
        }
        close(stdin.read)
        close(stdout.write)
        let writer = FileHandle(fileDescriptor: stdin.write, closeOnDealloc: true)
        Thread {
            writeAll(input, to: writer)
            try? writer.close()
        }.start()
        let output = readToEnd(FileHandle(fileDescriptor: stdout.read, closeOnDealloc: true))
        while process.isRunning { usleep(1000) }
        return output
    }
}

func sha256(_ data: Data) -> String { SHA256.hex(data) }

/// Deterministic pseudo-random bytes.
func payload(_ count: Int, seed: UInt64 = 7) -> Data {
    var state = seed
    var bytes = [UInt8](repeating: 0, count: count)
    for index in 0..<count {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
    }
    return Data(bytes)
}

/// A file origin: `/file` supports ranges (with If-Range on its ETag, or on its Last-Modified
/// date with `dates`) unless `rangesSupported` is off; the first request can be cut mid-body; a
/// range starting at or past the end is answered 416 with `bytes */length`; with
/// `answersAnotherRange` a range request gets a 206 for the whole body instead.
final class FileOrigin: Sendable {
    let content = Locked(payload(1_000_000))
    let etag = Locked("\"v1\"")
    let rangesSupported: Bool
    let cutFirstAfter: Int?
    /// `Last-Modified` and `Date` sent instead of an ETag (a new version may change them).
    let dates: Locked<(lastModified: String, date: String)?>
    /// Honours `Range` whatever `If-Range` says (a careless server or proxy).
    let ignoresIfRange: Bool
    /// Sends no validator with a 206 (RFC 9110 §15.3.7: it SHOULD NOT repeat them when it
    /// honoured If-Range).
    let bareRanges: Bool
    let answersAnotherRange: Bool
    /// Answers a range with at most this many bytes (a correct, shorter `Content-Range`).
    let rangeCap: Int?
    /// Announces a range of 100 bytes and sends the whole rest of the file (while set).
    let overlongRanges: Locked<Bool>
    /// Sends `*` as a part's complete length (RFC 9110 §14.4: the length is unknown).
    let unknownLength: Bool
    /// Sends parts chunked, without a `Content-Length`.
    let chunkedRanges: Bool
    /// The answer to a range request while set, instead of a part (a 202, a 204).
    let rangeAnswer = Locked<ScriptedResponse?>(nil)
    private let served = Locked(0)

    init(
        rangesSupported: Bool = true, cutFirstAfter: Int? = nil, dates: (lastModified: String, date: String)? = nil,
        answersAnotherRange: Bool = false,
        rangeCap: Int? = nil, overlongRanges: Bool = false, ignoresIfRange: Bool = false, bareRanges: Bool = false,
        unknownLength: Bool = false, chunkedRanges: Bool = false
    ) {
        self.unknownLength = unknownLength
        self.chunkedRanges = chunkedRanges
        self.rangesSupported = rangesSupported
        self.cutFirstAfter = cutFirstAfter
        self.dates = Locked(dates)
        self.ignoresIfRange = ignoresIfRange
        self.bareRanges = bareRanges
        self.answersAnotherRange = answersAnotherRange
        self.rangeCap = rangeCap
        self.overlongRanges = Locked(overlongRanges)
    }

    func handle(_ request: RecordedRequest) async -> ScriptedResponse {
        let body = self.content.withLock { $0 }
        let etag = self.etag.withLock { $0 }
        let count = self.served.withLock {
            $0 += 1
            return $0
        }
        let dates = self.dates.withLock { $0 }
        var validators = [("ETag", etag)]
        if let dates { validators = [("Last-Modified", dates.lastModified), ("Date", dates.date)] }
        switch request.path {
        case "/file":
            if self.rangesSupported, let range = request.header("Range"), range.hasPrefix("bytes="),
                self.ignoresIfRange || (request.header("If-Range").map({ $0 == (dates?.lastModified ?? etag) }) ?? true),
                var start = Int(range.dropFirst("bytes=".count).split(separator: "-").first ?? "")
            {
                if let answer = self.rangeAnswer.withLock({ $0 }) { return answer }
                guard start < body.count else {
                    return ScriptedResponse(status: 416, headers: [("Content-Range", "bytes */\(body.count)")] + validators, body: Data())
                }
                if self.answersAnotherRange { start = 0 }
                let end = self.rangeCap.map { min(body.count, start + $0) } ?? body.count
                let announcedEnd = self.overlongRanges.withLock { $0 } ? min(end, start + 100) : end
                var part = ScriptedResponse(
                    status: 206,
                    headers: [
                        ("Content-Type", "application/octet-stream"),
                        (
                            "Content-Range",
                            "bytes \(start)-\(announcedEnd - 1)/\(self.unknownLength ? "*" : String(body.count))"
                        ),
                    ] + (self.bareRanges ? [] : validators),
                    body: body.subdata(in: start..<end)
                )
                if self.chunkedRanges { part.behaviour = .chunked(chunkSize: 16_384, delay: .zero) }
                return part
            }
            var response = ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")] + validators, body: body)
            if count == 1, let cut = self.cutFirstAfter { response.behaviour = .closeMidBody(afterBytes: cut) }
            return response
        case "/slow-file":
            return ScriptedResponse(
                status: 200, headers: [("ETag", etag)], body: body, behaviour: .stallMidBody(afterBytes: 100_000, .seconds(600)))
        case "/upload":
            return .text("\(request.body.count) \(sha256(request.body))")
        default:
            return .text("not found", status: 404)
        }
    }
}

@Suite("Transfers: downloads, uploads, streaming")
struct TransferTests {
    func directory() throws -> URL {
        let url = temporaryDirectory("transfer")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Writes `content` to a file named `name` in `folder`.
    func file(_ name: String, in folder: URL, content: Data) throws -> URL {
        let url = folder.appendingPathComponent(name)
        try content.write(to: url)
        return url
    }

    func visibleFiles(_ directory: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    func hiddenFiles(_ directory: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { $0.hasPrefix(".") }.sorted()
    }

    /// The last progress value of a transfer.
    func lastProgress<Success>(_ transfer: TransferTask<Success>) -> Task<[TransferProgress], Never> {
        Task {
            var seen: [TransferProgress] = []
            for await progress in transfer.progress { seen.append(progress) }
            return seen
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aDownloadIsStreamedToAFileWithProgress(_ kind: TransportKind) async throws {
        let origin = FileOrigin()
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let transfer = client.download(
                Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "file.bin"))
            let progress = self.lastProgress(transfer)
            let result = try await transfer.value
            let seen = await progress.value
            #expect(result.byteCount == 1_000_000)
            #expect(result.resumedFrom == 0)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            #expect(seen.last == TransferProgress(completedBytes: 1_000_000, expectedBytes: 1_000_000))
            #expect(seen.last?.fraction == 1)
            #expect(self.hiddenFiles(folder).isEmpty)
            #expect(server.requests.first?.header("Accept-Encoding") == "identity")

            // The destination exists now: no overwrite unless asked.
            let again = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "file.bin")
                ).value
            }
            #expect(again?.kind == .invalidRequest)
            let replaced = try await client.download(
                Endpoint<Data>(path: "/file", decoding: .data),
                to: DownloadDestination(directory: folder, fileName: "file.bin", overwrite: true)
            ).value
            #expect(replaced.byteCount == 1_000_000)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aFileUploadedThroughASymbolicLinkSendsTheFileItPointsTo(_ kind: TransportKind) async throws {
        // The length was the link's own (the length of the path it holds), the bytes the file's:
        // every upload through a link failed with "more than the N bytes announced". A directory
        // passed the checks and failed on the way as a transport error.
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("photo.bin")
        let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: file)
        let link = folder.appendingPathComponent("link.bin")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: file)
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let sent = try await client.send(
                Endpoint<String>(method: .post, path: "/upload", body: .body(try .file(link)), decoding: .string))
            #expect(sent == "\(bytes.count) \(sha256(bytes))")
            var form = MultipartForm()
            try form.addFile(name: "photo", url: link)
            let multipart = try await client.send(
                Endpoint<String>(method: .post, path: "/upload", body: .body(form.body()), decoding: .string))
            #expect(multipart.hasPrefix("\(form.body().length ?? -1) "))
            #expect(throws: CourierError.self) { _ = try RequestBody.file(folder) }
            #expect(throws: CourierError.self) { try form.addFile(name: "dir", url: folder) }
        }
    }

    /// A file body is measured when it is made and opened when it is sent (and again for a
    /// resend). A FIFO put at its path in between was opened with a plain `open`, which blocks
    /// until a writer comes: a thread of the cooperative pool held, beyond the deadline and
    /// cancellation. It is refused, typed, and the server gets no complete request.
    @Test(arguments: TransportKind.allCases, [false, true])
    func aFileBodyReplacedByAFIFOBeforeItIsSentFailsTypedWithoutWaiting(_ kind: TransportKind, multipart: Bool) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("photo.bin")
        try Data(repeating: 7, count: 1000).write(to: file)
        let body: RequestBody
        if multipart {
            var form = MultipartForm()
            try form.addFile(name: "photo", url: file)
            body = form.body()
        } else {
            body = try .file(file)
        }
        try FileManager.default.removeItem(at: file)
        #expect(mkfifo(file.path, 0o600) == 0)
        // Should the open block after all, a writer that comes and goes ends it (with an empty
        // read), so this test fails on the message below instead of hanging the suite. On a
        // thread of its own: blocked opens can hold every thread of the cooperative pool.
        let finished = Locked(false)
        defer { finished.withLock { $0 = true } }
        Thread.detachNewThread {
            for _ in 0..<60 where !finished.current { sleep(1) }
            for _ in 0..<10 {
                let writer = open(file.path, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
                usleep(100_000)
            }
        }
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string))
            }
            #expect(error?.kind == .invalidRequest)
            #expect(error?.message.contains("no longer a regular file") == true, "\(String(describing: error))")
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases, ["../escape.bin", "a/b.bin", "..", ".", "", ".courier-x"])
    func aDestinationOutsideTheDirectoryIsRefused(_ kind: TransportKind, _ name: String) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: name)
                ).value
            }
            #expect(error?.kind == .invalidRequest)
            #expect(server.requests.isEmpty)
            #expect(!FileManager.default.fileExists(atPath: folder.deletingLastPathComponent().appendingPathComponent("escape.bin").path))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aDownloadCutMidBodyResumesWithRangeAndIfRange(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "big.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            let failure = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            #expect(failure?.kind == .transport)
            #expect(self.visibleFiles(folder).isEmpty)  // nothing at the final path
            #expect(self.hiddenFiles(folder).count == 2)  // the partial file and its validator

            let transfer = client.download(endpoint, to: destination)
            let progress = self.lastProgress(transfer)
            let result = try await transfer.value
            #expect(result.resumedFrom > 0)
            #expect(result.resumedFrom <= 400_000)
            #expect(result.status.code == 206)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            let resumed = try #require(server.requests.last)
            #expect(resumed.header("Range") == "bytes=\(result.resumedFrom)-")
            #expect(resumed.header("If-Range") == "\"v1\"")
            let seen = await progress.value
            #expect(seen.first?.completedBytes == result.resumedFrom)
            #expect(seen.last?.completedBytes == 1_000_000)
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aServerThatAnswersARangeWithLessThanTheRestIsAskedForTheRest(_ kind: TransportKind) async throws {
        // RFC 9110 §14.4: the complete length after "/" is the whole representation's; a part
        // that ends before it is not the end of the file.
        let origin = FileOrigin(cutFirstAfter: 300_000, rangeCap: 100_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "capped.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let transfer = client.download(endpoint, to: destination)
            let progress = self.lastProgress(transfer)
            let result = try await transfer.value
            #expect(result.byteCount == 1_000_000)
            #expect(result.resumedFrom > 0 && result.resumedFrom <= 300_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            // One part per 100,000 bytes after the resume point, each asked for where the last ended.
            let ranges = server.requests.dropFirst().compactMap { $0.header("Range") }
            #expect(ranges.count == Int((1_000_000 - result.resumedFrom + 99_999) / 100_000))
            #expect(ranges.first == "bytes=\(result.resumedFrom)-")
            #expect(server.requests.dropFirst().allSatisfy { $0.header("If-Range") == "\"v1\"" })
            let seen = await progress.value
            #expect(seen.allSatisfy { $0.expectedBytes == 1_000_000 && $0.completedBytes <= 1_000_000 })
            #expect(seen.last?.completedBytes == 1_000_000)
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartLongerThanItsRangeKeepsNoneOfItsBytes(_ kind: TransportKind) async throws {
        // A 206 that sends more than its Content-Range announces (RFC 9110 §14.4), chunked, so
        // only the bytes show it: its body is not the range (a proxy that sent the whole file
        // under a part's fields), so none of it joins the file — cut back to where the part
        // began — the error says so, and the file resumes correctly from a server that behaves.
        let origin = FileOrigin(cutFirstAfter: 300_000, overlongRanges: true, chunkedRanges: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "overlong.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let transfer = client.download(endpoint, to: destination)
            let progress = self.lastProgress(transfer)
            let failure = await expectCourierError { _ = try await transfer.value }
            #expect(failure?.kind == .transport)
            #expect(failure?.message.contains("more than the 100 bytes") == true)
            #expect(failure?.message.contains("none of them is kept") == true)
            let seen = await progress.value
            #expect(seen.allSatisfy { $0.completedBytes <= ($0.expectedBytes ?? .max) })
            let partial = try Data(contentsOf: folder.appendingPathComponent(".courier-overlong.bin.partial"))
            let content = origin.content.withLock { $0 }
            #expect(partial.count > 0 && partial.count <= 300_000)
            #expect(partial == content.prefix(partial.count))
            // The same partial file, resumed once the server sends what it announces.
            origin.overlongRanges.withLock { $0 = false }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == Int64(partial.count))
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(content))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartAnnouncedLongerThanItsRangeStartsTheDownloadAgain(_ kind: TransportKind) async throws {
        // The same, with a Content-Length that says so at the head: nothing of it is written,
        // and the download starts again without a range (a proxy that does this to every range
        // would otherwise fail every resume), so the file is whole.
        let origin = FileOrigin(cutFirstAfter: 300_000, overlongRanges: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "announced.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let result = try await client.download(endpoint, to: destination).value
            #expect(server.requests.dropFirst().first?.header("Range") != nil)  // it did ask
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartSentAsMultipartByterangesIsNotSplicedIntoTheFile(_ kind: TransportKind) async throws {
        // RFC 9110 §14.6: a single range MUST NOT be answered with multipart/byteranges, whose
        // body holds boundaries and part headers. None of it joins the file: the download starts
        // again without a range, and the file is whole.
        let origin = FileOrigin(cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "parts.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let offset = try Data(contentsOf: folder.appendingPathComponent(".courier-parts.bin.partial")).count
            #expect(offset > 0)
            let content = origin.content.withLock { $0 }
            let range = "bytes \(offset)-\(content.count - 1)/\(content.count)"
            var body = Data("--b\r\nContent-Type: application/octet-stream\r\nContent-Range: \(range)\r\n\r\n".utf8)
            body.append(content.subdata(in: offset..<content.count))
            body.append(Data("\r\n--b--\r\n".utf8))
            origin.rangeAnswer.withLock {
                $0 = ScriptedResponse(
                    status: 206,
                    headers: [("Content-Type", "multipart/byteranges; boundary=b"), ("Content-Range", range), ("ETag", "\"v1\"")],
                    body: body)
            }
            let result = try await client.download(endpoint, to: destination).value
            #expect(server.requests.dropFirst().first?.header("Range") == "bytes=\(offset)-")  // it did ask
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(content))
        }
    }

    @Test(arguments: TransportKind.allCases, ["no range support", "validator changed"])
    func aServerThatCannotResumeMakesTheDownloadRestartCleanly(_ kind: TransportKind, _ situation: String) async throws {
        let origin = FileOrigin(rangesSupported: situation == "validator changed", cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "big.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            if situation == "validator changed" {
                origin.content.withLock { $0 = payload(700_000, seed: 99) }
                origin.etag.withLock { $0 = "\"v2\"" }
            }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(server.requests.last?.header("Range") != nil)  // it did ask
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
    }

    /// RFC 9110 §14.4 and §15.5.17: a 416 to `bytes=N-` with `Content-Range: bytes */N` says the
    /// partial file of N bytes is the whole representation (If-Range matched, §13.2.2).
    @Test(arguments: TransportKind.allCases)
    func aPartialFileThatHoldsTheWholeBodyCompletesWithOneRequest(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "whole.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            // The bytes that were missing arrived some other way: the partial file is complete.
            let content = origin.content.withLock { $0 }
            try content.write(to: folder.appendingPathComponent(".courier-whole.bin.partial"))
            let before = server.requests.count

            let result = try await client.download(endpoint, to: destination).value
            #expect(server.requests.count == before + 1)
            #expect(server.requests.last?.header("Range") == "bytes=1000000-")
            #expect(result.status.code == 416)
            #expect(result.byteCount == 1_000_000)
            #expect(result.resumedFrom == 1_000_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(content))
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    /// A download is one request to its monitors, whatever rounds it takes: one start and one
    /// end, under one id. A resumed body answered 416 (the file was whole already, RFC 9110
    /// §14.4) ends as finished, not failed; a range answered with the whole body again takes a
    /// second round that starts nothing new, and counts as a second attempt.
    @Test(arguments: TransportKind.allCases, ["cut", "resumed", "whole body already here", "another range"])
    func aDownloadStartsAndEndsOnceForItsMonitors(_ kind: TransportKind, _ situation: String) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000, answersAnotherRange: situation == "another range")
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        let monitor = RecordingMonitor()
        var status: Int?
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { client in
            let destination = DownloadDestination(directory: folder, fileName: "events.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            if situation == "whole body already here" {
                try origin.content.withLock { $0 }.write(to: folder.appendingPathComponent(".courier-events.bin.partial"))
            }
            if situation != "cut" {
                status = try await client.download(endpoint, to: destination).value.status.code
            }
        }
        let expectedStatus = ["cut": nil, "resumed": 206, "whole body already here": 416, "another range": 200][situation]!
        #expect(status == expectedStatus)
        var ids: [RequestID] = []
        for entry in monitor.entries where !ids.contains(entry.id) { ids.append(entry.id) }
        let ends: Set<String> = ["started", "finished", "failed", "cancelled"]
        let outline = ids.map { id in monitor.names(of: id).filter(ends.contains) }
        #expect(outline == (situation == "cut" ? [["started", "failed"]] : [["started", "failed"], ["started", "finished"]]))
        if situation != "cut" {
            let last = try #require(ids.last)
            #expect(monitor.results.current[last]?.response?.status.code == expectedStatus)
            // Every round's exchange counts as an attempt of the one request (before: the last
            // round's only).
            #expect(monitor.results.current[last]?.attempts == (situation == "another range" ? 2 : 1))
        }
    }

    /// RFC 9110 §13.1.5: a client MUST NOT send If-Range with a date unless it has no entity tag
    /// and the date is strong (§8.8.2.2: for a client, at least 60 seconds before `Date`).
    @Test(arguments: TransportKind.allCases, [true, false])
    func aLastModifiedDateIsSentInIfRangeOnlyWhenItIsStrong(_ kind: TransportKind, _ strong: Bool) async throws {
        let lastModified = "Sun, 22 Nov 2026 10:00:00 GMT"
        let origin = FileOrigin(
            cutFirstAfter: 400_000, dates: (lastModified, strong ? "Sun, 22 Nov 2026 11:00:00 GMT" : "Sun, 22 Nov 2026 10:00:30 GMT"))
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "dated.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let result = try await client.download(endpoint, to: destination).value
            let resumed = try #require(server.requests.last)
            if strong {
                #expect(resumed.header("If-Range") == lastModified)
                #expect(result.status.code == 206)
                #expect(result.resumedFrom > 0)
            } else {
                #expect(resumed.header("If-Range") == nil)
                #expect(resumed.header("Range") == nil)
                #expect(result.status.code == 200)
                #expect(result.resumedFrom == 0)
            }
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartResumedByDateFromAServerThatIgnoresIfRangeIsNotSplicedOntoANewVersion(_ kind: TransportKind) async throws {
        // RFC 9110 §15.3.7.3 and §13.1.5: parts combine only when they share a strong validator.
        // The server honours the range although the file changed (it ignores If-Range), and its
        // 206 carries the new Last-Modified: the download starts again from zero.
        let origin = FileOrigin(
            cutFirstAfter: 400_000, dates: ("Sun, 22 Nov 2026 10:00:00 GMT", "Sun, 22 Nov 2026 11:00:00 GMT"), ignoresIfRange: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "changed.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            origin.content.withLock { $0 = payload(1_000_000, seed: 99) }
            origin.dates.withLock { $0 = ("Thu, 26 Nov 2026 10:00:00 GMT", "Thu, 26 Nov 2026 11:00:00 GMT") }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            // The resumed request did ask with the old date; the answer to it was refused.
            #expect(server.requests.map { $0.header("If-Range") }.contains("Sun, 22 Nov 2026 10:00:00 GMT"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartWithoutValidatorsKeepsTheOneItWasAskedWith(_ kind: TransportKind) async throws {
        // RFC 9110 §15.3.7: a server that honoured If-Range need not repeat the validators in
        // its 206. Capped parts of 300,000 bytes without them still complete the file: the
        // validator the range was asked with still stands. (Where the cut part ends depends on
        // what reached the client before the connection closed.)
        let origin = FileOrigin(
            cutFirstAfter: 100_000, dates: ("Sun, 22 Nov 2026 10:00:00 GMT", "Sun, 22 Nov 2026 11:00:00 GMT"), rangeCap: 300_000,
            bareRanges: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "bare.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom > 0)
            #expect(result.byteCount == 1_000_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            // Every part after the first was asked for with the first answer's date.
            let parts = server.requests.dropFirst()
            #expect(parts.count == Int((1_000_000 - result.resumedFrom + 299_999) / 300_000))
            #expect(parts.allSatisfy { $0.header("If-Range") == "Sun, 22 Nov 2026 10:00:00 GMT" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aWholeNewVersionAfterAPartStartsTheCountFromZero(_ kind: TransportKind) async throws {
        // A capped part of v1, then the file changes: the next range's If-Range fails and the
        // whole of v2 comes (RFC 9110 §13.1.5). The result says it started from the beginning.
        let origin = FileOrigin(cutFirstAfter: 300_000, rangeCap: 100_000)
        let server = try await http1Server { request in
            let response = await origin.handle(request)
            if response.status == 206 {
                origin.content.withLock { $0 = payload(700_000, seed: 99) }
                origin.etag.withLock { $0 = "\"v2\"" }
            }
            return response
        }
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "v2.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let result = try await client.download(endpoint, to: destination).value
            #expect(server.requests.map { $0.header("If-Range") } == [nil, "\"v1\"", "\"v1\""])
            #expect(result.status.code == 200)
            #expect(result.resumedFrom == 0)
            #expect(result.byteCount == 700_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(payload(700_000, seed: 99)))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aResumeRecordThatIsALinkIsNotFollowed(_ kind: TransportKind) async throws {
        // The partial file is opened without following links; so is its record now, which must
        // also be a plain file of this user's and small (a link to a FIFO or a device, or a huge
        // file, is never read). Here the link points at a genuine record moved elsewhere: read
        // through it, the download would resume; refused, it starts afresh.
        let origin = FileOrigin(cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "linked.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let record = folder.appendingPathComponent(".courier-linked.bin.partial.json")
            let elsewhere = folder.appendingPathComponent("elsewhere.json")
            try FileManager.default.moveItem(at: record, to: elsewhere)
            try FileManager.default.createSymbolicLink(at: record, withDestinationURL: elsewhere)
            let kept = try Data(contentsOf: elsewhere)
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == 0)
            #expect(server.requests.last?.header("Range") == nil)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            // Nothing was written through the link.
            #expect(try Data(contentsOf: elsewhere) == kept)
        }
    }

    @Test(
        .enabled(if: getuid() == 0, "making a file another user owns needs root"),
        arguments: TransportKind.allCases)
    func aPartialFileAnotherUserOwnsIsNeverResumed(_ kind: TransportKind) async throws {
        // A partial file planted by another user (here: nobody, 65534) would become the start
        // of the download, renamed into place still owned by them.
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let planted = try self.file(".courier-owned.bin.partial", in: folder, content: Data("planted".utf8))
        #expect(chown(planted.path, 65534, 65534) == 0)
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "owned.bin")
                ).value
            }
            #expect(error?.kind == .invalidRequest)
            #expect(server.requests.isEmpty)
            #expect(self.visibleFiles(folder).isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartialResponseForAnotherRangeRestartsTheDownloadCleanly(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000, answersAnotherRange: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "other.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            let result = try await client.download(endpoint, to: destination).value
            #expect(server.requests.count == 3)  // cut, the 206 for bytes 0-, the whole body
            #expect(server.requests[1].header("Range") != nil)
            #expect(server.requests[2].header("Range") == nil)
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aSecondDownloadToTheSameDestinationFailsWithoutTouchingThePartialFile(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let origin = FileOrigin()
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "shared.bin")
            let first = client.download(Endpoint<Data>(path: "/slow-file", decoding: .data), to: destination)
            var reached = false
            for await progress in first.progress where progress.completedBytes >= 100_000 {
                reached = true
                break
            }
            #expect(reached)
            let partial = folder.appendingPathComponent(".courier-shared.bin.partial")
            let before = try Data(contentsOf: partial)
            let second = await expectCourierError {
                _ = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            }
            #expect(second?.kind == .invalidRequest)
            #expect(second?.message.contains("in progress") == true)
            #expect(server.requests.count == 1)  // the second never reached the network
            #expect(try Data(contentsOf: partial) == before)
            #expect(before == origin.content.withLock { $0 }.prefix(before.count))

            first.cancel()
            _ = await expectCourierError { _ = try await first.value }
            // Once the first has stopped, the lock is free again.
            let third = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            #expect(third.byteCount == 1_000_000)
            #expect(sha256(try Data(contentsOf: third.url)) == sha256(origin.content.withLock { $0 }))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPartialFileLockedForAMomentOutsideThisProcesssDownloadsIsWaitedFor(_ kind: TransportKind) async throws {
        // A child process holds every lock of this process from its fork until its exec closes
        // what it inherited: a download that met such a lock failed with "in progress" though no
        // download held the file. Here another open file description of the partial file holds
        // the lock, as the child's would, and lets go when the download first waits for it.
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let origin = FileOrigin()
        let server = try await http1Server(origin.handle)
        let partial = folder.appendingPathComponent(".courier-held.bin.partial")
        let other = open(partial.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(other >= 0)
        try #require(flock(other, LOCK_EX | LOCK_NB) == 0)
        let requestsWhenWaiting = Locked<Int?>(nil)
        PartialFile.whenWaiting.withLock {
            $0[partial.path] = {
                requestsWhenWaiting.withLock { $0 = $0 ?? server.requests.count }
                close(other)
            }
        }
        defer { PartialFile.whenWaiting.withLock { $0[partial.path] = nil } }
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "held.bin")
            let result = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            #expect(result.byteCount == 1_000_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
        // It waited, and sent nothing while the lock was held.
        #expect(requestsWhenWaiting.current == 0)
        #expect(server.requests.count == 1)
    }

    @Test(arguments: TransportKind.allCases)
    func aPartialFileLockedOutsideThisProcesssDownloadsFailsTheDownloadWithoutTouchingIt(_ kind: TransportKind) async throws {
        // Another process's download holds the lock throughout: after a bounded wait, the
        // download fails with kind invalidRequest, sends nothing and leaves the file as it was.
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(FileOrigin().handle)
        let partial = folder.appendingPathComponent(".courier-kept.bin.partial")
        try Data("someone else's bytes".utf8).write(to: partial)
        let other = open(partial.path, O_RDWR | O_CLOEXEC)
        try #require(other >= 0)
        defer { close(other) }
        try #require(flock(other, LOCK_EX | LOCK_NB) == 0)
        let waits = Locked(0)
        PartialFile.whenWaiting.withLock { $0[partial.path] = { waits.withLock { $0 += 1 } } }
        defer { PartialFile.whenWaiting.withLock { $0[partial.path] = nil } }
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "kept.bin")
            let error = await expectCourierError {
                _ = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            }
            #expect(error?.kind == .invalidRequest)
            #expect(error?.message.contains("in progress") == true)
        }
        #expect(waits.current > 0)
        #expect(server.requests.isEmpty)
        #expect(try Data(contentsOf: partial) == Data("someone else's bytes".utf8))
    }

    @Test(arguments: TransportKind.allCases)
    func aDownloadCancelledWhileItWaitsForALockEndsCancelledAndLetsTheFileGo(_ kind: TransportKind) async throws {
        // Cancellation × the wait for a lock held elsewhere: the download, cancelled before it
        // starts, meets the held lock, ends with kind cancelled instead of waiting the wait out,
        // and leaves no claim behind: once the lock is free, the next download runs.
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let origin = FileOrigin()
        let server = try await http1Server(origin.handle)
        let partial = folder.appendingPathComponent(".courier-cancelled.bin.partial")
        let other = open(partial.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(other >= 0)
        try #require(flock(other, LOCK_EX | LOCK_NB) == 0)
        let waits = Locked(0)
        PartialFile.whenWaiting.withLock { $0[partial.path] = { waits.withLock { $0 += 1 } } }
        defer { PartialFile.whenWaiting.withLock { $0[partial.path] = nil } }
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "cancelled.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            let cancelled = client.download(endpoint, to: destination)
            cancelled.cancel()
            let error = await expectCourierError { _ = try await cancelled.value }
            #expect(error?.kind == .cancelled)
            #expect(waits.current == 1)
            #expect(server.requests.isEmpty)
            close(other)
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.byteCount == 1_000_000)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aLinkPlantedAtThePartialFilesNameIsNeverWrittenThrough(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let victim = try self.file("victim.txt", in: folder, content: Data("keep me".utf8))
        try FileManager.default.createSymbolicLink(
            at: folder.appendingPathComponent(".courier-planted.bin.partial"), withDestinationURL: victim)
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "planted.bin")
                ).value
            }
            #expect(error?.kind == .invalidRequest)
            let kept = try Data(contentsOf: victim)
            #expect(kept == Data("keep me".utf8))
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCancelledDownloadKeepsItsPartialFileAndThrowsCancelled(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let transfer = client.download(
                Endpoint<Data>(path: "/slow-file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "slow.bin"))
            var reached = false
            for await progress in transfer.progress where progress.completedBytes >= 100_000 {
                reached = true
                transfer.cancel()
                break
            }
            #expect(reached)
            let error = await expectCourierError { _ = try await transfer.value }
            #expect(error?.kind == .cancelled)
            #expect(self.visibleFiles(folder).isEmpty)
            #expect(self.hiddenFiles(folder).contains(".courier-slow.bin.partial"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aFileIsUploadedStreamedWithProgressAndReplayedByARetry(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let content = payload(3_000_000, seed: 3)
        let file = try self.file("upload.bin", in: folder, content: content)
        let server = try await http1Server(FileOrigin().handle)
        let retryOnce = ClosureMiddleware { request, next in
            _ = try await next(request)  // the first attempt's answer is thrown away
            return try await next(request)
        }
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<String>(
                method: .post, path: "/upload", body: .body(try RequestBody.file(file, contentType: "application/octet-stream")),
                middleware: [retryOnce], decoding: .string)
            let transfer = client.upload(endpoint)
            let progress = self.lastProgress(transfer)
            let response = try await transfer.value
            #expect(response.value == "3000000 \(sha256(content))")
            #expect(server.requests.count == 2)
            #expect(server.requests.allSatisfy { $0.body == content })
            let seen = await progress.value
            #expect(seen.last == TransferProgress(completedBytes: 3_000_000, expectedBytes: 3_000_000))
            #expect(seen.count > 2)
        }
    }

    /// A streamed body that brings more than the length it announced (a file that grew) fails
    /// with kind `invalidRequest`, and its progress never passes the expected bytes: the chunk
    /// that overflowed was counted before the length check refused it.
    @Test(arguments: TransportKind.allCases)
    func uploadProgressNeverPassesTheAnnouncedLength(_ kind: TransportKind) async throws {
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let body = RequestBody.stream(length: 100, contentType: "application/octet-stream") {
                ByteStream(chunks: [Data(count: 60), Data(count: 41)])
            }
            let transfer = client.upload(Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string))
            let progress = self.lastProgress(transfer)
            let failure = await expectCourierError { _ = try await transfer.value }
            #expect(failure?.kind == .invalidRequest, "\(String(describing: failure))")
            let seen = await progress.value
            #expect(!seen.isEmpty)
            #expect(seen.allSatisfy { $0.completedBytes <= 100 && $0.expectedBytes == 100 }, "\(seen)")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aSliceOfDataIsUploadedWithProgressFromItsOwnStart(_ kind: TransportKind) async throws {
        // A `Data` slice starts at its own index, not at 0: cutting it into progress-sized pieces
        // from offset 0 trapped (outside the slice's range).
        let whole = payload(200_001, seed: 7)
        let slice = whole[1...]
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<String>(
                method: .post, path: "/upload", body: .body(.data(slice, contentType: "application/octet-stream")), decoding: .string)
            let transfer = client.upload(endpoint)
            let progress = self.lastProgress(transfer)
            let response = try await transfer.value
            #expect(response.value == "200000 \(sha256(Data(slice)))")
            #expect(server.requests.first?.body == Data(slice))
            let seen = await progress.value
            #expect(seen.last == TransferProgress(completedBytes: 200_000, expectedBytes: 200_000))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aMultipartFormArrivesByteForByte(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let fileContent = payload(200_000, seed: 5)
        let file = try self.file("photo.jpg", in: folder, content: fileContent)
        var form = MultipartForm()
        form.add(name: "title", value: "Holiday – día 1")
        form.add(name: "a\"b\r\nX-Injected: 1\0", value: "quoted")
        try form.addData(Data("{\"k\":1}".utf8), name: "meta", fileName: "meta\".json", contentType: "application/json")
        try form.addFile(name: "photo", url: file, contentType: "image/jpeg")
        let body = form.body()
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let response = try await client.send(Endpoint<String>(method: .post, path: "/upload", body: .body(body), decoding: .string))
            let received = try #require(server.requests.first)
            let b = form.boundary
            var expected = Data("--\(b)\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nHoliday – día 1\r\n".utf8)
            expected += Data("--\(b)\r\nContent-Disposition: form-data; name=\"a%22b%0D%0AX-Injected: 1%00\"\r\n\r\nquoted\r\n".utf8)
            expected += Data(
                "--\(b)\r\nContent-Disposition: form-data; name=\"meta\"; filename=\"meta%22.json\"\r\nContent-Type: application/json\r\n\r\n{\"k\":1}\r\n"
                    .utf8)
            expected += Data(
                "--\(b)\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"photo.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n".utf8)
            expected += fileContent + Data("\r\n--\(b)--\r\n".utf8)
            #expect(received.body == expected)
            #expect(body.length == expected.count)
            #expect(received.header("Content-Type") == "multipart/form-data; boundary=\(b)")
            #expect(received.header("Content-Length") == "\(expected.count)")
            #expect(response == "\(expected.count) \(sha256(expected))")
        }
        var bad = MultipartForm()
        #expect(throws: CourierError.self) { try bad.addData(Data(), name: "x", fileName: "x", contentType: "text/plain\r\nX-Evil: 1") }
    }

    /// A parser that reads backslash escapes in quoted strings (RFC 9110 §5.6.4) read a name
    /// ending in `\` as running on past its closing quote, into the parameters after it: the
    /// backslash is percent-encoded as the quote is (RFC 7578 §4.2), and a file name full of them
    /// stays one parameter.
    @Test(arguments: TransportKind.allCases)
    func aBackslashCannotCarryAPartNameIntoTheNextParameter(_ kind: TransportKind) async throws {
        var form = MultipartForm()
        try form.addData(Data("x".utf8), name: "dir\\", fileName: "C:\\evil\\\"; name=\"admin", contentType: "text/plain")
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            _ = try await client.send(Endpoint<String>(method: .post, path: "/upload", body: .body(form.body()), decoding: .string))
            let received = try #require(server.requests.first)
            let text = String(decoding: received.body, as: UTF8.self)
            #expect(
                text.contains("Content-Disposition: form-data; name=\"dir%5C\"; filename=\"C:%5Cevil%5C%22; name=%22admin\"\r\n"), "\(text)"
            )
            #expect(!text.contains("\\"))
        }
    }

    /// A multipart form's type carries its boundary and a URL-encoded form's type says how its
    /// bytes read: a client-wide default `Content-Type` (often `application/json`) replaced both,
    /// so the server could find no part. A body's own type now wins over a default, except plain
    /// JSON, which a default may refine; an endpoint's own `Content-Type` still wins over all.
    @Test(arguments: TransportKind.allCases)
    func aBodysOwnContentTypeWinsOverAClientDefault(_ kind: TransportKind) async throws {
        var form = MultipartForm()
        form.add(name: "title", value: "x")
        let server = try await http1Server { _ in .text("ok") }
        let vendorJSON = "application/vnd.api+json"
        try await withClient(kind, server: server, configure: { $0.defaultHeaders[.contentType] = vendorJSON }) { client in
            let bodies: [(HTTPFields, EndpointBody)] = [
                ([:], .body(form.body())),
                ([:], .form(["a": "1"])),
                ([:], .data(Data("a,b".utf8), contentType: "text/csv")),
                ([:], .json(["k": 1])),
                ([:], .body(.data(Data("raw".utf8)))),
                ([.contentType: "text/plain"], .data(Data("a,b".utf8), contentType: "text/csv")),
            ]
            for (headers, body) in bodies {
                _ = try await client.send(Endpoint<String>(method: .post, path: "/b", headers: headers, body: body, decoding: .string))
            }
        }
        let types = server.requests.map { $0.header("Content-Type") }
        #expect(
            types == [
                "multipart/form-data; boundary=\(form.boundary)", "application/x-www-form-urlencoded", "text/csv", vendorJSON, vendorJSON,
                "text/plain",
            ])
        // A service's default is a default too; one that is no JSON type does not relabel JSON.
        let second = try await http1Server { _ in .text("ok") }
        let servers = ServerDirectory(
            urls: ["api": [.develop: second.baseURL]], buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore())
        try await withClient(
            kind, server: second,
            configure: {
                $0.servers = servers
                $0.serviceDefaults["api"] = ServiceDefaults(headers: [.contentType: "application/json"])
                $0.defaultHeaders[.contentType] = "text/plain"
            }
        ) { client in
            _ = try await client.send(
                Endpoint<String>(method: .post, path: "/b", body: .body(form.body()), decoding: .string).service("api"))
            _ = try await client.send(
                Endpoint<String>(method: .post, path: "/b", body: .form(["a": "1"]), decoding: .string).service("api"))
            _ = try await client.send(Endpoint<String>(method: .post, path: "/b", body: .json(["k": 1]), decoding: .string))
            _ = try await client.send(Endpoint<String>(method: .post, path: "/b", body: .body(.data(Data("raw".utf8))), decoding: .string))
        }
        #expect(
            second.requests.map { $0.header("Content-Type") } == [
                "multipart/form-data; boundary=\(form.boundary)", "application/x-www-form-urlencoded", "application/json", "text/plain",
            ])
    }
}
