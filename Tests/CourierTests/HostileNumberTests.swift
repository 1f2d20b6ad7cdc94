import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import CourierTesting
import Crypto
import Foundation
import HTTPTypes
import Testing

/// No number from the wire, a file or the command line may crash the process: every parser gets
/// huge, negative, NaN/infinite, empty and non-digit values.
@Suite("Hostile numbers never trap")
struct HostileNumberTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let cap = TimeInterval(UntrustedNumber.deltaSecondsLimit)

    static func entry(_ headers: [(String, String)], requestDate: Date = now, responseDate: Date = now) -> CacheEntry {
        CacheEntry(
            url: "https://a/x", method: "GET", partition: "", status: 200, headers: fields(headers), body: Data("x".utf8),
            requestDate: requestDate, responseDate: responseDate
        )
    }

    /// RFC 9111 §1.2.2: delta-seconds is 1*DIGIT, and a value larger than the largest integer
    /// kept is that value (2^31); anything else (a sign, a fraction, "nan", nothing) is invalid.
    @Test
    func deltaSecondsSaturateAt2To31AndRejectEverythingButDigits() {
        #expect(UntrustedNumber.deltaSeconds("99999999999999999999") == 2_147_483_648)
        #expect(UntrustedNumber.deltaSeconds("2147483649") == 2_147_483_648)
        #expect(UntrustedNumber.deltaSeconds(String(repeating: "9", count: 10_000)) == 2_147_483_648)
        #expect(UntrustedNumber.deltaSeconds("60") == 60)
        #expect(UntrustedNumber.deltaSeconds("0") == 0)
        for invalid in ["", "-5", "+5", "1e5", "1.5", "nan", "inf", " 60", "6 0", "0x10", "٣"] {
            #expect(UntrustedNumber.deltaSeconds(invalid) == nil, "\(invalid)")
        }
        #expect(UntrustedNumber.digits("99999999999999999999") == Int.max)
        #expect(UntrustedNumber.digits("99999999999999999999x") == nil)
    }

    /// RFC 9111 §5.2.2.1 (max-age) with §1.2.2: a huge max-age is 2^31 seconds; a negative,
    /// empty or non-numeric one makes the response stale (lifetime 0).
    @Test
    func maxAgeIsCappedAndInvalidValuesAreStale() {
        func lifetime(_ value: String) -> TimeInterval {
            CacheRules.freshnessLifetime(of: Self.entry([("Cache-Control", value)]))
        }
        #expect(lifetime("max-age=99999999999999999999") == Self.cap)
        #expect(lifetime("max-age=\"99999999999999999999\"") == Self.cap)
        #expect(lifetime("max-age=60") == 60)
        // A redirect's limit (a cache file is input too): the smaller wins; not a number, or
        // below zero, allows nothing.
        var limited = Self.entry([("Cache-Control", "max-age=60")])
        for (limit, expected) in [(30.0, 30.0), (90, 60), (-5, 0), (.nan, 0), (.infinity, 60), (-.infinity, 0)] {
            limited.freshnessLimit = limit
            #expect(CacheRules.freshnessLifetime(of: limited) == expected, "\(limit)")
        }
        for invalid in ["max-age=-5", "max-age=", "max-age", "max-age=nan", "max-age=inf", "max-age=1e9", "max-age=+5", "max-age=abc"] {
            #expect(lifetime(invalid) == 0, "\(invalid)")
        }
    }

    /// RFC 9111 §4.2.1 and §4.2.3: a lifetime from `Expires` − `Date` is capped like max-age
    /// (2^31 seconds), so a `Date` in year 1 (what some servers send for an unset date) with
    /// an `Expires` minutes from now is never served as fresh for centuries: the capped age
    /// (§4.2.3) is larger than the capped lifetime, and the entry is revalidated.
    @Test
    func aLifetimeFromExpiresAndAnAncientDateIsCappedAndStale() {
        let now = Self.now
        let expires = CacheRulesTests.httpDate(300)
        let entry = Self.entry(
            [("Date", "Mon, 01 Jan 0001 00:00:00 GMT"), ("Expires", expires), ("ETag", "\"e\"")], requestDate: now, responseDate: now)
        #expect(CacheRules.freshnessLifetime(of: entry) == Self.cap)
        let action = CacheRules.action(policy: .http, method: .get, requestHeaders: HTTPFields(), entry: entry, now: now)
        #expect(action == .revalidate(fields([("If-None-Match", "\"e\"")])))
        // An ordinary Expires is untouched.
        let ordinary = Self.entry([("Date", CacheRulesTests.httpDate(0)), ("Expires", expires)], requestDate: now, responseDate: now)
        #expect(abs(CacheRules.freshnessLifetime(of: ordinary) - 300) <= 1)
    }

    /// RFC 9111 §5.2.1.1-3 (request max-age, max-stale, min-fresh) with §1.2.2.
    @Test
    func requestDirectivesSaturateAndInvalidOnesNeverServeStale() {
        let stale = Self.entry(
            [("Cache-Control", "max-age=10"), ("ETag", "\"e\"")], requestDate: Self.now.addingTimeInterval(-100),
            responseDate: Self.now.addingTimeInterval(-100))
        func action(_ request: String, _ entry: CacheEntry = stale) -> CacheAction {
            CacheRules.action(
                policy: .http, method: .get, requestHeaders: fields([("Cache-Control", request)]), entry: entry, now: Self.now)
        }
        #expect(action("max-stale=99999999999999999999") == .serve(age: 100))
        #expect(action("max-stale") == .serve(age: 100))
        for invalid in ["max-stale=-5", "max-stale=nan", "max-stale=inf", "max-stale=", "max-stale=1e99"] {
            #expect(action(invalid) == .revalidate(fields([("If-None-Match", "\"e\"")])), "\(invalid)")
        }
        let fresh = Self.entry([("Cache-Control", "max-age=1000")])
        #expect(action("max-age=99999999999999999999", fresh) == .serve(age: 0))
        #expect(action("min-fresh=99999999999999999999", fresh) == .fetch)
        #expect(action("min-fresh=-1", fresh) == .serve(age: 0))
    }

    /// RFC 9111 §5.1: Age is delta-seconds; a huge Age is 2^31, an invalid one is ignored, and
    /// the computed age (§4.2.3) is finite and bounded whatever the stored dates are.
    @Test
    func ageHeaderAndStoredDatesGiveABoundedAge() {
        #expect(CacheRules.age(of: Self.entry([("Age", "99999999999999999999")]), now: Self.now) == Self.cap)
        #expect(CacheRules.age(of: Self.entry([("Age", " 17 ")]), now: Self.now) == 17)
        for invalid in ["-5", "nan", "inf", "-inf", "1e400", "", "abc", "+5", "1.5"] {
            #expect(CacheRules.age(of: Self.entry([("Age", invalid)]), now: Self.now) == 0, "\(invalid)")
        }
        let ancient = Self.entry([], requestDate: Date(timeIntervalSince1970: -1e300), responseDate: Date(timeIntervalSince1970: -1e300))
        #expect(CacheRules.age(of: ancient, now: Self.now) == CacheRules.ageLimit)
        let future = Self.entry(
            [("Date", "Sun, 06 Nov 1994 08:49:37 GMT")], requestDate: Date(timeIntervalSince1970: 1e300),
            responseDate: Date(timeIntervalSince1970: 1e300))
        #expect(CacheRules.age(of: future, now: Self.now) == CacheRules.ageLimit)
        let infinite = Self.entry([], requestDate: .distantPast, responseDate: Date(timeIntervalSince1970: -.infinity))
        #expect(CacheRules.age(of: infinite, now: Self.now) == CacheRules.ageLimit)
        #expect(
            CacheRules.action(policy: .cacheFor(.seconds(60)), method: .get, requestHeaders: [:], entry: future, now: Self.now)
                == .serve(age: 0))
        #expect(
            CacheRules.action(policy: .cacheElseNetwork, method: .get, requestHeaders: [:], entry: ancient, now: Self.now)
                == .serve(age: CacheRules.ageLimit))
    }

    /// A cached response whose `Age` is huge or infinite reaches the caller with a bounded age
    /// (it used to trap converting the age to milliseconds).
    @Test
    func aHostileAgeOnACachedResponseReachesTheCaller() async throws {
        for age in ["99999999999999999999", "inf", "nan", "-1"] {
            let stub = StubTransport { _ in
                RawResponse(
                    head: HTTPResponse(status: .ok, headerFields: [.contentType: "text/plain", .cacheControl: "max-age=60", .age: age]),
                    body: .data(Data("x".utf8)))
            }
            let client = Client(
                configuration: .init(transport: stub, baseURL: URL(string: "https://api.test")!) {
                    $0.cache.store = MemoryCacheStore()
                    $0.cache.policy = .cacheElseNetwork
                })
            _ = try await client.response(Endpoint<Data>(path: "/x", decoding: .data))
            let cached = try await client.response(Endpoint<Data>(path: "/x", decoding: .data))
            #expect(cached.source == .cache)
            let seconds = try #require(cached.age).components.seconds
            #expect(seconds >= 0 && seconds <= Int64(CacheRules.ageLimit), "Age: \(age)")
        }
    }

    /// An envelope code of any JSON number becomes text without an `Int` conversion that traps.
    @Test
    func envelopeCodesOfAnySizeBecomeText() async throws {
        for (json, code) in [
            ("1e20", "100000000000000000000"), ("-1e20", "-100000000000000000000"), ("1e308", nil), ("1.5", "1.5"), ("-0.0", nil),
            ("9223372036854775807", "9223372036854775807"),
        ] as [(String, String?)] {
            let stub = StubTransport { _ in .json(#"{"code": \#(json), "msg": "no", "data": null}"#) }
            let client = Client(
                configuration: .init(transport: stub, baseURL: URL(string: "https://api.test")!) {
                    $0.defaultWireProtocol = EnvelopeProtocol()
                })
            do {
                _ = try await client.send(Endpoint<Data>(path: "/x", decoding: .data))
                #expect(json == "-0.0", "code \(json) should not be success")
            } catch let error as CourierError {
                #expect(error.kind == .business, "\(json)")
                if let code { #expect(error.code == code) }
                if json == "1e308" { #expect(error.code?.count == 309) }
            }
        }
    }

    /// HTML Standard, server-sent events, "retry": only ASCII digits set the reconnection time;
    /// a sign, a space, a fraction or nothing is ignored, and a huge value is `Int.max`.
    @Test
    func serverSentEventRetryTakesDigitsOnlyAndSaturates() async throws {
        let text =
            [
                "retry: -5", "data: a", "",
                "retry: 99999999999999999999", "data: b", "",
                "retry:", "data: c", "",
                "retry: 1e3", "data: d", "",
                "retry: +7", "retry: nan", "retry:  7", "retry: 7.5", "data: e", "",
                "retry: 1500", "data: f", "",
            ].joined(separator: "\n") + "\n"
        let stub = StubTransport { _ in
            RawResponse(head: HTTPResponse(status: .ok, headerFields: [.contentType: "text/event-stream"]), body: .data(Data(text.utf8)))
        }
        let client = Client(configuration: .init(transport: stub, baseURL: URL(string: "https://api.test")!))
        var retries: [Int?] = []
        for try await event in try await client.stream(Endpoint<Data>(path: "/events", decoding: .data)).events() {
            retries.append(event.retry)
        }
        #expect(retries == [nil, Int.max, Int.max, Int.max, Int.max, 1500])
    }

    /// RFC 9110 §8.6: Content-Length is 1*DIGIT; a negative announced length is no length at all
    /// (it used to reach `reserveCapacity`), a huge one saturates and fails the size limit.
    @Test
    func contentLengthNeverGoesNegativeAndHugeOnesFailTheLimit() async throws {
        #expect(UntrustedNumber.digits("99999999999999999999") == Int.max)
        for invalid in ["-5", "", "+5", "5.0", "0x10", "nan"] { #expect(UntrustedNumber.digits(invalid) == nil, "\(invalid)") }
        let negative = ResponseBody.stream(ByteStream(chunks: [Data("ab".utf8), Data("cd".utf8)]), expectedLength: -5)
        #expect(negative.expectedLength == nil)
        #expect(try await negative.collect(upTo: 10) == Data("abcd".utf8))
        let huge = ResponseBody.stream(ByteStream(chunks: [Data("ab".utf8)]), expectedLength: Int.max)
        let error = await expectCourierError { _ = try await huge.collect(upTo: 10) }
        #expect(error?.kind == .responseTooLarge)
    }

    /// A limit as large as the announced length (`maxResponseSize = .max`, the command line's
    /// `--max-size 9223372036854775807`): the buffer was sized from the server's word, 2^63 − 1
    /// bytes (or a terabyte) at once, and the process trapped. The bytes that come are collected.
    @Test(arguments: [Int.max, Int.max - 1, 1 << 40])
    func aHugeAnnouncedLengthUnderAHugeLimitIsNoAllocation(_ announced: Int) async throws {
        let body = ResponseBody.stream(ByteStream(chunks: [Data("ab".utf8), Data("cd".utf8)]), expectedLength: announced)
        #expect(try await body.collect(upTo: .max) == Data("abcd".utf8))
    }

    /// The transport's `Content-Length` parser (RFC 9110 §8.6 `1*DIGIT`, with the optional
    /// whitespace of §5.5 around it): digits only, saturating; a sign, a list, a fraction, other
    /// whitespace or nothing at all is no length.
    @Test
    func contentLengthValuesAreDigitsBetweenSpacesAndTabsAndSaturate() {
        #expect(UntrustedNumber.contentLength("1024") == 1024)
        #expect(UntrustedNumber.contentLength("0") == 0)
        #expect(UntrustedNumber.contentLength(" \t42\t ") == 42)
        #expect(UntrustedNumber.contentLength("99999999999999999999") == Int.max)
        #expect(UntrustedNumber.contentLength(String(repeating: "9", count: 100_000)) == Int.max)
        #expect(UntrustedNumber.contentLength("9223372036854775807") == Int.max)
        #expect(UntrustedNumber.contentLength("9223372036854775806") == Int.max - 1)
        for invalid in [
            "", " ", "\t", "-5", "+5", "5.0", "0x10", "nan", "42, 42", "4 2", "\u{A0}42", "42\u{A0}", "٤٢", "42\r\n",
            "99999999999999999999x",
        ] {
            #expect(UntrustedNumber.contentLength(invalid) == nil, "\(invalid.debugDescription)")
        }
    }

    /// The hot path's header lookup gives what `HTTPFields`' own subscript gives: nothing, the one
    /// value, or every value joined (with "; " for cookies, RFC 6265 §5.4), in field order.
    @Test
    func combinedHeaderValuesMatchTheSubscript() {
        let cases: [[(String, String)]] = [
            [], [("Content-Type", "application/json")], [("X-A", "1"), ("content-type", "text/plain")],
            [("Content-Type", "a/b"), ("X-A", "1"), ("Content-Type", "c/d")], [("Cookie", "a=1"), ("Cookie", "b=2")],
            [("Content-Type", "")],
        ]
        for headers in cases {
            let headerFields = fields(headers)
            for name in [HTTPField.Name.contentType, .cookie, .contentEncoding] {
                #expect(headerFields.combinedValue(name) == headerFields[name], "\(headers) \(name)")
            }
        }
        #expect(fields([("Content-Type", "a/b"), ("Content-Type", "c/d")]).combinedValue(.contentType) == "a/b, c/d")
        #expect(fields([("Cookie", "a=1"), ("Cookie", "b=2")]).combinedValue(.cookie) == "a=1; b=2")
    }

    /// A timeout far past what a `TimeAmount` or a millisecond count can hold saturates instead
    /// of overflowing, on both transports.
    @Test(arguments: TransportKind.allCases)
    func hugeTimeoutsSaturateOnEveryTransport(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            for timeout in [Duration.seconds(10_000_000_000), .seconds(Int64.max), .milliseconds(Int64.max)] {
                let article = try await client.send(Endpoint<Article>(path: "/json", timeout: timeout))
                #expect(article.id == 1)
            }
        }
        #expect(Duration.seconds(Int64.max).saturatingNanoseconds == .max)
        #expect(Duration.seconds(Int64.min).saturatingNanoseconds == .min)
        #expect(Duration.seconds(9_223_372_036).saturatingNanoseconds == 9_223_372_036_000_000_000)
    }

    /// The connection settings of `AsyncHTTPClientTransport` taken at any value: a connection
    /// limit of zero or less is one (no request waits for ever for a connection that is never
    /// made; a negative one stopped the process), and no idle timeout however short or long, nor
    /// a connect timeout however long, stops the process.
    @Test(arguments: [0, -1, Int.max], [Duration.zero, .seconds(-5), .seconds(Int64.max)])
    func hostileConnectionSettingsStillSend(_ connections: Int, _ timeout: Duration) async throws {
        let server = try await http1Server()
        try await withClient(
            .asyncHTTPClient, server: server,
            transportConfiguration: {
                $0.maxConnectionsPerHost = connections
                $0.idleTimeout = timeout
                if timeout > .zero { $0.connectTimeout = timeout }
            }
        ) { client in
            let article = try await client.send(Endpoint<Article>(path: "/json", timeout: .seconds(20)))
            #expect(article.id == 1)
        }
    }

    /// A signature timestamp is whole seconds: huge values are stale, anything but digits is refused.
    @Test
    func signatureTimestampsAreDigitsOnly() {
        let key = SymmetricKey(data: Data("k".utf8))
        let verifier = SignatureVerifier(key: key)
        func verify(_ timestamp: String) throws {
            let text = SignatureCanonicalForm.text(method: "GET", target: "/", body: Data(), timestamp: timestamp, nonce: "n-\(timestamp)")
            let signature = Data(HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: key)).base64EncodedString()
            try verifier.verify(
                method: "GET", target: "/", body: Data(), signature: signature, timestamp: timestamp, nonce: "n-\(timestamp)", now: Self.now
            )
        }
        #expect(throws: SignatureVerifier.Rejection.staleTimestamp) { try verify("99999999999999999999") }
        for invalid in ["nan", "inf", "-1800000000", "1.8e9", "", " 1800000000"] {
            #expect(throws: SignatureVerifier.Rejection.missingHeaders, "\(invalid)") { try verify(invalid) }
        }
        #expect(throws: Never.self) { try verify("1800000000") }
    }

    /// A disk-cache file is input too: a record whose status no response can have is a miss, not
    /// a trap in `HTTPResponse.Status`.
    @Test
    func aCacheFileWithAnImpossibleStatusIsAMiss() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-hostile-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        DiskCacheStore(directory: directory).setEntry(Self.entry([("Cache-Control", "max-age=60")]), forKey: "k")
        #expect(DiskCacheStore(directory: directory).entry(forKey: "k")?.status == 200)
        let file = try #require(try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil).first)
        let bytes = try Data(contentsOf: file)
        let tampered = try #require(
            String(data: bytes, encoding: .isoLatin1)?.replacingOccurrences(of: #""status":200"#, with: #""status":-20"#))
        #expect(tampered.utf8.count > 0)
        try #require(tampered.data(using: .isoLatin1)).write(to: file)
        #expect(DiskCacheStore(directory: directory).entry(forKey: "k") == nil)
    }

    /// A store of the app's own is input too: an entry it hands back with a status no response
    /// can have (a damaged record) is a miss, never a trap in `HTTPResponse.Status` — the request
    /// goes to the network.
    @Test(arguments: [-1, 0, 99, 1000, Int.max])
    func aStoreOfTheAppsOwnWithAnImpossibleStatusIsAMiss(_ status: Int) async throws {
        final class Damaged: CacheStore {
            let inner = MemoryCacheStore()
            let status: Int
            init(status: Int) { self.status = status }
            func entry(forKey key: String) -> CacheEntry? {
                guard var entry = self.inner.entry(forKey: key) else { return nil }
                entry.status = self.status
                return entry
            }
            func setEntry(_ entry: CacheEntry, forKey key: String) { self.inner.setEntry(entry, forKey: key) }
            func removeEntry(forKey key: String) { self.inner.removeEntry(forKey: key) }
            func removeEntries(in scope: CacheScope) { self.inner.removeEntries(in: scope) }
        }
        let store = Damaged(status: status)
        let calls = Locked(0)
        let stub = StubTransport { _ in
            calls.withLock { $0 += 1 }
            var response = RawResponse.json(#"{"id":1,"title":"x"}"#)
            response.head.headerFields[.cacheControl] = "max-age=600"
            return response
        }
        let client = Client(
            configuration: .init(transport: stub, baseURL: URL(string: "https://api.test")!) { $0.cache = CacheConfiguration(store: store) }
        )
        for _ in 0..<2 {
            var endpoint = Endpoint<Article>(path: "/json")
            endpoint.cachePolicy = .cacheElseNetwork
            let article = try await client.send(endpoint)
            #expect(article.id == 1)
        }
        #expect(calls.current == 2)
        #expect(store.inner.count == 1)
    }

    /// Numbers of the public API taken at any value: a retry decision for an attempt numbered
    /// below 1, a HAR recorder's negative body limit (which stopped the process at the first
    /// binary body).
    @Test
    func retryAndRecorderNumbersNeverTrap() async throws {
        let policy = RetryPolicy.standard
        for number in [Int.min, -1, 0] {
            let decision = policy.decide(.init(number: number, method: .get, result: .status(503, retryAfter: nil)))
            if case .retry = decision {} else { Issue.record("attempt \(number): \(decision)") }
        }
        let recorder = HARRecorder(bodyLimit: -1)
        let stub = StubTransport { _ in
            RawResponse(
                head: HTTPResponse(status: .ok, headerFields: [.contentType: "image/png"]), body: .data(Data([0x89, 0x50, 0x4E, 0x47])))
        }
        let client = Client(
            configuration: .init(transport: stub, baseURL: URL(string: "https://api.test")!) { $0.eventMonitors = [recorder] })
        let bytes = try await client.send(Endpoint<Data>(path: "/logo.png", decoding: .data))
        #expect(bytes.count == 4)
        #expect(await eventually { recorder.count == 1 })
    }

    /// RFC 9110 §8.6: a length is digits. A streamed body announced with a negative length is
    /// refused before anything is sent, saying so, on both transports (the error said the body
    /// "brought more than the -1 bytes it announced", once the head was on its way).
    @Test(arguments: TransportKind.allCases, [-1, Int.min])
    func aBodyAnnouncedWithANegativeLengthIsRefusedBeforeSending(_ kind: TransportKind, _ length: Int) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let body = RequestBody.stream(length: length, contentType: "text/plain") { ByteStream(chunks: [Data("hi".utf8)]) }
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Echo>(method: .post, path: "/echo", body: .body(body)).retry(.never))
            }
            #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
            #expect(error?.message.contains("announced length is negative") == true)
            #expect(server.requests.isEmpty)
        }
    }

    /// The command line: numbers that cannot be used are validation errors (exit 64), never a crash.
    @Test
    func commandLineNumbersAreValidatedOrSaturated() async throws {
        let server = try await http1Server()
        let url = server.baseURL.absoluteString + "/json"
        // A huge timeout is the longest one (2^31 seconds), and the request goes through.
        let huge = try await runCourier(["request", url, "--timeout", "1e10"])
        #expect(huge.status == 0)
        #expect(huge.stdout == #"{"id":1,"title":"Hello"}"#)
        for arguments in [
            ["--timeout", "nan"], ["--timeout", "inf"], ["--timeout=-1"], ["--timeout", "0"], ["--timeout", "1e400"],
            ["--max-size=-1"], ["--repeat", "0"], ["--repeat", "99999999999999999999"], ["--repeat", "1000000000"],
            ["--concurrency", "1000000000"], ["--concurrency=-3"], ["--cache-policy", "99999999999999999999"],
        ] {
            let result = try await runCourier(["request", url] + arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("Error:"), "\(arguments)")
        }
        for port in ["70000", "-1", "99999999999999999999"] {
            let serve = try await runCourier(["serve", "--plain", "--port=\(port)"])
            #expect(serve.status == 64, "--port \(port): \(serve.stderr)")
        }
        // `outbox enqueue --count 0` stored one item and printed nothing; a count, queues or an
        // interval that cannot be used stores nothing (the file is not even made).
        let outbox = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cli-count-\(UUID().uuidString).sqlite")
        for arguments in [["--count", "0"], ["--count=-5"], ["--queues", "0"], ["--interval-ms=-1"]] {
            let enqueue = try await runCourier(["outbox", "enqueue", "--db", outbox.path, "POST", url] + arguments)
            #expect(enqueue.status == 64, "\(arguments): \(enqueue.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: outbox.path))
        #expect(server.requests.count == 1)
        try await server.stop()
    }
}
