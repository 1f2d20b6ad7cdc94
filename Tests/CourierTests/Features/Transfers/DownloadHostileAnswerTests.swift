import Courier
import CourierTestServer
import Foundation
import Testing

/// Answers to a resumed download that must not complete it: a 2xx that is no file, a part
/// whose complete length is unknown or changes, a 416 or an ETag that proves nothing.
extension TransferTests {
    /// The partial file and its record of a download of `/file` cut mid-body, as the first
    /// attempt left them.
    func cutDownload(
        _ client: Client, to destination: DownloadDestination, in folder: URL
    ) async throws -> (partial: Data, record: Data) {
        let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
        let failure = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
        #expect(failure?.kind == .transport)
        let name = destination.fileName
        let partial = try Data(contentsOf: folder.appendingPathComponent(".courier-\(name).partial"))
        let record = try Data(contentsOf: folder.appendingPathComponent(".courier-\(name).partial.json"))
        return (partial, record)
    }

    /// Writes `record` back without its complete length, as a record kept before lengths were;
    /// checks it had the one of the first answer.
    func dropLength(from record: Data, writingTo url: URL) throws {
        var fields = try #require(try JSONSerialization.jsonObject(with: record) as? [String: Any])
        #expect(fields.removeValue(forKey: "length") as? Int == 1_000_000)
        try JSONSerialization.data(withJSONObject: fields).write(to: url)
    }

    /// A careless server (or cache) that answers every `GET` with a `206` from byte 0, no
    /// `Range` asked: bytes from 0 are the start of the file, so the download takes them (it
    /// refused them, asked again, got the same, and failed). A `206` of a range starting
    /// elsewhere is still refused (RFC 9110 §15.3.7: only bytes at the offset asked for join
    /// the file).
    @Test(arguments: TransportKind.allCases)
    func anUnaskedPartialAnswerFromTheFirstByteIsTheFile(_ kind: TransportKind) async throws {
        let content = payload(100_000, seed: 21)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server { request in
            let start = request.path == "/elsewhere" ? 500 : 0
            return ScriptedResponse(
                status: 206,
                headers: [("ETag", "\"v1\""), ("Content-Range", "bytes \(start)-\(content.count - 1)/\(content.count)")],
                body: content.subdata(in: start..<content.count))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let result = try await client.download(
                Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "whole.bin")
            ).value
            #expect(result.byteCount == Int64(content.count))
            #expect(result.resumedFrom == 0)
            #expect(try Data(contentsOf: result.url) == content)
            #expect(server.requests.count == 1)
            #expect(server.requests.first?.header("Range") == nil)
            let failure = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/elsewhere", decoding: .data), to: DownloadDestination(directory: folder, fileName: "part.bin")
                ).value
            }
            #expect(failure?.kind == .transport)
            #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("part.bin").path))
        }
    }

    /// RFC 9110 §14.4: a part of unknown complete length (`bytes 0-499/*`) may not be the whole
    /// file. With no validator to ask for the rest with, the download fails rather than put the
    /// part in place as the file (it did, once a part from byte 0 was taken).
    @Test(arguments: TransportKind.allCases)
    func aPartOfUnknownLengthWithoutAValidatorIsNotTheFile(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server { _ in
            ScriptedResponse(status: 206, headers: [("Content-Range", "bytes 0-499/*")], body: Data(count: 500))
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let failure = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "unknown.bin")
                ).value
            }
            #expect(failure?.kind == .transport)
            #expect(self.visibleFiles(folder).isEmpty)
        }
    }

    /// A download that got no byte of the file and keeps no record to resume from (a `404`, a
    /// `204` on a fresh download, a port where nothing listens) leaves no hidden file behind: an
    /// empty partial file stayed in the user's folder, with nothing that could resume from it.
    @Test(arguments: TransportKind.allCases)
    func aDownloadThatGotNothingLeavesNoHiddenFile(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server { request in
            switch request.path {
            case "/empty": return ScriptedResponse(status: 204)
            // A validator, then the connection closes before the first byte of the body: the
            // record this answer wrote resumes nothing (resuming needs bytes), and goes too.
            case "/reset":
                return ScriptedResponse(status: 200, headers: [("ETag", "\"r1\"")], body: Data(count: 1000)).with(
                    .closeMidBody(afterBytes: 0))
            default: return .text("no such file", status: 404)
            }
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            for (path, status) in [("/missing", 404), ("/empty", 204), ("/reset", nil)] as [(String, Int?)] {
                let destination = DownloadDestination(directory: folder, fileName: "got-nothing.bin")
                let failure = await expectCourierError {
                    _ = try await client.download(Endpoint<Data>(path: path, decoding: .data), to: destination).value
                }
                if let status { #expect(failure?.status?.code == status) } else { #expect(failure?.kind == .transport) }
                #expect(self.hiddenFiles(folder).isEmpty, "\(path): \(self.hiddenFiles(folder))")
                #expect(self.visibleFiles(folder).isEmpty)
            }
        }
        let refusing = try RefusingPort()
        let transport = makeTransport(kind)
        let client = Client(
            configuration: .init(transport: transport.transport, baseURL: URL(string: "http://127.0.0.1:\(refusing.port)")!) {
                $0.retry = .never
            })
        let failure = await expectCourierError {
            _ = try await client.download(
                Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "refused.bin")
            ).value
        }
        try await transport.shutdown()
        withExtendedLifetime(refusing) {}
        #expect(failure?.couldNotConnect == true)
        #expect(self.hiddenFiles(folder).isEmpty, "\(self.hiddenFiles(folder))")
    }

    /// The record kept beside an unfinished download names its URL by a digest, not by the URL:
    /// a pre-signed URL's signature and token stayed in a hidden file in the user's folder (the
    /// redactor hides them everywhere else), for as long as the download stayed unfinished. The
    /// download still resumes from it, and from a record written before, which held the URL.
    @Test(arguments: TransportKind.allCases)
    func theResumeRecordHoldsNoSecretOfTheURL(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "signed.bin")
            let endpoint = Endpoint<Data>(path: "/file?X-Amz-Signature=s3cr3t&X-Amz-Security-Token=t0ken", decoding: .data)
            let failure = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            #expect(failure?.kind == .transport)
            let recordURL = folder.appendingPathComponent(".courier-signed.bin.partial.json")
            let record = String(decoding: try Data(contentsOf: recordURL), as: UTF8.self)
            #expect(!record.contains("s3cr3t") && !record.contains("t0ken") && !record.contains("/file"), "\(record)")
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom > 0)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
    }

    /// RFC 9110 §15.3.3 (202: processing not finished) and §15.3.5 (204: no content): neither
    /// is the file. The download fails with the status, and the partial file and its record
    /// are left as they were, so a later download still resumes.
    @Test(arguments: TransportKind.allCases, [202, 204])
    func anAnswerThatIsNoFileFailsAndKeepsThePartialFile(_ kind: TransportKind, _ status: Int) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "pending.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            let before = try await self.cutDownload(client, to: destination, in: folder)
            let note = Data(#"{"state":"exporting"}"#.utf8)
            origin.rangeAnswer.withLock {
                $0 = ScriptedResponse(
                    status: status, headers: status == 204 ? [] : [("Content-Type", "application/json")],
                    body: status == 204 ? Data() : note)
            }
            let failure = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            #expect(failure?.kind == .httpStatus)
            #expect(failure?.status?.code == status)
            if status == 202 { #expect(failure?.body == note) }
            #expect(server.requests.last?.header("Range") == "bytes=\(before.partial.count)-")
            #expect(self.visibleFiles(folder).isEmpty)
            let partial = try Data(contentsOf: folder.appendingPathComponent(".courier-pending.bin.partial"))
            let record = try Data(contentsOf: folder.appendingPathComponent(".courier-pending.bin.partial.json"))
            #expect(partial == before.partial)
            #expect(record == before.record)

            origin.rangeAnswer.withLock { $0 = nil }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == Int64(before.partial.count))
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
    }

    /// RFC 9110 §14.4: `*` as the complete length means it is unknown, not that the part ends
    /// the file. When the download knows the length (from the first answer, kept in its record)
    /// it asks for the rest up to it; when it does not (a record kept before lengths were), it
    /// asks for the rest until the server says where the file ends (here a 416 with
    /// `bytes */1000000`, §15.5.17).
    @Test(arguments: TransportKind.allCases, [true, false])
    func aPartOfUnknownCompleteLengthIsFollowedByAskingForTheRest(_ kind: TransportKind, _ lengthKept: Bool) async throws {
        let origin = FileOrigin(cutFirstAfter: 300_000, rangeCap: 200_000, unknownLength: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "unknown.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            let before = try await self.cutDownload(client, to: destination, in: folder)
            if !lengthKept {
                try self.dropLength(from: before.record, writingTo: folder.appendingPathComponent(".courier-unknown.bin.partial.json"))
            }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.byteCount == 1_000_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
            let askedPastTheEnd = server.requests.contains { $0.header("Range") == "bytes=1000000-" }
            #expect(askedPastTheEnd == !lengthKept)
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    /// RFC 9110 §15.3.7.3 and §14.4: the parts of one representation state one complete length.
    /// A server that ignores If-Range and repeats no validator sends a part of a new, shorter
    /// version: its other complete length shows it, and the download starts again from zero
    /// instead of splicing the two versions.
    @Test(arguments: TransportKind.allCases)
    func aPartOfAnotherCompleteLengthStartsTheDownloadAgain(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 300_000, rangeCap: 100_000, ignoresIfRange: true, bareRanges: true)
        let version2 = payload(600_000, seed: 5)
        let parts = Locked(0)
        let server = try await http1Server { request in
            // After the first part of v1, the file is v2.
            if request.header("Range") != nil,
                parts.withLock({
                    $0 += 1
                    return $0
                }) == 2
            {
                origin.content.withLock { $0 = version2 }
            }
            return await origin.handle(request)
        }
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "spliced.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = try await self.cutDownload(client, to: destination, in: folder)
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(result.byteCount == 600_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(version2))
            #expect(parts.withLock { $0 } == 2)
        }
    }

    /// RFC 9110 §14.4: the parts of one representation share one complete length. A part of
    /// unknown complete length (`*`) that runs past the length the first answer stated is of
    /// another version (a server that kept the ETag of a file that grew): the download starts
    /// again from zero instead of writing past the file's end (it wrote on, then failed, and the
    /// next try asked past the end).
    @Test(arguments: TransportKind.allCases)
    func aPartOfUnknownLengthPastTheKnownLengthStartsTheDownloadAgain(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 300_000, unknownLength: true)
        let grown = payload(1_500_000, seed: 7)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "grown.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            _ = try await self.cutDownload(client, to: destination, in: folder)
            origin.content.withLock { $0 = grown }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.resumedFrom == 0)
            #expect(result.status.code == 200)
            #expect(result.byteCount == 1_500_000)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(grown))
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    /// A destination that is a directory cannot be replaced, even with `overwrite`: refused
    /// before anything is sent (it failed at the final rename, after the whole body, and every
    /// later try the same way).
    @Test(arguments: TransportKind.allCases)
    func aDirectoryAtTheDestinationIsRefusedBeforeSending(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("taken"), withIntermediateDirectories: false)
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "taken", overwrite: true)
            let failure = await expectCourierError {
                _ = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            }
            #expect(failure?.kind == .invalidRequest)
            #expect(failure?.message.contains("is a directory") == true)
            #expect(server.requests.isEmpty)
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    /// A symbolic link to nothing at the destination is something there: without overwriting
    /// it is refused before anything is sent (seen as nothing, the whole body came and the final
    /// link failed, and so did every try after).
    @Test(arguments: TransportKind.allCases)
    func aDanglingLinkAtTheDestinationIsRefusedBeforeSending(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createSymbolicLink(
            atPath: folder.appendingPathComponent("x.bin").path, withDestinationPath: folder.appendingPathComponent("nowhere").path)
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let failure = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: "x.bin")
                ).value
            }
            #expect(failure?.kind == .invalidRequest)
            #expect(failure?.message.contains("exists") == true)
            #expect(server.requests.isEmpty)
            // Allowed to overwrite, the link itself is replaced (not whatever it points at).
            let result = try await client.download(
                Endpoint<Data>(path: "/file", decoding: .data),
                to: DownloadDestination(directory: folder, fileName: "x.bin", overwrite: true)
            ).value
            #expect(result.byteCount == 1_000_000)
            #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("nowhere").path))
            let type = try FileManager.default.attributesOfItem(atPath: result.url.path)[.type] as? FileAttributeType
            #expect(type == .typeRegular)
        }
    }

    /// RFC 9110 §9.3.2: a HEAD's answer has no content; a download of it moved an empty file
    /// into place (over a real one when overwriting). Refused before anything is sent.
    @Test(arguments: TransportKind.allCases)
    func aHEADEndpointIsNoDownload(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let kept = try self.file("file.bin", in: folder, content: Data("precious".utf8))
        let server = try await http1Server(FileOrigin().handle)
        try await withClient(kind, server: server) { client in
            let failure = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(method: .head, path: "/file", decoding: .data),
                    to: DownloadDestination(directory: folder, fileName: "file.bin", overwrite: true)
                ).value
            }
            #expect(failure?.kind == .invalidRequest)
            #expect(server.requests.isEmpty)
            let content = try Data(contentsOf: kept)
            #expect(content == Data("precious".utf8))
            #expect(self.hiddenFiles(folder).isEmpty)
        }
    }

    /// A file name as long as a name may be (255 bytes) downloads, and resumes: the hidden
    /// partial file and its record, named after the file, would be longer, so they are named
    /// after a digest of it. A longer name is refused before anything is sent.
    @Test(arguments: TransportKind.allCases)
    func aFileNameAsLongAsANameMayBeDownloadsAndResumes(_ kind: TransportKind) async throws {
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let name = String(repeating: "a", count: 251) + ".bin"
        let origin = FileOrigin(cutFirstAfter: 300_000)
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let destination = DownloadDestination(directory: folder, fileName: name)
            let cut = await expectCourierError {
                _ = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            }
            #expect(cut?.kind == .transport)
            #expect(self.hiddenFiles(folder).count == 2)
            let result = try await client.download(Endpoint<Data>(path: "/file", decoding: .data), to: destination).value
            #expect(result.byteCount == 1_000_000)
            #expect(result.resumedFrom > 0)
            #expect(server.requests.last?.header("Range") != nil)
            #expect(self.visibleFiles(folder) == [name])
            #expect(self.hiddenFiles(folder).isEmpty)
            let tooLong = await expectCourierError {
                _ = try await client.download(
                    Endpoint<Data>(path: "/file", decoding: .data), to: DownloadDestination(directory: folder, fileName: name + "x")
                ).value
            }
            #expect(tooLong?.kind == .invalidRequest)
            #expect(server.requests.count == 2)
        }
    }

    /// RFC 9110 §13.1.5 and §13.2.2: a 416 proves the partial file whole only when If-Range
    /// matched. A server that ignores If-Range answers the range of a new version of exactly the
    /// partial file's length with 416 and the new Last-Modified: the download starts again.
    @Test(arguments: TransportKind.allCases)
    func aRangeNotSatisfiableOfAnotherDateIsNoProofTheFileIsWhole(_ kind: TransportKind) async throws {
        let origin = FileOrigin(
            cutFirstAfter: 400_000, dates: ("Sun, 22 Nov 2026 10:00:00 GMT", "Sun, 22 Nov 2026 11:00:00 GMT"), ignoresIfRange: true)
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "same-size.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            let before = try await self.cutDownload(client, to: destination, in: folder)
            // A record kept before complete lengths were (none here): only the validator can tell
            // the 416 is of another version.
            try self.dropLength(from: before.record, writingTo: folder.appendingPathComponent(".courier-same-size.bin.partial.json"))
            let version2 = payload(before.partial.count, seed: 77)
            origin.content.withLock { $0 = version2 }
            origin.dates.withLock { $0 = ("Thu, 26 Nov 2026 10:00:00 GMT", "Thu, 26 Nov 2026 11:00:00 GMT") }
            let result = try await client.download(endpoint, to: destination).value
            #expect(result.status.code == 200)
            #expect(result.resumedFrom == 0)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(version2))
            #expect(server.requests.contains { $0.header("Range") == "bytes=\(before.partial.count)-" })
        }
    }

    /// RFC 9110 §8.8.3: an entity tag is quoted. An unquoted ETag is no validator to resume
    /// with, and with an entity tag at hand the date may not stand in for it (§13.1.5): a cut
    /// download keeps no record, and the next one asks for the whole body.
    @Test(arguments: TransportKind.allCases)
    func anUnquotedETagIsNoValidatorToResumeWith(_ kind: TransportKind) async throws {
        let origin = FileOrigin(cutFirstAfter: 400_000)
        origin.etag.withLock { $0 = "v1" }
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server) { client in
            let destination = DownloadDestination(directory: folder, fileName: "unquoted.bin")
            let endpoint = Endpoint<Data>(path: "/file", decoding: .data)
            let failure = await expectCourierError { _ = try await client.download(endpoint, to: destination).value }
            #expect(failure?.kind == .transport)
            #expect(self.hiddenFiles(folder) == [".courier-unquoted.bin.partial"])
            let result = try await client.download(endpoint, to: destination).value
            #expect(server.requests.last?.header("Range") == nil)
            #expect(server.requests.last?.header("If-Range") == nil)
            #expect(result.resumedFrom == 0)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(origin.content.withLock { $0 }))
        }
    }
}

extension TransferTests {
    /// A file served as a gzip representation (`Content-Encoding: gzip`, ranges counted in its
    /// compressed bytes, RFC 9110 §14.1.2) although the download asks for `identity`. URLSession
    /// decodes it on its way (only it: `AsyncHTTPClientTransport` hands a download the bytes as
    /// sent), so the partial file holds decoded bytes that no range of the representation
    /// continues: a 206 is not spliced on, and the download starts again from zero.
    @Test
    func aPartDecodedByThePlatformIsNotSplicedOntoThePartialFile() async throws {
        let content = payload(300_000, seed: 3)
        let encoded = try StreamingAndCompressionTests.encoded(content, "gzip")
        let server = try await http1Server { request in
            let fields = [("Content-Encoding", "gzip"), ("ETag", "\"g1\""), ("Content-Type", "application/octet-stream")]
            if let range = request.header("Range"), let start = Int(range.dropFirst("bytes=".count).dropLast()), start < encoded.count {
                return ScriptedResponse(
                    status: 206, headers: fields + [("Content-Range", "bytes \(start)-\(encoded.count - 1)/\(encoded.count)")],
                    body: encoded.subdata(in: start..<encoded.count))
            }
            return ScriptedResponse(status: 200, headers: fields, body: encoded)
        }
        let folder = try self.directory()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withClient(.urlSession, server: server) { client in
            // What a cancelled download of the decoded body left: its first 100,000 bytes and
            // the validator.
            let url = server.baseURL.absoluteString + "/gz"
            try content.prefix(100_000).write(to: folder.appendingPathComponent(".courier-gz.bin.partial"))
            try Data(#"{"url":"\#(url)","validator":"\"g1\""}"#.utf8).write(
                to: folder.appendingPathComponent(".courier-gz.bin.partial.json"))
            let destination = DownloadDestination(directory: folder, fileName: "gz.bin")
            let result = try await client.download(Endpoint<Data>(path: "/gz", decoding: .data), to: destination).value
            #expect(server.requests.first?.header("Range") == "bytes=100000-")
            #expect(server.requests.last?.header("Range") == nil)
            #expect(result.resumedFrom == 0)
            #expect(sha256(try Data(contentsOf: result.url)) == sha256(content))
        }
    }
}
