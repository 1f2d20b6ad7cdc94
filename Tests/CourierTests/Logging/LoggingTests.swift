import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import InMemoryLogging
import Logging
import Testing

@Suite("Logging and cURL output show requests without secrets")
struct LoggingTests {
    @Test(arguments: TransportKind.allCases)
    func oneLineAtStartAndOneAtEndWithTheDetails(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .debug
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            _ = try await client.send(
                Endpoint<Article>(name: "news.article", path: "/json", query: ["access_token": "s3cr3t", "page": "1"]))
            let lines = handler.entries.map { "\($0.message)" }
            #expect(lines.count == 2)
            #expect(lines.first?.hasPrefix("→ ") == true)
            #expect(lines.first?.contains("news.article GET") == true)
            let end = lines.last ?? ""
            #expect(end.hasPrefix("← "))
            #expect(end.contains("news.article GET"))
            #expect(end.contains(" 200 "))
            #expect(end.contains("24B"))
            #expect(end.contains("HTTP/1.1"))
            #expect(end.hasSuffix("success"))
            #expect(end.contains("ms "))
            #expect(end.contains("access_token=REDACTED"))
            #expect(!lines.joined().contains("s3cr3t"))
            let startID = lines.first?.split(separator: " ")[1]
            let endID = end.split(separator: " ")[1]
            #expect(startID == endID)
            #expect(endID.count == 8)
        }
    }

    /// Runs `body` with a client of `kind` that logs at `.debug` into the handler it is given,
    /// hiding secrets with `redactor`.
    static func withDebugLog(
        _ kind: TransportKind, server: TestServer, redactor: Redactor, _ body: (Client, InMemoryLogHandler) async throws -> Void
    ) async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .debug
        try await withClient(
            kind, server: server,
            configure: {
                $0.logger = logger
                $0.redactor = redactor
            }
        ) { client in try await body(client, handler) }
    }

    /// A value interpolated into a path with a line break in it goes out percent-encoded, but the
    /// endpoint's default name (`GET /users/…`) took it as it was, and every log line that names
    /// the endpoint carried the break: the value could forge a log line of its own.
    @Test(arguments: TransportKind.allCases)
    func aLineBreakInAPathForgesNoLogLine(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in .text(request.uri) }
        let value = "x\r\n→ 00000000 GET /admin"
        let endpoint = Endpoint<String>(path: "/users/\(value)", decoding: .string)
        #expect(!endpoint.name.contains("\n") && !endpoint.name.contains("\r"), "\(endpoint.name)")
        try await Self.withDebugLog(kind, server: server, redactor: .standard) { client, handler in
            let target = try await client.send(endpoint)
            #expect(target.hasPrefix("/users/x%0D%0A"), "\(target)")
            let lines = handler.entries.map { "\($0.message)" }
            #expect(lines.count >= 2)
            for line in lines { #expect(!line.contains("\n") && !line.contains("\r"), "\(line)") }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRedirectsLocationIsHiddenWithTheClientsOwnRedactor(_ kind: TransportKind) async throws {
        // The `⤷` line used the standard redactor: a query name the app made secret showed.
        let server = try await http1Server { request in
            request.path == "/go" ? .text("", status: 302, headers: [("Location", "/next?sid=S3CRET")]) : .json(#"{"id":1,"title":"x"}"#)
        }
        var redactor = Redactor.standard
        redactor.queryNames.insert("sid")
        try await Self.withDebugLog(kind, server: server, redactor: redactor) { client, handler in
            _ = try await client.send(Endpoint<Article>(path: "/go"))
            let lines = handler.entries.map { "\($0.message)" }
            #expect(lines.contains { $0.hasPrefix("⤷ ") && $0.contains("sid=REDACTED") }, "\(lines)")
            #expect(!lines.joined().contains("S3CRET"), "\(lines)")
        }
    }

    /// A log monitor installed with a redactor of its own hides a redirect's location with it
    /// too; the `⤷` line used the client's (here the standard one), and the app's secret showed.
    @Test(arguments: TransportKind.allCases)
    func aRedirectsLocationIsHiddenWithTheMonitorsOwnRedactor(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            request.path == "/go" ? .text("", status: 302, headers: [("Location", "/next?sid=S3CRET")]) : .json(#"{"id":1,"title":"x"}"#)
        }
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .debug
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [LogMonitor(logger: logger, redactor: Self.sidHidden)] })
        {
            client in
            _ = try await client.send(Endpoint<Article>(path: "/go"))
            let lines = handler.entries.map { "\($0.message)" }
            #expect(lines.contains { $0.hasPrefix("⤷ ") && $0.contains("sid=HIDDEN") }, "\(lines)")
            #expect(!lines.joined().contains("S3CRET"), "\(lines)")
        }
    }

    /// The failures a monitor is told of, as the URLs of their contexts.
    final class FailureURLs: EventMonitor {
        let urls = Locked<[String]>([])
        func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
            self.urls.withLock { $0.append(error.context?.url ?? "none") }
        }
    }

    /// The standard redactor that also hides the query value `sid`, shown as `HIDDEN`: a secret
    /// of the app's own, which the standard redactor leaves visible.
    static var sidHidden: Redactor {
        var redactor = Redactor.standard
        redactor.queryNames.insert("sid")
        redactor.replacement = "HIDDEN"
        return redactor
    }

    /// An error's context names the request's URL with the client's own redactor, for the
    /// caller and for the monitors: a query name the app made secret is hidden there as in the
    /// log lines (it showed with the standard one), for a failure in any stage, and for a
    /// deduplicated joiner's copy of the shared error.
    @Test(arguments: TransportKind.allCases)
    func anErrorsURLIsHiddenWithTheClientsOwnRedactor(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let redactor = Self.sidHidden
        let monitor = FailureURLs()
        try await withClient(
            kind, server: server,
            configure: {
                $0.redactor = redactor
                $0.eventMonitors = [monitor]
            }
        ) { client in
            let failures = await withTaskGroup(of: CourierError?.self) { group in
                for path in ["/status/500?sid=S3CRET&page=1", "/status/500?sid=S3CRET&page=1", "/close-mid?sid=S3CRET"] {
                    group.addTask { await expectCourierError { _ = try await client.send(Endpoint<Data>(path: path, decoding: .data)) } }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(failures.count == 3)
            for failure in failures {
                let url = failure?.context?.url ?? ""
                #expect(url.contains("sid=HIDDEN"), "\(url)")
                #expect(!url.contains("S3CRET"), "\(url)")
            }
            let told = monitor.urls.current
            #expect(told.count == 3)
            #expect(told.allSatisfy { $0.contains("sid=HIDDEN") && !$0.contains("S3CRET") }, "\(told)")
        }
    }

    /// An error's text — its body excerpt and its message, which may be the server's words (a
    /// content type, an envelope's message) — is hidden with the client's own redactor: the
    /// names it was given showed in `"\(error)"` and in crash reports. A message is one line of
    /// at most 500 characters, so a server cannot write lines or a megabyte into a log through it.
    @Test(arguments: TransportKind.allCases)
    func anErrorsTextIsHiddenWithTheClientsOwnRedactorAndKeptToOneLine(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            switch request.path {
            case "/rejected": return .json(#"{"sid":"S3CRET","note":"kept"}"#, status: 400)
            case "/page": return .text("<h1>Down</h1>\r\n<p>line\u{2028}two \u{202E}desrever</p>\n", status: 503)
            case "/typed": return .text("x", headers: [("Content-Type", #"text/html; note="Bearer t0ken-value""#)])
            default: return .text("x", headers: [("Content-Type", "text/html; x=" + String(repeating: "y", count: 4000))])
            }
        }
        let redactor = Self.sidHidden
        try await withClient(kind, server: server, configure: { $0.redactor = redactor }) { client in
            let rejected = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/rejected", decoding: .data)) }
            let shown = String(describing: try #require(rejected))
            #expect(rejected?.kind == .httpStatus)
            #expect(!shown.contains("S3CRET"), "\(shown)")
            #expect(shown.contains("HIDDEN") && shown.contains("kept"), "\(shown)")
            #expect(rejected?.bodyExcerpt()?.contains("S3CRET") == false)
            let typed = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/typed")) }
            let typedText = String(describing: try #require(typed))
            #expect(typed?.kind == .decoding)
            #expect(!typedText.contains("t0ken-value"), "\(typedText)")
            let page = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/page", decoding: .data).retry(.never)) }
            let pageText = String(describing: try #require(page))
            #expect(pageText.contains("Down") && pageText.contains("desrever"), "\(pageText)")
            #expect(!pageText.unicodeScalars.contains { [0x0A, 0x0D, 0x2028, 0x202E].contains($0.value) }, "\(pageText.debugDescription)")
            let long = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/long")) }
            let longText = String(describing: try #require(long))
            #expect(longText.count < 1000, "\(longText.count) characters")
        }
        let written = String(describing: CourierError(.invalidRequest, "first line\r\nsecond\u{1B}[31m line\u{7}"))
        #expect(!written.contains(where: { $0.isNewline || $0 == "\u{1B}" || $0 == "\u{7}" }), "\(written.debugDescription)")
        #expect(written.contains("first line"))
    }

    /// An error made before the request exists (the build stage: an endpoint URL that is not
    /// one, a relative path on a client without a base URL) is hidden with the client's own
    /// redactor too: the stages that set it on errors sit below the build stage, and a query name
    /// the app made secret showed in the message and in `"\(error)"`.
    @Test(arguments: TransportKind.allCases)
    func anErrorOfTheBuildStageIsHiddenWithTheClientsOwnRedactor(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let redactor = Self.sidHidden
        try await withClient(kind, server: server, configure: { $0.redactor = redactor }) { client in
            let failure = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(path: "http://[::1/x?sid=S3CRET&page=1", decoding: .data))
            }
            let shown = String(describing: try #require(failure))
            #expect(failure?.kind == .invalidRequest)
            #expect(!shown.contains("S3CRET") && !(failure?.message.contains("S3CRET") ?? true), "\(shown)")
            #expect(shown.contains("HIDDEN") && shown.contains("page=1"), "\(shown)")
            // The server was never asked.
            #expect(server.requests.isEmpty)
        }
        let transport = makeTransport(kind)
        let unbased = Client(configuration: .init(transport: transport.transport) { $0.redactor = redactor })
        let relative = await expectCourierError { _ = try await unbased.send(Endpoint<Data>(path: "/x?sid=S3CRET", decoding: .data)) }
        try await transport.shutdown()
        let relativeText = String(describing: try #require(relative))
        #expect(relative?.kind == .invalidRequest)
        #expect(!relativeText.contains("S3CRET"), "\(relativeText)")
        #expect(relativeText.contains("HIDDEN"), "\(relativeText)")
    }

    /// A replacement of the app's own that a query cannot hold as it is (`[hidden value]`) is
    /// percent-encoded in a URL's query: written raw, Foundation stopped the process while the
    /// request's line was logged. A query name whose last word is `key` is a secret too.
    @Test(arguments: TransportKind.allCases)
    func aReplacementOfOnesOwnIsEncodedInAQueryNotACrash(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        var redactor = Redactor.standard
        redactor.replacement = "[hidden value]"
        try await Self.withDebugLog(kind, server: server, redactor: redactor) { client, handler in
            _ = try await client.send(Endpoint<Article>(path: "/json?token=T0KEN&subscription-key=SUBKEY&page=2"))
            let lines = handler.entries.map { "\($0.message)" }
            #expect(lines.contains { $0.contains("token=%5Bhidden%20value%5D&subscription-key=%5Bhidden%20value%5D&page=2") }, "\(lines)")
            #expect(!lines.joined().contains("T0KEN") && !lines.joined().contains("SUBKEY"), "\(lines)")
        }
        #expect(redactor.redact(urlString: "https://h/x?access_key=AK#s") == "https://h/x?access_key=%5Bhidden%20value%5D#s")
    }

    @Test(arguments: TransportKind.allCases)
    func failuresAreLoggedWithTheirKind(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let handler = InMemoryLogHandler()
        let logger = Logger(label: "test") { _ in handler }
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            _ = try? await client.send(Endpoint<Article>(path: "/status/500"))
            // Both lines are at `.info`: the start and the end.
            #expect(handler.entries.count == 2)
            #expect(handler.entries.allSatisfy { $0.level == .info })
            let last = handler.entries.last.map { "\($0.message)" } ?? ""
            #expect(last.hasSuffix("failure(http_status_500)"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func nothingIsLoggedByDefault(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            #expect(client.configuration.logger == nil)
            _ = try await client.send(Endpoint<Article>(path: "/json"))
        }
    }

    @Test
    func cURLRenderingRedactsAuthorizationCookiesAndTokens() throws {
        let client = Client(configuration: .init(transport: URLSessionTransport(), baseURL: URL(string: "https://api.example.com/v1")!))
        let endpoint = Endpoint<Article>(
            method: .post, path: "/login", query: ["api_key": "k-123", "lang": "en"],
            headers: [.authorization: "Bearer abc.def", .cookie: "sid=42", HTTPField.Name("X-Request")!: "r1"],
            body: .json(["user": "ada", "password": "hunter2"])
        )
        let curl = try client.makeRequest(for: endpoint).cURLDescription()
        #expect(curl.hasPrefix("curl -X POST 'https://api.example.com/v1/login?api_key=REDACTED&lang=en'"))
        #expect(curl.contains("-H 'Authorization: REDACTED'"))
        #expect(curl.contains("-H 'Cookie: REDACTED'"))
        #expect(curl.contains("-H 'X-Request: r1'"))
        #expect(curl.contains("\"user\":\"ada\""))
        for secret in ["abc.def", "sid=42", "k-123", "hunter2"] {
            #expect(!curl.contains(secret), "cURL output leaks \(secret)")
        }
    }

    @Test
    func aCURLCommandSendsItsBodyAsWrittenHidesWhatTheLogsHideAndEndsForHEAD() throws {
        let client = Client(configuration: .init(transport: URLSessionTransport(), baseURL: URL(string: "https://api.example.com")!))
        func curl(_ endpoint: Endpoint<Data>) throws -> String { try client.makeRequest(for: endpoint).cURLDescription() }
        // `--data-binary '@…'` made curl upload the local file of that name.
        let mention = try curl(
            Endpoint<Data>(
                method: .post, path: "/chat", body: .body(.data(Data("@/etc/passwd".utf8), contentType: "text/plain")), decoding: .data))
        #expect(mention.contains("--data-raw '@/etc/passwd'"))
        #expect(!mention.contains("--data-binary"))
        // Nested and percent-encoded secret names, which the logs and HAR hide, were shown here.
        let nested = try curl(
            Endpoint<Data>(method: .post, path: "/login", body: .json(["auth": ["user": "bob", "pass": "hunter2"]]), decoding: .data))
        #expect(!nested.contains("hunter2"), "\(nested)")
        let form = try curl(
            Endpoint<Data>(
                method: .post, path: "/login",
                body: .body(.data(Data("user%5Bpassword%5D=hunter2&x=1".utf8), contentType: "application/x-www-form-urlencoded")),
                decoding: .data))
        #expect(!form.contains("hunter2"), "\(form)")
        #expect(form.contains("x=1"))
        // `-X HEAD` makes curl wait for a body a HEAD answer never has.
        let head = try curl(Endpoint<Data>(method: .head, path: "/file", decoding: .data))
        #expect(head.hasPrefix("curl --head "))
        #expect(!head.contains("-X HEAD"))
        // A method is a token, and a token may hold a backquote: pasted into a shell, `-X X`id``
        // ran `id`. It is quoted; an ordinary method is not.
        let odd = try curl(Endpoint<Data>(method: HTTPRequest.Method("X`id`")!, path: "/file", decoding: .data))
        #expect(odd.hasPrefix("curl -X 'X`id`' "))
        #expect(try curl(Endpoint<Data>(method: .delete, path: "/file", decoding: .data)).hasPrefix("curl -X DELETE "))
    }

    @Test
    func errorDescriptionsDoNotLeakTokensFromBodies() {
        var error = CourierError(.httpStatus, "the server answered 401")
        error.body = Data(#"{"error":"bad","access_token":"leaky","hint":"Bearer abc123"}"#.utf8)
        #expect(!error.description.contains("leaky"))
        #expect(!error.description.contains("abc123"))
        #expect(error.description.contains("\"error\":\"bad\""))
    }

    /// The excerpt redacts a window of the body, then cuts it: a secret whose closing quote lies
    /// past the window went unrecognised, and a long secret before it, shrunk to the replacement,
    /// pulled it into the part shown. A quoted secret cut by the window is hidden to its end.
    @Test
    func aSecretCutByTheExcerptsWindowIsHidden() {
        var error = CourierError(.httpStatus, "the server answered 400")
        // The window is 4 × 120 + 4,096 = 4,576 bytes: the refresh token starts inside it and ends past it.
        let long = String(repeating: "a", count: 4_500)
        let refresh = "RT_SECRET_" + String(repeating: "b", count: 80)
        error.body = Data(#"{"access_token":"\#(long)","refresh_token":"\#(refresh)"}"#.utf8)
        let excerpt = error.bodyExcerpt(limit: 120) ?? ""
        #expect(!excerpt.contains("RT_SECRET") && !excerpt.contains("aaaa"), "\(excerpt)")
        #expect(excerpt.contains("refresh_token"), "\(excerpt)")
    }

    @Test(arguments: [Int.max, Int.max / 4 + 1, 0, -1, Int.min, 5])
    func aBodyExcerptOfAnyLimitNeitherTrapsNorLeaks(_ limit: Int) {
        // The limit is a caller's number: no overflow in the window read, no negative prefix.
        var error = CourierError(.httpStatus, "the server answered 400")
        error.body = Data(#"{"refresh_token":"r-secret","error":"invalid_grant"}"#.utf8)
        let excerpt = error.bodyExcerpt(limit: limit)
        #expect(excerpt?.contains("r-secret") == false)
        #expect(UInt(excerpt?.count ?? 0) <= UInt(max(limit, 0)) + 1)  // the cut, and its "…"
    }

    @Test(arguments: [
        (#"{"password":"correct horse battery"}"#, "horse"),
        (#"{"client_secret":"ab,cd&ef"}"#, "cd&ef"),
        (#"{"echo":"{\"password\":\"hunter2\"}"}"#, "hunter2"),
        (#"{"password": "a\"b c", "x":"y"}"#, "b c"),
        ("Set-Cookie: sid=abc123; Path=/", "abc123"),
        ("Authorization: Token abc123", "abc123"),
        ("refresh_token=r-t-1, next", "r-t-1"),
        // Unquoted secrets hold spaces, `;` and `,`; tokens carry more than token68.
        ("password=correct horse battery", "battery"),
        ("token=ab;cd,ef", "cd,ef"),
        ("invalid: Bearer 7|Xk9sQ2pLm", "Xk9sQ2pLm"),
    ])
    func freeTextLosesWholeSecrets(_ text: String, _ secret: String) {
        // A quoted value is hidden whole (spaces, commas, escaped quotes), JSON escaped inside a
        // string too, and a secret header written out as text to the end of its line.
        let redacted = Redactor.standard.redactFreeText(text)
        #expect(!redacted.contains(secret), "\(redacted)")
        #expect(redacted.contains("REDACTED"))
    }

    /// OpenID Connect RP-Initiated Logout §2 sends the ID token as `id_token_hint`; RFC 8628
    /// §3.4 polls with the secret `device_code`: both were shown in URLs, log lines and form bodies.
    @Test
    func tokenHintsAndDeviceCodesAreHiddenAndATokensTypeIsNot() {
        let url = Redactor.standard.redact(
            urlString: "https://id.example/logout?id_token_hint=eyJ.ID.TOKEN&state=s1&token_type_hint=refresh_token")
        #expect(!url.contains("eyJ.ID.TOKEN"), "\(url)")
        #expect(url.contains("state=s1") && url.contains("token_type_hint=refresh_token"), "\(url)")
        let form = Redactor.standard.redact(
            body: Data("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=GmRh-DEVICE&client_id=app".utf8),
            contentType: "application/x-www-form-urlencoded", limit: 1000)
        #expect(!form.contains("GmRh-DEVICE"), "\(form)")
        #expect(form.contains("client_id=app"), "\(form)")
        // Names of a token's type, and counts of tokens, are no secrets.
        let exchange = Redactor.standard.redact(urlString: "https://a/t?subject_token_type=urn:jwt&max_tokens=50&subject_token=s3cr3t")
        #expect(exchange.contains("subject_token_type=urn:jwt") && exchange.contains("max_tokens=50"), "\(exchange)")
        #expect(!exchange.contains("s3cr3t"), "\(exchange)")
        // In free text too (a Referer, a Link, an error's excerpt).
        let text = Redactor.standard.redactFreeText("from https://id.example/logout?id_token_hint=eyJ.ID.TOKEN")
        #expect(!text.contains("eyJ.ID.TOKEN"), "\(text)")
    }

    /// Hiding an unquoted secret to the end of its line must not take what follows a value
    /// hidden already, a URL's closing `>` or a JSON comma with it.
    @Test
    func freeTextKeepsWhatFollowsAHiddenValue() {
        let redactor = Redactor.standard
        let message = redactor.redactFreeText("refused a redirect to (https://idp/cb?code=REDACTED for a request whose body is its own")
        #expect(message.hasSuffix("for a request whose body is its own"), "\(message)")
        let link = redactor.redactFreeText(#"<https://a/p?access_token=abc123>; rel="next""#)
        #expect(!link.contains("abc123") && link.hasSuffix(#">; rel="next""#), "\(link)")
        let json = redactor.redactFreeText(#"{code:401,"message":"expired"}"#)
        #expect(json.contains(#""message":"expired""#), "\(json)")
    }

    /// A UTF-16 body read as UTF-8 is valid text with a NUL between its letters, which no
    /// pattern matches: its secrets went into the log.
    @Test
    func aBodyIsRedactedInItsCharset() {
        var utf16 = Data()
        for unit in "password=hunter2&user=ann".utf16 { utf16.append(contentsOf: [UInt8(unit & 0xFF), UInt8(unit >> 8)]) }
        let shown = Redactor.standard.redact(body: utf16, contentType: "text/plain; charset=utf-16le", limit: 1000)
        #expect(!shown.contains("hunter2") && !shown.contains("h\0u"), "\(shown)")
        #expect(shown.contains("user=ann") || shown.contains("REDACTED"), "\(shown)")
    }

    /// A text body's line breaks and escape sequences would forge log lines of their own or
    /// reach the terminal that shows the log.
    @Test(arguments: TransportKind.allCases)
    func aBodyLogLineIsOneLineWhateverTheBodyHolds(_ kind: TransportKind) async throws {
        let forged = "ok\n← 1A2B login POST https://evil/ 200\r\u{1B}[31m\u{2028}x\u{202E}"
        let server = try await http1Server { _ in .text(forged) }
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .trace
        try await withClient(
            kind, server: server,
            configure: {
                $0.logger = logger
                $0.logsBodies = true
            }
        ) { client in
            let text = try await client.send(Endpoint<String>(path: "/text", decoding: .string))
            #expect(text == forged)
            let received = try #require(handler.entries.map { "\($0.message)" }.first { $0.hasPrefix("⇣") })
            #expect(!received.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x2028 || $0.value == 0x202E }, "\(received)")
            #expect(received.contains(#"ok\n← 1A2B"#), "\(received)")
            #expect(received.contains(#"\u{1B}[31m"#), "\(received)")
        }
    }

    @Test
    func presignedURLSignaturesAndCredentialsAreHidden() {
        let url =
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc&X-Amz-Security-Token=tok&X-Goog-Signature=def&part=1"
        let redacted = Redactor.standard.redact(urlString: url)
        for secret in ["AKIA", "=abc", "=tok", "=def"] { #expect(!redacted.contains(secret), "\(redacted)") }
        #expect(redacted.contains("part=1"))
        #expect(Redactor.standard.value(of: HTTPField(name: .location, value: "/cb?code=AUTH&state=s")) == "/cb?code=REDACTED&state=s")
        // URLs inside other fields' text: a `Link` an API echoes a token in, a `Referer`, a `Refresh`.
        let link = HTTPField(name: HTTPField.Name("Link")!, value: #"<https://api.example/x?access_token=T0K&page=2>; rel="next""#)
        #expect(Redactor.standard.value(of: link) == #"<https://api.example/x?access_token=REDACTED&page=2>; rel="next""#)
        let referer = HTTPField(name: HTTPField.Name("Referer")!, value: "https://app.example/cb?code=C0DE")
        #expect(!Redactor.standard.value(of: referer).contains("C0DE"))
        let refresh = HTTPField(name: HTTPField.Name("Refresh")!, value: "0; url=/next?token=T0K")
        #expect(!Redactor.standard.value(of: refresh).contains("T0K"))
        #expect(Redactor.standard.value(of: HTTPField(name: HTTPField.Name("X-Upload-Signature")!, value: "sig")) == "REDACTED")
    }

    @Test
    func credentialsInXMLElementsAreHidden() {
        // An STS-style answer in XML: the secret key and the session token are hidden in a body
        // line (and so in a HAR file); the key's id, an error code and an object's key are not.
        let xml = """
            <AssumeRoleResponse><Credentials><AccessKeyId>ASIAEXAMPLE</AccessKeyId>\
            <SecretAccessKey>SECRET5</SecretAccessKey><SessionToken>SECRET6</SessionToken></Credentials>\
            <sts:Password xmlns:sts="x">SECRET7</sts:Password><Code>NoSuchKey</Code><Key>photos/a.jpg</Key></AssumeRoleResponse>
            """
        let shown = Redactor.standard.redact(body: Data(xml.utf8), contentType: "text/xml", limit: 10_000)
        for secret in ["SECRET5", "SECRET6", "SECRET7"] { #expect(!shown.contains(secret), "\(shown)") }
        for kept in ["ASIAEXAMPLE", "NoSuchKey", "photos/a.jpg", "</SessionToken>"] { #expect(shown.contains(kept), "\(shown)") }
        // Only an element with its closing tag: a generic type named in a message, or what
        // follows an empty element, is no secret.
        let message = "could not decode Page<SessionToken>.items[0]: the data is missing"
        #expect(Redactor.standard.redactFreeText(message) == message)
        let empty = "<R><SessionToken/>visible<Other>kept</Other></R>"
        #expect(Redactor.standard.redactFreeText(empty) == empty)
    }

    @Test
    func tokensInAFragmentOrAUserNameAndOAuthSecretsInBodiesAreHidden() {
        // RFC 6749 §4.2.2: the implicit grant returns its token in the fragment; a user name
        // alone can be a token (`https://TOKEN@host/`); RFC 7636 §7.1: the PKCE verifier is a
        // secret, and so are a client assertion (RFC 7521) and a private key.
        let location = HTTPField(name: .location, value: "https://app.example/cb#access_token=SECRET1&state=s&token_type=bearer")
        let shown = Redactor.standard.value(of: location)
        #expect(!shown.contains("SECRET1"), "\(shown)")
        #expect(shown.contains("state=s"))
        // A single-page app's hash route carries its own query: its first name follows the `?`.
        let routed = Redactor.standard.value(of: HTTPField(name: .location, value: "https://app.example/#/callback?code=SECRET4&state=s"))
        #expect(!routed.contains("SECRET4"), "\(routed)")
        #expect(routed.contains("state=s"))
        #expect(!Redactor.standard.redact(urlString: "https://SECRET2@github.com/x").contains("SECRET2"))
        #expect(!Redactor.standard.redact(url: URL(string: "https://user:SECRET3@example.com/#section")!).contains("SECRET3"))
        // A fragment that is no list of parameters stays as it was.
        #expect(Redactor.standard.redact(urlString: "https://example.com/page#section-2") == "https://example.com/page#section-2")
        // A careless server's Location that is no URL at all went out as it was.
        let broken = "http://[bad/cb?code=SECRET6&x=1"
        #expect(URL(string: broken) == nil)
        #expect(!Redactor.standard.redact(urlString: broken).contains("SECRET6"), "\(Redactor.standard.redact(urlString: broken))")
        let brokenWithPassword = "http://user:SECRET7@[bad/x?a=1"
        #expect(URL(string: brokenWithPassword) == nil)
        #expect(!Redactor.standard.redact(urlString: brokenWithPassword).contains("SECRET7"))
        let form = Redactor.standard.redact(
            body: Data("grant_type=authorization_code&code=C&code_verifier=SECRET4&client_assertion=SECRET5".utf8),
            contentType: "application/x-www-form-urlencoded", limit: 1_000)
        for secret in ["SECRET4", "SECRET5", "=C&"] { #expect(!form.contains(secret), "\(form)") }
        #expect(form.contains("grant_type=authorization_code"))
        let json = Redactor.standard.redact(
            body: Data(#"{"private_key":"SECRET6","kid":"k1"}"#.utf8), contentType: "application/json", limit: 1_000)
        #expect(!json.contains("SECRET6"), "\(json)")
        #expect(json.contains("k1"))
    }

    @Test
    func camelCaseKeysPassphrasesAndAnyAuthorizationFieldAreSecrets() {
        // The JSON spelling of `private_key` hides as it does; so does a passphrase.
        let json = Redactor.standard.redact(
            body: Data(
                #"{"privateKey":"S1","signingKey":"S2","passphrase":"S3","openAIApiKey":"S5","accountKey":"S6","hmacKey":"S7","idempotencyKey":"k1","monkey":"m","sortKey":"s","publicKey":"p"}"#
                    .utf8),
            contentType: "application/json", limit: 1_000)
        for secret in ["S1", "S2", "S3", "S5", "S6", "S7"] { #expect(!json.contains(secret), "\(json)") }
        // Keys that are no credential stay shown.
        #expect(json.contains("k1") && json.contains("\"m\"") && json.contains("\"s\"") && json.contains("\"p\""), "\(json)")
        // A field named after Authorization carries what Authorization does.
        for name in ["X-Authorization", "X-Forwarded-Authorization", "x-amzn-Remapped-Authorization", "X-Key-Passphrase"] {
            #expect(Redactor.standard.isSecret(headerName: name), "\(name)")
            let field = HTTPField(name: HTTPField.Name(name)!, value: "Bearer S4")
            #expect(Redactor.standard.value(of: field) == "REDACTED")
        }
        #expect(!Redactor.standard.isSecret(headerName: "WWW-Authenticate"))
    }

    @Test(arguments: TransportKind.allCases)
    func debugAddsRedirectQueueAndJoinLinesAndInfoDoesNot(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .info
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            _ = try await client.send(Endpoint<Echo>(path: "/redirect/1"))
            #expect(handler.entries.map { "\($0.message)".prefix(1) } == ["→", "←"])
        }
        let debugServer = try await http1Server()
        let debugHandler = InMemoryLogHandler()
        logger = Logger(label: "test") { _ in debugHandler }
        logger.logLevel = .debug
        try await withClient(
            kind, server: debugServer,
            configure: {
                $0.logger = logger
                $0.cache = CacheConfiguration(store: MemoryCacheStore(), policy: .http)
            }
        ) { client in
            _ = try await client.send(Endpoint<Echo>(path: "/redirect/1"))
            let lines = debugHandler.entries.map { "\($0.message)" }
            #expect(lines.map { $0.prefix(1) } == ["→", "⤷", "←"])
            #expect(lines[1].contains("302 to http://127.0.0.1:\(debugServer.port)/"))
            #expect(debugHandler.entries[1].level == .debug)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func traceLogsBodiesRedactedAndCappedOnlyWhenAskedTo(_ kind: TransportKind) async throws {
        let routes: TestServer.Handler = { request in
            request.path == "/long"
                ? .json("[" + Array(repeating: #""0123456789""#, count: 1000).joined(separator: ",") + "]") : await Routes.standard(request)
        }
        let server = try await http1Server(routes)
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .trace
        let json = #"{"user":"ann","password":"pa ss word","nested":{"refresh_token":"r-123"}}"#
        let login = Endpoint<Echo>(method: .post, path: "/echo", body: .data(Data(json.utf8), contentType: "application/json"))
        try await withClient(kind, server: server, configure: { $0.logger = logger }) { client in
            _ = try await client.send(login)
            // Off by default, even at trace.
            #expect(!handler.entries.contains { "\($0.message)".hasPrefix("⇡") })
        }
        let bodyServer = try await http1Server(routes)
        try await withClient(
            kind, server: bodyServer,
            configure: {
                $0.logger = logger
                $0.logsBodies = true
            }
        ) { client in
            _ = try await client.send(login)
            _ = try await client.send(Endpoint<[String]>(path: "/long"))
            let lines = handler.entries.map { "\($0.message)" }
            let sent = try #require(lines.first { $0.hasPrefix("⇡") })
            #expect(sent.contains(#""user":"ann""#))
            #expect(sent.contains(#""password":"REDACTED""#))
            #expect(sent.contains(#""refresh_token":"REDACTED""#))
            #expect(!lines.joined().contains("pa ss word"))
            #expect(!lines.joined().contains("r-123"))
            let received = lines.filter { $0.hasPrefix("⇣") }
            #expect(received.count == 2)
            // The big body is cut at the limit and says how long it was.
            let big = try #require(received.last)
            #expect(big.utf8.count < 4096 + 100)
            #expect(big.hasSuffix(" bytes)"))
        }
    }

    @Test
    func redactingABodyHandlesJSONFormsTextAndBinary() {
        let redactor = Redactor.standard
        let json = redactor.redact(
            body: Data(#"{"a":[{"client_secret":"x y"}],"ok":1}"#.utf8), contentType: "application/json", limit: 1000)
        #expect(json == #"{"a":[{"client_secret":"REDACTED"}],"ok":1}"#)
        let form = redactor.redact(
            body: Data("grant_type=password&password=hunter 2&user=ann".utf8), contentType: "application/x-www-form-urlencoded", limit: 1000
        )
        #expect(form == "grant_type=password&password=REDACTED&user=ann")
        let text = redactor.redact(body: Data("Authorization: Bearer abc.def".utf8), contentType: "text/plain", limit: 1000)
        #expect(!text.contains("abc.def"))
        let binary = redactor.redact(body: Data([0xff, 0xfe, 0x00, 0x01]), contentType: "application/octet-stream", limit: 1000)
        #expect(binary == "(4 bytes, binary)")
        let notJSON = redactor.redact(body: Data("{not json".utf8), contentType: "application/json", limit: 3)
        #expect(notJSON == "{no… (9 bytes)")
        #expect(redactor.redact(body: Data(), contentType: nil, limit: 10) == "(empty)")
    }

    /// A multipart form held in memory (an OpenAPI client's, say) had its parts shown as free
    /// text, where `name="password"` then a blank line matches no `name=value` pattern: the
    /// password showed in the logs, the HAR file and the cURL rendering. A secret-named part is
    /// hidden whole (RFC 7578 §4.2: the part's name is its field's); other parts are redacted as
    /// bodies of their own type, a file's bytes shown as a count.
    @Test
    func aMultipartFormsSecretPartsAreHiddenAndItsOtherPartsRedactedByType() {
        var parts: [String] = []
        parts.append("preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nann\r\n")
        parts.append("--XyZ\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\ncorrect horse\r\nbattery\r\n")
        parts.append("--XyZ\r\nContent-Disposition: form-data; name=\"user[api_key]\"\r\n\r\nK3Y\r\n")
        parts.append("--XyZ\r\nContent-Disposition: form-data; name=\"meta\"\r\nContent-Type: application/json\r\n\r\n")
        parts.append(#"{"client_secret":"S3","note":"hi"}"# + "\r\n")
        parts.append("--XyZ\r\nContent-Disposition: form-data; name=\"avatar\"; filename=\"password\"\r\n")
        parts.append("Content-Type: image/png\r\n\r\n\u{89}PNG\r\n--XyZ--\r\n")
        let body = Data(parts.joined().utf8)
        let shown = Redactor.standard.redact(body: body, contentType: "multipart/form-data; boundary=\"XyZ\"", limit: 10_000)
        for secret in ["correct horse", "battery", "K3Y", "S3"] { #expect(!shown.contains(secret), "\(shown)") }
        #expect(shown.contains("name=\"user\"\r\n\r\nann\r\n"), "\(shown)")
        #expect(shown.contains("name=\"password\"\r\n\r\nREDACTED\r\n"), "\(shown)")
        #expect(shown.contains(#""note":"hi""#), "\(shown)")
        // A file named "password" is no password field; its bytes are a count.
        #expect(shown.contains("(5 bytes, binary)"), "\(shown)")
        #expect(shown.hasSuffix("--XyZ--\r\n"), "\(shown)")
        // A boundary the body does not hold: its size only.
        let other = Redactor.standard.redact(body: Data("password=x".utf8), contentType: "multipart/form-data; boundary=nope", limit: 100)
        #expect(other == "(10 bytes, multipart)")
    }

    /// Multipart shapes a careless client or a hostile server sends: LF line breaks alone (a
    /// body written as a Swift string literal), the boundary inside a value (a delimiter counts
    /// only at the start of a line, RFC 2046 §5.1.1), a `name` in another header than
    /// `Content-Disposition`, a multipart nested in a part (shown as a count, never recursed
    /// into), and more parts than are shown.
    @Test
    func aMultipartFormsSecretsAreHiddenWhateverItsShapeAndItsCostIsBounded() {
        let redactor = Redactor.standard
        let lf =
            "--B\nContent-Disposition: form-data; name=\"password\"\n\nhunter2\n--B\nContent-Disposition: form-data; name=\"u\"\n\nann\n--B--\n"
        let shownLF = redactor.redact(body: Data(lf.utf8), contentType: "multipart/form-data; boundary=B", limit: 10_000)
        #expect(!shownLF.contains("hunter2") && shownLF.contains("ann"), "\(shownLF)")
        let inside = "--B\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nxx--Byy-secret\r\n--B--\r\n"
        let shownInside = redactor.redact(body: Data(inside.utf8), contentType: "multipart/form-data; boundary=B", limit: 10_000)
        #expect(!shownInside.contains("secret") && !shownInside.contains("xx"), "\(shownInside)")
        let otherName =
            "--B\r\nContent-Type: text/plain; name=\"a.txt\"\r\nContent-Disposition: form-data; name=\"client_secret\"\r\n\r\nS3CRET\r\n--B--\r\n"
        let shownOther = redactor.redact(body: Data(otherName.utf8), contentType: "multipart/form-data; boundary=B", limit: 10_000)
        #expect(!shownOther.contains("S3CRET"), "\(shownOther)")
        var nested = "--A\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n"
        nested += "--B\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nhunter2\r\n--B--\r\n\r\n--A--\r\n"
        let shownNested = redactor.redact(body: Data(nested.utf8), contentType: "multipart/mixed; boundary=A", limit: 10_000)
        #expect(!shownNested.contains("hunter2") && shownNested.contains("bytes, multipart)"), "\(shownNested)")
        let many = (0..<200).map { "--B\r\nContent-Disposition: form-data; name=\"f\($0)\"\r\n\r\nv\($0)\r\n" }.joined() + "--B--\r\n"
        let shownMany = redactor.redact(body: Data(many.utf8), contentType: "multipart/form-data; boundary=B", limit: 100_000)
        #expect(
            shownMany.contains("v63") && !shownMany.contains("v64") && shownMany.contains("parts not shown"), "\(shownMany.suffix(200))")
        // Exactly as many parts as are shown: the closing delimiter is shown, nothing is counted.
        let full = (0..<64).map { "--B\r\nContent-Disposition: form-data; name=\"f\($0)\"\r\n\r\nv\($0)\r\n" }.joined() + "--B--\r\n"
        let shownFull = redactor.redact(body: Data(full.utf8), contentType: "multipart/form-data; boundary=B", limit: 100_000)
        #expect(shownFull.hasSuffix("v63\r\n--B--\r\n") && !shownFull.contains("not shown"), "\(shownFull.suffix(200))")
    }

    /// Secrets the redactor missed: a URL's user info inside text (a connection string in a body
    /// or an error), `passphrase` and `credential` in text, a JSON body sent labelled as a form
    /// (a command line's `-d`), `session_id`, `jwt` and `pwd`, and nested form names
    /// (`user[api_key]`); and a redactor made with `init` showed cookies.
    @Test
    func userInfoInTextJSONSentAsAFormNestedNamesAndCookiesAreHidden() {
        let redactor = Redactor.standard
        let text = redactor.redactFreeText(
            #"cannot reach postgres://app:hunter2@db:5432/prod or mysql://u:p@ss@db2/x; {"passphrase":"S3","credential":"C4"}"#)
        for secret in ["hunter2", "app:", "S3", "C4", "ss@db2", "u:p"] { #expect(!text.contains(secret), "\(text)") }
        #expect(text.contains("mysql://REDACTED@db2/x"), "\(text)")
        #expect(text.contains("postgres://REDACTED@db:5432/prod"), "\(text)")
        #expect(
            redactor.redactFreeText("see https://example.com/a?mail=ann@example.com") == "see https://example.com/a?mail=ann@example.com")
        let form = redactor.redact(
            body: Data(#"{"user":"a","password":"hunter2"}"#.utf8), contentType: "application/x-www-form-urlencoded", limit: 1000)
        #expect(!form.contains("hunter2"), "\(form)")
        // A real form is still judged field by field: names that merely end in a secret's
        // (`country_code`, `hotkey`) are shown.
        let fields = "country_code=US&zipcode=94110&hotkey=F1&code=C0DE"
        let realForm = redactor.redact(body: Data(fields.utf8), contentType: "application/x-www-form-urlencoded", limit: 1000)
        #expect(realForm == "country_code=US&zipcode=94110&hotkey=F1&code=REDACTED")
        // Text no form encoder writes, sent labelled as a form: its secrets are hidden as text.
        for typed in ["user=ann password=hunter2", "Authorization: Basic aHVudGVyMg==", "api_key: aHVudGVyMg=="] {
            let shown = redactor.redact(body: Data(typed.utf8), contentType: "application/x-www-form-urlencoded", limit: 1000)
            #expect(!shown.contains("hunter2") && !shown.contains("aHVudGVyMg"), "\(shown)")
        }
        for name in ["session_id", "jwt", "pwd", "user[api_key]", "oauth[code]", "user%5Bpassword%5D"] {
            let url = redactor.redact(urlString: "https://h/p?\(name)=V4LUE&page=2")
            #expect(!url.contains("V4LUE") && url.contains("page=2"), "\(url)")
        }
        #expect(!redactor.isSecret(queryName: "user[name]"))
        let own = Redactor(headerNames: ["x-session"], queryNames: ["token"])
        #expect(own.isSecret(headerName: "Cookie") && own.isSecret(headerName: "set-cookie"))
    }

    @Test
    func debugOptionsComeFromTheEnvironmentAndLaunchArgumentsWin() {
        let none = DebugOptions(environment: [:], arguments: ["app"])
        #expect(none == .off)
        let fromEnvironment = DebugOptions(
            environment: ["COURIER_LOG_LEVEL": "DEBUG", "COURIER_LOG_BODIES": "1", "COURIER_HAR": "/tmp/a.har"], arguments: [])
        #expect(fromEnvironment == DebugOptions(logLevel: .debug, logsBodies: true, harPath: "/tmp/a.har"))
        let both = DebugOptions(
            environment: ["COURIER_LOG_LEVEL": "debug"],
            arguments: ["app", "-CourierLogLevel", "trace", "-CourierLogBodies", "YES", "-CourierHAR", "/tmp/b.har"]
        )
        #expect(both == DebugOptions(logLevel: .trace, logsBodies: true, harPath: "/tmp/b.har"))
        // Nonsense is ignored, never a crash.
        let nonsense = DebugOptions(
            environment: ["COURIER_LOG_LEVEL": "loud", "COURIER_LOG_BODIES": "maybe"], arguments: ["-CourierLogLevel"])
        #expect(nonsense == .off)
    }

    @Test(arguments: TransportKind.allCases)
    func aDebugLevelFromTheEnvironmentRaisesTheClientsLoggerWithoutARebuild(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .error
        let options = DebugOptions(environment: ["COURIER_LOG_LEVEL": "debug"], arguments: [])
        try await withClient(
            kind, server: server,
            configure: {
                $0.logger = logger
                $0.debugOptions = options
            }
        ) { client in
            _ = try await client.send(Endpoint<Echo>(path: "/redirect/1"))
            #expect(handler.entries.map { "\($0.message)".prefix(1) } == ["→", "⤷", "←"])
        }
    }

    @Test
    func anEnvelopesNumericCodeIsShownAndAOneTimeCodeIsNot() {
        // An envelope's status code (`{"code": 0, "msg": …}`) is no secret: hidden, a recorded
        // envelope replayed as a business error. A code alone beside a phone number is a
        // one-time code; a code as text, OAuth's.
        let redactor = Redactor.standard
        let envelope = redactor.redact(
            body: Data(#"{"code":1003,"msg":"quota used up","data":null}"#.utf8), contentType: "application/json", limit: 1000)
        #expect(envelope.contains("1003"), "\(envelope)")
        let otp = redactor.redact(body: Data(#"{"phone":"+100","code":123456}"#.utf8), contentType: "application/json", limit: 1000)
        #expect(!otp.contains("123456"), "\(otp)")
        let oauth = redactor.redact(body: Data(#"{"code":"auth-code-1","message":"x"}"#.utf8), contentType: "application/json", limit: 1000)
        #expect(!oauth.contains("auth-code-1"), "\(oauth)")
    }
}
