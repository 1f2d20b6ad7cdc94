import Courier
import CourierTestServer
import CourierTesting
import Foundation
import HTTPTypes
import Testing

@Suite("Record real exchanges as fixtures, replay them in tests")
struct FixtureTests {
    static func folder() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("courier-fixtures-\(UUID().uuidString)")
    }

    static let routes: TestServer.Handler = { request in
        switch request.path {
        case "/articles/1":
            return .json(#"{"id":1,"title":"first"}"#, headers: [("Set-Cookie", "session=s-secret"), ("X-Request-Id", "r-1")])
        case "/login": return .json(#"{"id":9,"title":"signed in","access_token":"a-secret"}"#)
        case "/token":
            // GitHub's default token answer: a form, not JSON.
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Data("access_token=f-secret&token_type=bearer".utf8))
        case "/sts":
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "text/xml")],
                body: Data("<R><SessionToken>x-secret</SessionToken><Code>ok</Code></R>".utf8))
        case "/bare-token":
            // A token answer without a Content-Type.
            return ScriptedResponse(status: 200, body: Data(#"{"access_token":"n-secret","token_type":"bearer"}"#.utf8))
        case "/jwt":
            return ScriptedResponse(status: 200, headers: [("Content-Type", "application/jwt")], body: Data("eyJhbGciOi.j-secret.sig".utf8))
        case "/envelope":
            return .json(#"{"code":0,"msg":"ok","data":{"id":5,"title":"wrapped"}}"#)
        default: return await Routes.standard(request)
        }
    }

    /// Recording goes through a real transport, so it runs on both.
    @Test(arguments: TransportKind.allCases)
    func recordedExchangesReplayWithoutANetworkUnderStableNames(_ kind: TransportKind) async throws {
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let article = Endpoint<Article>(name: "article", path: "/articles/1")
        let login = Endpoint<Article>(
            name: "login", method: .post, path: "/login", body: .data(Data(#"{"user":"ann"}"#.utf8), contentType: "application/json"))
        let missing = Endpoint<Article>(name: "missing", path: "/status/404").retry(.never)
        for _ in 0..<2 {
            // Two servers on two ports: the files must have the same names both times.
            let server = try await http1Server(Self.routes)
            try await withClient(
                kind, server: server,
                configure: {
                    $0.eventMonitors = [FixtureRecorder(directory: folder)]
                    $0.defaultHeaders[.authorization] = "Bearer t-secret"
                }
            ) { client in
                _ = try await client.send(article)
                _ = try await client.send(login)
                _ = try? await client.send(missing)
            }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.count == 3)
        #expect(files.allSatisfy { $0.hasSuffix(".json") })
        #expect(files.map { String($0.split(separator: "-").first ?? "") } == ["article", "login", "missing"])
        let everything = try files.map { try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8) }.joined()
        #expect(!everything.contains("t-secret"))
        #expect(!everything.contains("s-secret"))
        #expect(!everything.contains("a-secret"))
        #expect(everything.contains(#""status" : 404"#))

        let replay = Client(
            configuration: .init(transport: FixtureTransport(directory: folder), baseURL: URL(string: "https://elsewhere.example/")!) {
                $0.debugOptions = .off
            })
        let replayed = try await replay.send(article)
        #expect(replayed == Article(id: 1, title: "first"))
        let response = try await replay.response(article)
        #expect(response.headers[HTTPField.Name("X-Request-Id")!] == "r-1")
        #expect(try await replay.send(login).title == "signed in")
        let notFound = await expectCourierError { _ = try await replay.send(missing) }
        #expect(notFound?.status == .notFound)
    }

    /// Recording goes through a real transport, so it runs on both.
    @Test(arguments: TransportKind.allCases)
    func secretsInFormAndXMLBodiesAreNotWrittenToFixtures(_ kind: TransportKind) async throws {
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [FixtureRecorder(directory: folder)] }) { client in
            _ = try await client.send(Endpoint<Data>(name: "token", path: "/token", decoding: .data))
            _ = try await client.send(Endpoint<Data>(name: "sts", path: "/sts", decoding: .data))
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.count == 2)
        let everything = try files.map { try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8) }.joined()
        #expect(!everything.contains("f-secret"))
        #expect(!everything.contains("x-secret"))
        // What is no secret is kept, to replay.
        #expect(everything.contains("token_type=bearer"))
        #expect(everything.contains("<Code>ok</Code>"))
    }

    /// Recording goes through a real transport, so it runs on both.
    @Test(arguments: TransportKind.allCases)
    func bodiesWithoutATypeAreRedactedAndEnvelopeCodesReplayAsRecorded(_ kind: TransportKind) async throws {
        // A body without a Content-Type was stored as it came, tokens and all; a JWT answer too.
        // An envelope's numeric `code` was hidden as text ("REDACTED"), so its replay failed as
        // a business error.
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let envelope = Endpoint<Article>(name: "envelope", path: "/envelope").wire(EnvelopeProtocol())
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [FixtureRecorder(directory: folder)] }) { client in
            _ = try await client.send(Endpoint<Data>(name: "bare-token", path: "/bare-token", decoding: .data))
            _ = try await client.send(Endpoint<Data>(name: "jwt", path: "/jwt", decoding: .data))
            #expect(try await client.send(envelope).id == 5)
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.count == 3)
        let everything = try files.map { try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8) }.joined()
        #expect(!everything.contains("n-secret"))
        #expect(!everything.contains("j-secret"))
        #expect(everything.contains("token_type"))

        let replay = Client(
            configuration: .init(transport: FixtureTransport(directory: folder), baseURL: URL(string: "https://elsewhere.example/")!) {
                $0.debugOptions = .off
            })
        #expect(try await replay.send(envelope) == Article(id: 5, title: "wrapped"))
    }

    // Replay is a transport itself (no socket involved), so this runs once.
    @Test
    func strictReplayFailsNamingTheFileItLookedFor() async throws {
        let folder = Self.folder()
        let replay = Client(
            configuration: .init(transport: FixtureTransport(directory: folder), baseURL: URL(string: "https://api.example/")!) {
                $0.debugOptions = .off
            })
        let error = await expectCourierError { _ = try await replay.send(Endpoint<Article>(name: "profile", path: "/me")) }
        #expect(error?.kind == .invalidRequest)
        #expect(error?.message.contains("no fixture for profile GET /me") == true)
        #expect(error?.message.contains(folder.appendingPathComponent("profile-").path) == true)
        // Not strict: a 404 instead.
        let lenient = Client(
            configuration: .init(
                transport: FixtureTransport(directory: folder, strict: false), baseURL: URL(string: "https://api.example/")!
            ) {
                $0.debugOptions = .off
            })
        let notFound = await expectCourierError {
            _ = try await lenient.send(Endpoint<Article>(name: "profile", path: "/me").retry(.never))
        }
        #expect(notFound?.status == .notFound)
    }

    // Replay is a transport itself (no socket involved), so this runs once.
    @Test
    func aCorruptFixtureIsAClearErrorNotACrash() async throws {
        let folder = Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let client = Client(
            configuration: .init(transport: FixtureTransport(directory: folder), baseURL: URL(string: "https://api.example/")!) {
                $0.debugOptions = .off
            })
        let endpoint = Endpoint<Article>(name: "article", path: "/articles/1")
        // Find the name the transport looks for, then put garbage there.
        let missing = await expectCourierError { _ = try await client.send(endpoint) }
        let path = try #require(missing?.message.components(separatedBy: "looked for ").last)
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: path))
        let corrupt = await expectCourierError { _ = try await client.send(endpoint) }
        #expect(corrupt?.kind == .invalidRequest)
        #expect(corrupt?.message.contains("is not a recorded exchange") == true)
        // A status HTTP has no room for (an edited file) is an error, not a trap.
        let hostile =
            #"{"endpoint":"article","method":"GET","url":"/articles/1","requestHeaders":[],"status":5000,"responseHeaders":[],"body":"{}"}"#
        try Data(hostile.utf8).write(to: URL(fileURLWithPath: path))
        let badStatus = await expectCourierError { _ = try await client.send(endpoint) }
        #expect(badStatus?.kind == .invalidRequest)
        #expect(badStatus?.message.contains("has the status 5000") == true)
    }
}
