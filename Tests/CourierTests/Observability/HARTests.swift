import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

@Suite("HAR 1.2 capture: valid files, redacted secrets, Courier's own facts")
struct HARTests {
    static func json(_ data: Data) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func entries(_ recorder: HARRecorder) throws -> [[String: Any]] {
        let document = try Self.json(try recorder.harData())
        let log = try #require(document["log"] as? [String: Any])
        return try #require(log["entries"] as? [[String: Any]])
    }

    @Test(arguments: TransportKind.allCases)
    func aSessionIsRecordedAsAValidHARFileWithSecretsRedacted(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let recorder = HARRecorder()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [recorder]
                $0.defaultHeaders[.authorization] = "Bearer secret token with spaces"
            }
        ) { client in
            _ = try await client.send(
                Endpoint<Article>(
                    name: "article", path: "/json",
                    query: [URLQueryItem(name: "access_token", value: "q-secret"), URLQueryItem(name: "page", value: "2")]))
            let login = #"{"user":"ann","password":"pa ss"}"#
            _ = try await client.send(
                Endpoint<Echo>(name: "login", method: .post, path: "/echo", body: .data(Data(login.utf8), contentType: "application/json")))
            _ = try? await client.send(Endpoint<Article>(name: "missing", path: "/status/404").retry(.never))
        }
        let data = try recorder.harData()
        let violations = try HARSchema.validate(har: data)
        #expect(violations == [])
        let text = String(decoding: data, as: UTF8.self)
        #expect(!text.contains("secret token"))
        #expect(!text.contains("q-secret"))
        #expect(!text.contains("pa ss"))
        let entries = try Self.entries(recorder)
        #expect(entries.count == 3)
        let first = entries[0]
        let request = try #require(first["request"] as? [String: Any])
        #expect(request["method"] as? String == "GET")
        #expect((request["url"] as? String)?.contains("access_token=REDACTED") == true)
        #expect((request["queryString"] as? [[String: String]])?.contains { $0["name"] == "page" && $0["value"] == "2" } == true)
        #expect(
            (request["headers"] as? [[String: String]])?.contains { $0["name"] == "authorization" && $0["value"] == "REDACTED" } == true)
        #expect(request["httpVersion"] as? String == "HTTP/1.1")
        let response = try #require(first["response"] as? [String: Any])
        #expect(response["status"] as? Int == 200)
        #expect(response["statusText"] as? String == "OK")
        let content = try #require(response["content"] as? [String: Any])
        #expect(content["size"] as? Int == 24)
        #expect(content["mimeType"] as? String == "application/json")
        #expect((content["text"] as? String)?.contains(#""id":1"#) == true)
        let courier = try #require(first["_courier"] as? [String: Any])
        #expect(courier["endpoint"] as? String == "article")
        #expect(courier["source"] as? String == "network")
        #expect(courier["attempts"] as? Int == 1)
        let timings = try #require(first["timings"] as? [String: Double])
        #expect((timings["wait"] ?? -1) >= 0)
        #expect(
            abs(
                (first["time"] as? Double ?? 0)
                    - ((timings["blocked"] ?? 0) + (timings["send"] ?? 0) + (timings["wait"] ?? 0) + (timings["receive"] ?? 0))) < 0.01)
        let post = try #require(entries[1]["request"] as? [String: Any])
        let postData = try #require(post["postData"] as? [String: String])
        #expect(postData["mimeType"] == "application/json")
        #expect(postData["text"]?.contains(#""password":"REDACTED""#) == true)
        let failed = try #require(entries[2]["_courier"] as? [String: Any])
        #expect(failed["errorKind"] as? String == CourierError.Kind.httpStatus.description)
        #expect((entries[2]["response"] as? [String: Any])?["status"] as? Int == 404)
    }

    @Test(arguments: TransportKind.allCases)
    func cacheAndDeduplicationShowInTheCourierFields(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/shared" { await gate.wait() }
            return .json(#"{"id":1,"title":"x"}"#, headers: [("Cache-Control", "max-age=600")])
        }
        let recorder = HARRecorder()
        let events = CountingMonitor()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [recorder, events]
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
            }
        ) { client in
            _ = try await client.send(Endpoint<Article>(path: "/cached"))
            _ = try await client.send(Endpoint<Article>(path: "/cached"))
            let first = client.start(Endpoint<Article>(path: "/shared"))
            #expect(await eventually { server.requests.contains { $0.path == "/shared" } })
            let second = client.start(Endpoint<Article>(path: "/shared"))
            #expect(await eventually { events.count("joined") == 1 })
            await gate.open()
            _ = try await first.value
            _ = try await second.value
        }
        let data = try recorder.harData()
        #expect(try HARSchema.validate(har: data) == [])
        let sources = try Self.entries(recorder).compactMap { ($0["_courier"] as? [String: Any])?["source"] as? String }
        #expect(sources.sorted() == ["cache", "coalesced", "network", "network"])
        let hit = try #require(try Self.entries(recorder).first { ($0["_courier"] as? [String: Any])?["source"] as? String == "cache" })
        #expect((hit["response"] as? [String: Any])?["httpVersion"] as? String == "")
    }

    @Test(arguments: TransportKind.allCases)
    func bodiesAreCutAtTheLimitAndBinaryIsBase64(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            if request.path == "/bytes" {
                return ScriptedResponse(
                    status: 200, headers: [("Content-Type", "application/octet-stream")], body: Data((0..<2000).map { UInt8($0 % 256) }))
            }
            return .json("[" + Array(repeating: "1", count: 2000).joined(separator: ",") + "]")
        }
        let recorder = HARRecorder(bodyLimit: 100)
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [recorder] }) { client in
            _ = try await client.send(Endpoint<[Int]>(path: "/numbers"))
            _ = try await client.send(Endpoint<Data>(path: "/bytes", decoding: .data))
        }
        #expect(try HARSchema.validate(har: try recorder.harData()) == [])
        let entries = try Self.entries(recorder)
        let numbers = try #require((entries[0]["response"] as? [String: Any])?["content"] as? [String: Any])
        #expect(numbers["size"] as? Int == 4001)
        #expect(((numbers["text"] as? String)?.utf8.count ?? 0) < 130)
        #expect((entries[0]["_courier"] as? [String: Any])?["truncated"] as? Bool == true)
        let bytes = try #require((entries[1]["response"] as? [String: Any])?["content"] as? [String: Any])
        #expect(bytes["encoding"] as? String == "base64")
        #expect(Data(base64Encoded: bytes["text"] as? String ?? "") == Data((0..<100).map { UInt8($0) }))
    }

    @Test(arguments: TransportKind.allCases)
    func binaryBodiesThatHappenToBeUTF8AreBase64Too(_ kind: TransportKind) async throws {
        // HAR 1.2 `content.encoding`: a protobuf message or an SVG image whose bytes are valid
        // UTF-8 was recorded as the text "(7 bytes, binary)", its content lost.
        let proto = Data([0x0A, 0x05, 0x68, 0x65, 0x6C, 0x6C, 0x6F])
        let svg = Data(#"<svg xmlns="http://www.w3.org/2000/svg"/>"#.utf8)
        let server = try await http1Server { request in
            switch request.path {
            case "/proto": ScriptedResponse(status: 200, headers: [("Content-Type", "application/x-protobuf")], body: proto)
            case "/jspb":
                // JSON under a protobuf name is still JSON: redacted text, never raw base64.
                ScriptedResponse(
                    status: 200, headers: [("Content-Type", "application/json+protobuf")], body: Data(#"{"password":"hunter2"}"#.utf8))
            case "/named":
                // A parameter that names a JSON file does not make the bytes JSON.
                ScriptedResponse(status: 200, headers: [("Content-Type", #"application/octet-stream; name="a.json""#)], body: proto)
            default: ScriptedResponse(status: 200, headers: [("Content-Type", "image/svg+xml")], body: svg)
            }
        }
        let recorder = HARRecorder()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [recorder] }) { client in
            _ = try await client.send(Endpoint<Data>(path: "/proto", decoding: .data))
            _ = try await client.send(Endpoint<Data>(path: "/svg", decoding: .data))
            _ = try await client.send(Endpoint<Data>(path: "/jspb", decoding: .data))
            _ = try await client.send(Endpoint<Data>(path: "/named", decoding: .data))
        }
        #expect(try HARSchema.validate(har: try recorder.harData()) == [])
        let entries = try Self.entries(recorder)
        try #require(entries.count == 4)
        for (entry, expected) in zip([entries[0], entries[1], entries[3]], [proto, svg, proto]) {
            let content = try #require((entry["response"] as? [String: Any])?["content"] as? [String: Any])
            #expect(content["encoding"] as? String == "base64")
            #expect(Data(base64Encoded: content["text"] as? String ?? "") == expected)
        }
        let jspb = try #require((entries[2]["response"] as? [String: Any])?["content"] as? [String: Any])
        #expect(jspb["encoding"] == nil)
        let text = try #require(jspb["text"] as? String)
        #expect(!text.contains("hunter2") && text.contains("password"), "\(text)")
    }

    @Test(arguments: TransportKind.allCases)
    func aFailureAfterARedirectIsRecordedAtTheURLThatFailed(_ kind: TransportKind) async throws {
        // The entry held the first URL with the last hop's status and fields.
        let server = try await http1Server { request in
            request.path == "/a"
                ? ScriptedResponse(status: 302, headers: [("Location", "/b")], body: Data())
                : .text("down", status: 500)
        }
        let recorder = HARRecorder()
        try await withClient(
            kind, server: server,
            configure: {
                $0.eventMonitors = [recorder]
                $0.retry = .never
            }
        ) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<String>(path: "/a", decoding: .string)) }
            #expect(error?.status?.code == 500)
        }
        let entry = try #require(try Self.entries(recorder).first)
        let request = try #require(entry["request"] as? [String: Any])
        #expect((request["url"] as? String)?.hasSuffix("/b") == true, "\(String(describing: request["url"]))")
        #expect((entry["response"] as? [String: Any])?["status"] as? Int == 500)
    }

    @Test(arguments: TransportKind.allCases)
    func twoClientsWritingOneHARFileByTheEnvironmentKeepEachOthersEntries(_ kind: TransportKind) async throws {
        // An app with a token client beside its API client: each client's recorder rewrote the
        // file with its own entries alone.
        let server = try await http1Server()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("courier-\(UUID().uuidString).har").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = DebugOptions(environment: ["COURIER_HAR": path], arguments: [])
        try await withClient(kind, server: server, configure: { $0.debugOptions = options }) { api in
            try await withClient(kind, server: server, configure: { $0.debugOptions = options }) { tokens in
                _ = try await api.send(Endpoint<Article>(path: "/json"))
                _ = try await tokens.send(Endpoint<Article>(path: "/json", query: ["from": "tokens"]))
                _ = try await api.send(Endpoint<Article>(path: "/json", query: ["from": "api"]))
            }
        }
        let document = try Self.json(try Data(contentsOf: URL(fileURLWithPath: path)))
        let entries = (document["log"] as? [String: Any])?["entries"] as? [[String: Any]] ?? []
        let urls = entries.compactMap { ($0["request"] as? [String: Any])?["url"] as? String }
        #expect(urls.count == 3, "\(urls)")
        #expect(urls.contains { $0.hasSuffix("from=tokens") })
    }

    @Test(arguments: TransportKind.allCases)
    func aRecorderKeepsTheNewestEntriesUpToItsLimitAndItsFileHasThemAll(_ kind: TransportKind) async throws {
        // Entries were never dropped (a long session kept every body it saw); with a file, two
        // requests ending at once could write their snapshots in the other order, leaving the
        // file without the last entry.
        let server = try await http1Server()
        let folder = temporaryDirectory("har")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("session.har")
        let recorder = HARRecorder(maxEntries: 30, writingTo: file)
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [recorder] }) { client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<40 {
                    group.addTask { _ = try await client.send(Endpoint<Echo>(method: .post, path: "/echo", query: ["i": "\(index)"])) }
                }
                try await group.waitForAll()
            }
        }
        #expect(recorder.count == 30)
        // Entries of requests that ended during a write are written in the background.
        #expect(await eventually { !recorder.log.writing.current.active })
        // It holds response bodies: readable by this user only, whatever the umask.
        let permissions = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
        #expect(permissions == 0o600)
        let written = try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any]
        let entries = (written?["log"] as? [String: Any])?["entries"] as? [Any]
        #expect(entries?.count == 30)
        #expect(try Self.entries(recorder).count == 30)
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestThatEndsWhileOthersEndWritesTheFileOnceAndReturns(_ kind: TransportKind) async throws {
        // The monitor runs before the caller gets its answer. The first request to end wrote the
        // whole document, then again for each request that ended during the write, for as long
        // as requests kept ending: its caller waited for them all.
        let server = try await http1Server()
        let folder = temporaryDirectory("har-once")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let recorder = HARRecorder(writingTo: folder.appendingPathComponent("session.har"))
        let writes = Locked((byCaller: 0, all: 0))
        recorder.log.writeBegins.withLock {
            $0 = {
                let first = writes.withLock { counts -> Bool in
                    counts.all += 1
                    if HARWriteProbe.isCaller { counts.byCaller += 1 }
                    return counts.all == 1
                }
                // Another request ends during the first write.
                if first { recorder.log.writing.withLock { $0.stale = true } }
            }
        }
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [recorder] }) { client in
            let article = try await HARWriteProbe.$isCaller.withValue(true) { try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(article.id == 1)
            #expect(writes.current.byCaller == 1)
            // The entries noted are written all the same, in the background.
            #expect(await eventually { writes.current.all == 2 && !recorder.log.writing.current.active })
            #expect(writes.current.byCaller == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func urlsInResponseFieldsAndBytesThatCannotBeRedactedStayOut(_ kind: TransportKind) async throws {
        // A Location with an authorization code in it is redacted as a URL; a body that is not
        // UTF-8 but not of a binary type either (JSON with a stray byte, a multipart form with a
        // file) cannot be redacted, so only its size is recorded.
        let server = try await http1Server { request in
            request.path == "/created"
                ? ScriptedResponse(status: 201, headers: [("Location", "/cb?code=AUTHCODE&access_token=SECRET&state=s")], body: Data())
                : .text("ok")
        }
        let recorder = HARRecorder()
        let body = Data([0xFF]) + Data(#"{"password":"hunter2"}"#.utf8)
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [recorder] }) { client in
            _ = try await client.response(Endpoint<Void>(method: .post, path: "/created", decoding: .none))
            _ = try await client.send(
                Endpoint<String>(method: .post, path: "/upload", body: .data(body, contentType: "application/json"), decoding: .string))
        }
        let data = try recorder.harData()
        #expect(try HARSchema.validate(har: data) == [])
        let text = String(decoding: data, as: UTF8.self)
        for secret in ["AUTHCODE", "SECRET", "hunter2", body.base64EncodedString()] { #expect(!text.contains(secret), "\(secret)") }
        #expect(text.contains("state=s"))
        let upload = try #require((try Self.entries(recorder)[1]["request"] as? [String: Any])?["postData"] as? [String: Any])
        #expect((upload["text"] as? String)?.contains("\(body.count) bytes") == true)
    }

    @Test(arguments: TransportKind.allCases)
    func theHAREnvironmentVariableWritesTheFileAfterEachRequest(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("courier-\(UUID().uuidString).har").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = DebugOptions(environment: ["COURIER_HAR": path], arguments: [])
        try await withClient(kind, server: server, configure: { $0.debugOptions = options }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(try HARSchema.validate(har: data) == [])
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let again = try Self.json(try Data(contentsOf: URL(fileURLWithPath: path)))
            #expect(((again["log"] as? [String: Any])?["entries"] as? [Any])?.count == 2)
        }
    }

    @Test
    func theValidatorRejectsWhatTheSchemaForbids() throws {
        // The schema check is only worth something if it can fail.
        let broken =
            #"{"log":{"version":"1.2","creator":{"name":"x","version":"1"},"entries":[{"startedDateTime":"2026-01-01T00:00:00Z","time":1,"request":{"method":"GET"},"response":{},"cache":{},"timings":{"send":-1,"wait":0,"receive":0}}]}}"#
        let violations = try HARSchema.validate(har: Data(broken.utf8))
        #expect(violations.contains { $0.contains("/log/entries/0/timings/send") })
        #expect(violations.contains { $0.contains("/log/entries/0/request") && $0.contains("url") })
        #expect(violations.contains { $0.contains("/log/entries/0/response") })
    }
}

/// Marks the task of a request's caller, to tell its writes of a HAR file from background ones.
enum HARWriteProbe {
    @TaskLocal static var isCaller = false
}
