import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// An origin with one 1000-byte representation that honours single byte ranges and `If-Range`.
final class RangeOrigin: Sendable {
    static let length = 1000
    let etag = Locked("\"m1\"")
    let version = Locked(1)

    /// The representation's bytes for the current version.
    func content() -> Data {
        let version = self.version.withLock { $0 }
        return Data((0..<Self.length).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ version) })
    }

    func handle(_ request: RecordedRequest) async -> ScriptedResponse {
        let etag = self.etag.withLock { $0 }
        let body = self.content()
        var headers = [("ETag", etag), ("Cache-Control", "max-age=600"), ("X-Version", "\(self.version.withLock { $0 })")]
        let ifRange = request.header("If-Range")
        guard let range = request.header("Range"), ifRange == nil || ifRange == etag,
            let spec = range.split(separator: "=").last, !range.contains(",")
        else { return ScriptedResponse(status: 200, headers: headers, body: body) }
        let bounds = spec.split(separator: "-", omittingEmptySubsequences: false)
        let first: Int
        let last: Int
        if bounds[0].isEmpty {
            first = Self.length - Int(bounds[1])!
            last = Self.length - 1
        } else {
            first = Int(bounds[0])!
            last = bounds[1].isEmpty ? Self.length - 1 : min(Int(bounds[1])!, Self.length - 1)
        }
        guard first <= last else { return ScriptedResponse(status: 416, headers: [("Content-Range", "bytes */\(Self.length)")]) }
        headers.append(("Content-Range", "bytes \(first)-\(last)/\(Self.length)"))
        return ScriptedResponse(status: 206, headers: headers, body: body[first...last])
    }
}

/// RFC 9111 §3.3–3.4 and §4.3.4: partial responses are stored, combined and answered from.
@Suite("HTTP cache: partial content (RFC 9111 §3.3, §3.4)")
struct PartialContentTests {
    func withRangeCache(_ kind: TransportKind, _ body: (Client, TestServer, RangeOrigin) async throws -> Void) async throws {
        let origin = RangeOrigin()
        let server = try await http1Server(origin.handle)
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            try await body(client, server, origin)
        }
    }

    static func range(_ value: String?) -> Endpoint<Data> {
        var headers = HTTPFields()
        if let value { headers[.range] = value }
        return Endpoint<Data>(path: "/media", headers: headers, decoding: .data)
    }

    @Test(arguments: TransportKind.allCases)
    func aStoredPartResponseAnswersARangeInsideIt(_ kind: TransportKind) async throws {
        // RFC 9111 §3.3: a cache MAY store a 206; a later range it covers is served from it.
        try await withRangeCache(kind) { client, server, origin in
            let first = try await client.response(Self.range("bytes=0-99"))
            #expect(first.status.code == 206)
            #expect(first.value == origin.content()[0...99])
            let inside = try await client.response(Self.range("bytes=10-19"))
            #expect(inside.source == .cache)
            #expect(inside.status.code == 206)
            #expect(inside.headers[.contentRange] == "bytes 10-19/1000")
            #expect(inside.value == origin.content()[10...19])
            #expect(inside.headers[.age] != nil)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aLongerRangeAsksTheOriginOnlyForTheRest(_ kind: TransportKind) async throws {
        // RFC 9111 §3.4: parts with the same strong validator are combined; only the missing
        // bytes are requested, with If-Range so a changed representation comes back whole.
        try await withRangeCache(kind) { client, server, origin in
            _ = try await client.send(Self.range("bytes=0-99"))
            let longer = try await client.response(Self.range("bytes=50-199"))
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("Range") == "bytes=100-199")
            #expect(server.requests.last?.header("If-Range") == "\"m1\"")
            #expect(longer.status.code == 206)
            #expect(longer.headers[.contentRange] == "bytes 50-199/1000")
            #expect(longer.value == origin.content()[50...199])
            // Both parts are now one: any range inside 0-199 is answered without the network.
            let combined = try await client.response(Self.range("bytes=0-199"))
            #expect(combined.source == .cache)
            #expect(combined.value == origin.content()[0...199])
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func combinedPartsKeepTheStoredFieldsThePartAnsweringIfRangeLeftOut(_ kind: TransportKind) async throws {
        // RFC 9110 §15.3.7: a 206 that answers If-Range need not repeat representation fields;
        // RFC 9111 §3.4 (by §3.2): the combined response keeps the stored fields it lacks.
        let origin = RangeOrigin()
        let server = try await http1Server { request in
            var response = await origin.handle(request)
            if request.header("If-Range") == nil {
                response.headers += [("Content-Type", "text/plain; charset=utf-8"), ("Content-Language", "de")]
            }
            return response
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            _ = try await client.send(Self.range("bytes=0-499"))
            let whole = try await client.response(Self.range(nil))
            #expect(server.requests.last?.header("If-Range") == "\"m1\"")
            #expect(whole.status.code == 200)
            #expect(whole.value == origin.content())
            #expect(whole.headers[.contentType] == "text/plain; charset=utf-8")
            #expect(whole.headers[.contentLanguage] == "de")
            let again = try await client.response(Self.range(nil))
            #expect(again.source == .cache)
            #expect(again.headers[.contentType] == "text/plain; charset=utf-8")
            #expect(again.headers[.contentLanguage] == "de")
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases, [#""m1""#, #"W/"m1""#])
    func aStaleWholeResponseIsRevalidatedForARangeTheEndpointTakesOnlyAsA206(_ kind: TransportKind, _ validator: String) async throws {
        // RFC 9111 §4.3.4 with §3.4: a 304 confirms the stored 200, from which the cache answers
        // the range as a 206 — the status this endpoint accepts. That the stored status is one
        // it does not accept is no reason to fetch without conditions. A weak validator
        // confirms it as well (§4.3.4 selects by weak comparison, RFC 9110 §8.8.3.2): the caller
        // got the whole 200 it does not accept.
        let origin = RangeOrigin()
        origin.etag.withLock { $0 = validator }
        let etag = origin.etag.withLock { $0 }
        let server = try await http1Server { request in
            if request.header("If-None-Match") == etag {
                return ScriptedResponse(status: 304, headers: [("ETag", etag), ("Cache-Control", "max-age=0")])
            }
            var response = await origin.handle(request)
            response.headers = response.headers.map { $0.0 == "Cache-Control" ? ("Cache-Control", "max-age=0") : $0 }
            return response
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let whole = try await client.response(Self.range(nil))
            #expect(whole.status.code == 200)
            var part = Self.range("bytes=10-19")
            part.acceptedStatuses = 206..<207
            let answer = try await client.response(part)
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("If-None-Match") == etag)
            #expect(answer.status.code == 206)
            #expect(answer.value == origin.content()[10...19])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anInterruptedDownloadResumesFromTheCache(_ kind: TransportKind) async throws {
        // RFC 9111 §3.4: the stored first half plus the rest from the origin make the complete
        // response, which the caller gets as a 200 and which is stored complete.
        try await withRangeCache(kind) { client, server, origin in
            _ = try await client.send(Self.range("bytes=0-499"))
            let whole = try await client.response(Self.range(nil))
            #expect(server.requests.last?.header("Range") == "bytes=500-")
            #expect(whole.status.code == 200)
            #expect(whole.value == origin.content())
            #expect(whole.headers[.contentRange] == nil)
            let again = try await client.response(Self.range(nil))
            #expect(again.source == .cache)
            #expect(again.value == origin.content())
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aChangedRepresentationIsFetchedWholeAndReplacesTheParts(_ kind: TransportKind) async throws {
        // RFC 9110 §13.1.5: If-Range with the old validator fails, the origin sends all of the
        // new representation; RFC 9111 §3.4: parts with different validators are never combined.
        try await withRangeCache(kind) { client, server, origin in
            _ = try await client.send(Self.range("bytes=0-99"))
            origin.etag.withLock { $0 = "\"m2\"" }
            origin.version.withLock { $0 = 2 }
            let whole = try await client.response(Self.range(nil))
            #expect(whole.status.code == 200)
            #expect(whole.value == origin.content())
            #expect(server.requests.last?.header("If-Range") == "\"m1\"")
            let part = try await client.response(Self.range("bytes=0-9"))
            #expect(part.source == .cache)
            #expect(part.value == origin.content()[0...9])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCompleteStoredResponseAnswersRangesIncludingSuffixes(_ kind: TransportKind) async throws {
        try await withRangeCache(kind) { client, server, origin in
            _ = try await client.send(Self.range(nil))
            let suffix = try await client.response(Self.range("bytes=-10"))
            #expect(suffix.source == .cache)
            #expect(suffix.status.code == 206)
            #expect(suffix.headers[.contentRange] == "bytes 990-999/1000")
            #expect(suffix.value == origin.content()[990...999])
            let open = try await client.response(Self.range("bytes=995-"))
            #expect(open.value == origin.content()[995...999])
            // Past the end: not satisfiable from the cache, so the origin is asked.
            _ = try? await client.send(Self.range("bytes=5000-"))
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func theNewerPartsFieldsUpdateTheStoredOnes(_ kind: TransportKind) async throws {
        // RFC 9111 §3.4: when combining, the header fields of the newer response are used.
        try await withRangeCache(kind) { client, _, origin in
            _ = try await client.send(Self.range("bytes=0-99"))
            origin.version.withLock { $0 = 1 }  // same bytes and validator, new field value below
            let second = try await client.response(Self.range("bytes=100-199"))
            #expect(second.headers[HTTPField.Name("X-Version")!] == "1")
            let served = try await client.response(Self.range("bytes=0-199"))
            #expect(served.source == .cache)
            #expect(served.headers[HTTPField.Name("X-Version")!] == "1")
            #expect(served.headers[.contentLength] == "200")
        }
    }

    @Test(
        arguments: TransportKind.allCases,
        [
            "bytes 0-99999999999999999999/1000",  // past Int
            "bytes 0-9/1000",  // says 10 bytes, 100 arrive
            "bytes 50-10/1000",  // backwards
            "bytes 0-99/50",  // past its own length
            "bytes */1000",  // the unsatisfied form
            "items 0-99/1000",
        ])
    func aHostileContentRangeIsNeverStored(_ kind: TransportKind, _ contentRange: String) async throws {
        let server = try await http1Server { _ in
            ScriptedResponse(
                status: 206, headers: [("ETag", "\"h\""), ("Cache-Control", "max-age=600"), ("Content-Range", contentRange)],
                body: Data(repeating: 1, count: 100))
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let first = try await client.response(Self.range("bytes=0-99"))
            #expect(first.status.code == 206)
            #expect(first.value.count == 100)
            let second = try await client.response(Self.range("bytes=0-9"))
            #expect(second.source == .network)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestForSeveralRangesGoesToTheOriginUntouched(_ kind: TransportKind) async throws {
        // One range per request is what the cache answers; several pass through, not stored.
        try await withRangeCache(kind) { client, server, _ in
            _ = try await client.send(Self.range(nil))
            _ = try await client.send(Self.range("bytes=0-1,5-6"))
            _ = try await client.send(Self.range("bytes=0-1,5-6"))
            #expect(server.requests.count == 3)
            #expect(server.requests.last?.header("Range") == "bytes=0-1,5-6")
        }
    }

    // MARK: - Where partial content meets other features

    @Test(arguments: TransportKind.allCases)
    func aCallerThatJoinsAnotherNeverGetsTheRestOfAPartialEntryAsItsBody(_ kind: TransportKind) async throws {
        // Seam cache × deduplication: A completes a stored part (it asks for bytes 500-); B, a
        // network-only call of the same URL at the same time, must not share A's 206.
        let origin = RangeOrigin()
        let gate = Gate()
        let server = try await http1Server { request in
            if request.header("Range") == "bytes=500-" { await gate.wait() }
            return await origin.handle(request)
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            _ = try await client.send(Self.range("bytes=0-499"))
            async let completing = client.send(Self.range(nil))
            #expect(await eventually { server.requests.count == 2 })
            var networkOnly = Self.range(nil)
            networkOnly.cachePolicy = .networkOnly
            async let plain = client.send(networkOnly)
            #expect(await eventually { server.requests.count == 3 })
            await gate.open()
            #expect(try await completing == origin.content())
            #expect(try await plain == origin.content())
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStoredErrorPageIsNeverSlicedIntoARange(_ kind: TransportKind) async throws {
        // A fresh stored 404 must not answer a range request as a 206 with part of the error page.
        let server = try await http1Server { _ in .text("no such page", status: 404, headers: [("Cache-Control", "max-age=600")]) }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let lenient = Endpoint<Data>(path: "/missing", acceptedStatuses: 200..<500, decoding: .data)
            _ = try await client.send(lenient)
            let ranged = Endpoint<Data>(path: "/missing", headers: [.range: "bytes=0-3"], acceptedStatuses: 200..<500, decoding: .data)
            let answer = try await client.response(ranged)
            #expect(answer.status.code == 404)
            #expect(answer.source == .network)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func staleIfErrorNeverServesAPartOfTheBodyAsTheWhole(_ kind: TransportKind) async throws {
        // RFC 9111 §3.3: an incomplete response is never used to answer a request for all of it.
        let failing = Locked(false)
        let origin = RangeOrigin()
        let clock = TestClock()
        let server = try await http1Server { request in
            if failing.withLock({ $0 }) { return .text("down", status: 503) }
            var response = await origin.handle(request)
            response.headers = response.headers.map { $0.0 == "Cache-Control" ? ($0.0, "max-age=1, stale-if-error=600") : $0 }
            return response
        }
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: MemoryCacheStore(), now: { clock.now })
                $0.retry = .never
            }
        ) { client in
            _ = try await client.send(Self.range("bytes=0-99"))
            failing.withLock { $0 = true }
            clock.advance(10)
            let error = await expectCourierError { _ = try await client.send(Self.range(nil)) }
            #expect(error?.status?.code == 503)
            // A range inside the stored part may be served stale.
            let part = try await client.response(Self.range("bytes=0-9"))
            #expect(part.source == .stale)
            #expect(part.value == origin.content()[0...9])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRefusedResumeOfAStoredPartIsAskedAgainAsTheCallerAsked(_ kind: TransportKind) async throws {
        // RFC 9110 §15.5.17: a 416 is about the range the request sent, here the cache's own
        // resume of a stored part. A caller who sent no range and accepts 4xx statuses still
        // gets the whole representation, not the 416, and the next one too.
        let origin = RangeOrigin()
        let refuse = Locked(false)
        let server = try await http1Server { request in
            if refuse.current, request.header("Range") != nil {
                return ScriptedResponse(status: 416, headers: [("Content-Range", "bytes */1000")])
            }
            return await origin.handle(request)
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            _ = try await client.send(Self.range("bytes=0-99"))
            refuse.withLock { $0 = true }
            let lenient = Endpoint<Data>(path: "/media", acceptedStatuses: 200..<500, decoding: .data)
            let whole = try await client.response(lenient)
            #expect(whole.status.code == 200)
            #expect(whole.value == origin.content())
            #expect(server.requests.count == 3)
            #expect(server.requests[1].header("Range") != nil)
            #expect(server.requests[2].header("Range") == nil)
            let again = try await client.response(lenient)
            #expect(again.status.code == 200)
            #expect(again.value == origin.content())
        }
    }

    @Test(arguments: TransportKind.allCases)
    func partsCombinedPastTheMaximumResponseSizeAreNotAnAnswer(_ kind: TransportKind) async throws {
        // The client's maximum response size bounds what the cache builds from parts as it
        // bounds one response: 500 stored bytes and the 500 missing make 1000, past 600, so the
        // whole is asked for as the caller asked, and fails as a direct fetch does.
        let origin = RangeOrigin()
        let server = try await http1Server(origin.handle)
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
                $0.maxResponseSize = 600
            }
        ) { client in
            let part = try await client.response(Self.range("bytes=0-499"))
            #expect(part.value.count == 500)
            let whole = await expectCourierError { _ = try await client.send(Self.range(nil)) }
            #expect(whole?.kind == .responseTooLarge)
            #expect(server.requests.count == 3)
            #expect(server.requests.last?.header("Range") == nil)
            // The part is gone with the refused combination: the next request asks once.
            let again = await expectCourierError { _ = try await client.send(Self.range(nil)) }
            #expect(again?.kind == .responseTooLarge)
            #expect(server.requests.count == 4)
        }
    }

    /// Sends `endpoint` through a client without a size limit that shares `store`, as another
    /// client of the app would fill it; its transport is shut down after.
    func sendThroughRoomyClient<Value: Sendable>(
        _ kind: TransportKind, _ server: TestServer, store: MemoryCacheStore, _ endpoint: Endpoint<Value>
    ) async throws -> Value {
        let transport = makeTransport(kind)
        let roomy = Client(
            configuration: .init(transport: transport.transport, baseURL: server.baseURL) { $0.cache = CacheConfiguration(store: store) })
        do {
            let value = try await roomy.send(endpoint)
            try await transport.shutdown()
            return value
        } catch {
            try? await transport.shutdown()
            throw error
        }
    }

    /// Runs `body` with a client sharing `store` whose maximum response size is `limit`.
    func withStrictClient(
        _ kind: TransportKind, _ server: TestServer, store: MemoryCacheStore, limit: Int, _ body: (Client) async throws -> Void
    ) async throws {
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: store)
                $0.maxResponseSize = limit
                $0.retry = .never
            }, body)
    }

    @Test(arguments: TransportKind.allCases)
    func aStoredBodyPastTheMaximumResponseSizeIsNoAnswerForAClientThatRefusesIt(_ kind: TransportKind) async throws {
        // A store shared with a client of a larger limit holds a body this client would refuse
        // from the network: served from the store it would pass the limit unseen.
        let big = String(repeating: "b", count: 2000)
        let server = try await http1Server { _ in .text(big, headers: [("Cache-Control", "max-age=600")]) }
        let store = MemoryCacheStore()
        let stored = try await self.sendThroughRoomyClient(kind, server, store: store, Endpoint<String>(path: "/big", decoding: .string))
        #expect(stored == big)
        try await self.withStrictClient(kind, server, store: store, limit: 1000) { strict in
            let error = await expectCourierError { _ = try await strict.send(Endpoint<String>(path: "/big", decoding: .string)) }
            #expect(error?.kind == .responseTooLarge)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRangeThatFitsIsServedFromAStoredBodyPastTheMaximumAndTheEntryStays(_ kind: TransportKind) async throws {
        // RFC 9111 §3.4 / RFC 9110 §14: a stored whole answers a range of it. Past this client's
        // limit as a whole, a slice that fits is still an answer, and the entry (another
        // client's) is neither replaced nor removed.
        let origin = RangeOrigin()
        let server = try await http1Server(origin.handle)
        let store = MemoryCacheStore()
        let whole = try await self.sendThroughRoomyClient(kind, server, store: store, Self.range(nil))
        #expect(whole.count == RangeOrigin.length)
        try await self.withStrictClient(kind, server, store: store, limit: 600) { strict in
            let part = try await strict.response(Self.range("bytes=0-99"))
            #expect(part.status.code == 206)
            #expect(part.value == origin.content()[0...99])
            #expect(part.source == .cache)
            #expect(server.requests.count == 1)
            let error = await expectCourierError { _ = try await strict.send(Self.range(nil)) }
            #expect(error?.kind == .responseTooLarge)
            #expect(server.requests.count == 2)
        }
        // The roomy client's entry is still there.
        let again = try await self.sendThroughRoomyClient(kind, server, store: store, Self.range(nil))
        #expect(again == origin.content())
        #expect(server.requests.count == 2)
    }

    @Test(arguments: TransportKind.allCases)
    func aRangeAcrossAStoredPartPastTheMaximumIsAskedForOnce(_ kind: TransportKind) async throws {
        // A stored part (bytes 0-799) past this client's limit: a range across its end went out
        // as the rest, was combined past the limit, and was then asked for again as asked — two
        // requests each time. The part is no answer for this client: one request, as asked.
        let origin = RangeOrigin()
        let server = try await http1Server(origin.handle)
        let store = MemoryCacheStore()
        let stored = try await self.sendThroughRoomyClient(kind, server, store: store, Self.range("bytes=0-799"))
        #expect(stored.count == 800)
        try await self.withStrictClient(kind, server, store: store, limit: 600) { strict in
            let part = try await strict.response(Self.range("bytes=500-899"))
            #expect(part.status.code == 206)
            #expect(part.value == origin.content()[500...899])
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("Range") == "bytes=500-899")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anEndpointThatDoesNotAccept206IsNeverSentTheCachesOwnRange(_ kind: TransportKind) async throws {
        try await withRangeCache(kind) { client, server, origin in
            _ = try await client.send(Self.range("bytes=0-99"))
            let strict = Endpoint<Data>(path: "/media", acceptedStatuses: 200..<206, decoding: .data)
            let whole = try await client.response(strict)
            #expect(whole.status.code == 200)
            #expect(whole.value == origin.content())
            #expect(server.requests.last?.header("Range") == nil)
        }
    }
}
