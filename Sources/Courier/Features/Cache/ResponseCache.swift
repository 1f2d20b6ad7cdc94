import Crypto
import Foundation
import HTTPTypes

/// One request's dealings with the cache: its key, the entry found and the decision taken.
struct CacheRun: Sendable {
    let policy: CachePolicy
    /// The store key; `nil` when the request cannot be cached (a streamed body, or a method the
    /// policy does not cache) — its response may still invalidate entries.
    let key: String?
    /// Where the entry found lives: the key itself, or the key of the variant the request selects.
    let entryKey: String?
    let url: String
    let partition: String
    /// The wire identity the key was made with.
    let wire: String
    let method: HTTPRequest.Method
    /// The request's header fields before any conditional fields were added.
    let requestHeaders: HTTPFields
    /// The single byte range the request asks for (`Range`), if any.
    var wantedRange: ByteRangeRequest? { self.requestHeaders[.range].flatMap(ByteRangeRequest.parse) }
    let entry: CacheEntry?
    var action: CacheAction
    let requestDate: Date
    /// Whether the entry may answer only once the origin has validated it (it varies on a
    /// field set below the cache): never served stale, offline or on an error either.
    var needsValidation = false
}

/// The client's cache: keys, lookups and storing, over a ``CacheStore`` and the pure ``CacheRules``.
struct ResponseCache: Sendable {
    let store: any CacheStore
    let configuration: CacheConfiguration
    /// The client's maximum response size: parts combined into a larger body are not stored
    /// (a single response that large fails with `responseTooLarge`), and a larger stored body
    /// is not served.
    var maxBodySize = Int.max
    /// The request fields (lowercased) that stages below the cache may set — `cookie` from the
    /// cookie jar or a middleware, `authorization` from a middleware — whose values the lookup
    /// cannot see (``fieldsSetBelow(hasCookieJar:hasMiddleware:)``).
    var fieldsSetBelow: Set<String> = []

    /// The fields stages below the cache may set on a client with a cookie jar, or middleware.
    static func fieldsSetBelow(hasCookieJar: Bool, hasMiddleware: Bool) -> Set<String> {
        var fields: Set<String> = []
        if hasCookieJar || hasMiddleware { fields.insert("cookie") }
        if hasMiddleware { fields.insert("authorization") }
        return fields
    }

    /// The store's entry for `key`, if it can be an answer: a status a response can have (100 to
    /// 999) or a variant index. A store of the app's own that hands back another (a damaged
    /// record) gives a miss, never a status the HTTP types stop the process for.
    func entry(forKey key: String) -> CacheEntry? {
        guard let entry = self.store.entry(forKey: key), (100...999).contains(entry.status) || entry.isVariantIndex else { return nil }
        return entry
    }
    /// The entries being revalidated in the background (`stale-while-revalidate`), by entry key.
    private let revalidating = Locked(Set<String>())

    /// The most background revalidations under way at once; past it a stale hit is served
    /// without one (a later hit starts it).
    static let backgroundLimit = 8

    /// Claims the background revalidation of an entry: `true` for the first caller, `false`
    /// while one is under way (or too many are). The claim ends with ``endRevalidation(_:)``.
    func beginRevalidation(_ entryKey: String) -> Bool {
        self.revalidating.withLock { $0.count < Self.backgroundLimit && $0.insert(entryKey).inserted }
    }

    /// Ends a background revalidation claimed with ``beginRevalidation(_:)``.
    func endRevalidation(_ entryKey: String) {
        _ = self.revalidating.withLock { $0.remove(entryKey) }
    }

    /// The key of a request (method, normalised URL, body digest when there is a body,
    /// partition), or `nil` when its body is a stream that cannot be digested.
    static func key(for request: Request, url: String, partition: String, wire: String) -> String? {
        var digest: String?
        if let body = request.body {
            guard let bytes = body.bytes else { return nil }
            digest = SHA256.hex(bytes)
        }
        return self.key(method: request.head.method, url: url, partition: partition, wire: wire, bodyDigest: digest)
    }

    /// The key of a request with this method, URL, partition, wire identity and body digest.
    static func key(method: HTTPRequest.Method, url: String, partition: String, wire: String, bodyDigest: String?) -> String? {
        var key = "\(method.rawValue) \(url)\npartition:\(partition)"
        if !wire.isEmpty { key += "\nwire:\(wire)" }
        if let bodyDigest { key += "\nbody:\(bodyDigest)" }
        return key
    }

    /// Looks the request up and decides what to do.
    ///
    /// - Parameters:
    ///   - partition: the partition, read once for the request.
    ///   - wire: the wire identity (operation) of the request; `""` for REST.
    ///   - endpointHasMiddleware: whether the endpoint brings middleware of its own (which may
    ///     set any of ``fieldsSetBelow``).
    func begin(_ request: Request, policy: CachePolicy, partition: String, wire: String, endpointHasMiddleware: Bool = false) -> CacheRun {
        let url = LogicalKey.normalise(scheme: request.head.scheme, authority: request.head.authority, path: request.head.path)
        let now = self.configuration.now()
        let method = request.head.method
        var key: String?
        var entryKey: String?
        var entry: CacheEntry?
        // Whether the stored response varies on a field set below the cache (RFC 9111 §4.1).
        var variesOnHiddenField = false
        if CacheRules.handles(method, policy: policy), let requestKey = Self.key(for: request, url: url, partition: partition, wire: wire) {
            key = requestKey
            if policy.mode != .reload, policy.mode != .networkOnly {
                entryKey = requestKey
                entry = self.entry(forKey: requestKey)
                if let index = entry, index.isVariantIndex {
                    // The response varies: the request's values of the varying fields pick the variant.
                    let names = CacheRules.varyNames(index.headers) ?? []
                    let variantKey = Self.variantKey(requestKey, names: names, requestHeaders: request.head.headerFields)
                    entryKey = variantKey
                    entry = self.entry(forKey: variantKey)
                    let hidden = endpointHasMiddleware ? self.fieldsSetBelow.union(["cookie", "authorization"]) : self.fieldsSetBelow
                    variesOnHiddenField = !hidden.isEmpty && names.contains { hidden.contains($0.lowercased()) }
                }
                // A body past the client's maximum response size (stored by a client sharing the
                // store with a larger one) is no answer for this client: from the network it
                // would fail with `responseTooLarge`, and so it does, asked for again. A range of
                // it that fits is an answer.
                if let stored = entry, !stored.isVariantIndex, stored.body.count > self.maxBodySize {
                    // (Of a whole: a stored part's offsets are not its body's.)
                    let wanted =
                        stored.status == 206
                        ? nil : request.head.headerFields[.range].flatMap(ByteRangeRequest.parse)?.resolve(length: stored.body.count)
                    if (wanted?.count ?? stored.body.count) > self.maxBodySize { entry = nil }
                }
            }
        }
        var action = CacheRules.action(policy: policy, method: method, requestHeaders: request.head.headerFields, entry: entry, now: now)
        if variesOnHiddenField, let stored = entry {
            // RFC 9111 §4.1: a stored response is used without revalidation only when every field
            // its Vary names matches the request as sent. A cookie or credential set below the cache
            // (a cookie jar's, a middleware's) is not in the request looked up here, and may have
            // changed since the response was stored (a sign-in): whatever the policy, the response
            // is revalidated, and the origin answers for what is sent.
            switch action {
            case .serve, .serveStale:
                action = CacheControl(request.head.headerFields).has("only-if-cached") ? .unavailable : CacheRules.refetch(stored)
            case .revalidate, .fetch, .unavailable, .resume:
                break
            }
        }
        var run = CacheRun(
            policy: policy, key: key, entryKey: entryKey, url: url, partition: partition, wire: wire, method: method,
            requestHeaders: request.head.headerFields, entry: entry, action: action, requestDate: now
        )
        run.needsValidation = variesOnHiddenField
        return run
    }

    /// The stored response a run decided to serve (fresh, or stale while it is revalidated).
    func served(_ run: CacheRun) -> Outcome? {
        guard let entry = run.entry else { return nil }
        switch run.action {
        case .serve(let age): return Self.stored(entry, age: age, source: .cache, key: run.entryKey, wanted: run.wantedRange)
        case .serveStale(let age, _):
            return Self.stored(entry, age: age, source: .stale, key: run.entryKey, wanted: run.wantedRange, staleReason: .whileRevalidating)
        case .revalidate, .fetch, .unavailable, .resume: return nil
        }
    }

    /// The stored response a run may serve stale after the network failed, for `reason`: the
    /// origin failed (``StaleReason/originError``, `stale-if-error`) or could not be reached at
    /// all (``StaleReason/disconnected``, RFC 9111 §4.2.4); `nil` when the rule forbids it.
    func stale(_ run: CacheRun, because reason: StaleReason) -> Outcome? {
        guard let entry = run.entry, !run.needsValidation else { return nil }
        let rule = reason == .disconnected ? CacheRules.servesStaleWhenDisconnected : CacheRules.servesStaleOnError
        guard let age = rule(run.policy, entry, run.requestHeaders, self.configuration.now()) else { return nil }
        return Self.stored(entry, age: age, source: .stale, key: run.entryKey, wanted: run.wantedRange, staleReason: reason)
    }

    /// A stored response as an outcome, with the `Age` field a cache MUST generate when it uses
    /// a stored response (RFC 9111 §5.1): its current age in whole seconds.
    static func stored(
        _ entry: CacheEntry, age: TimeInterval, source: ResponseSource, key: String?, wanted: ByteRangeRequest? = nil,
        staleReason: StaleReason? = nil
    ) -> Outcome? {
        var outcome = Outcome(response: Self.response(from: entry))
        if let wanted {
            guard let answer = CacheRules.answer(from: entry, wanted: wanted) else { return nil }
            outcome.response.head.status = .init(code: answer.status)
            outcome.response.head.headerFields = answer.headers
            outcome.response.body = .data(answer.body)
            // A slice is not the stored body: no decoded value of the whole may stand for it.
            outcome.cacheKey = nil
        } else {
            // A partial entry is never a whole response (RFC 9111 §3.3).
            guard entry.status != 206 else { return nil }
            outcome.cacheKey = key
        }
        outcome.response.head.headerFields[.age] = String(Int(age.rounded(.down)))
        outcome.source = source
        outcome.age = age
        outcome.staleReason = source == .stale ? staleReason : nil
        return outcome
    }

    /// The stored response for a request, however old (cache-then-network's first value).
    func anyStored(for request: Request, policy: CachePolicy, wire: String) -> Outcome? {
        var lenient = CachePolicy.cacheElseNetwork
        if policy.cachesAnyMethod { lenient = lenient.allowingAnyMethod() }
        return self.served(self.begin(request, policy: lenient, partition: self.configuration.partition(), wire: wire))
    }

    /// Whether the run may store its response, so its body must be read.
    func mayStore(_ run: CacheRun) -> Bool {
        run.key != nil && run.policy.mode != .networkOnly
    }

    /// Whether a revalidating request's answer is the `304` that keeps the stored response.
    static func isNotModified(_ run: CacheRun?, status: Int) -> Bool {
        guard status == 304, let run, case .revalidate = run.action else { return false }
        return run.entry != nil
    }

    /// RFC 9111 §4.4: after a non-error answer to an unsafe method, the target URI and the
    /// same-origin URIs in `Location` and `Content-Location` go; every variant of each (they
    /// share the URL). After redirects, `answeredBy` is the URL that gave the answer: it goes
    /// too, and the answer's locations are relative to it and must have its origin.
    private func invalidate(_ url: String, answer head: HTTPResponse, answeredBy final: String? = nil) {
        self.store.removeEntries(in: .url(url))
        let base = final ?? url
        if base != url { self.store.removeEntries(in: .url(base)) }
        for name in [HTTPField.Name.location, .contentLocation] {
            if let value = head.headerFields[values: name].first, let other = Self.sameOrigin(value, as: base) {
                self.store.removeEntries(in: .url(other))
            }
        }
    }

    /// Whether the request that got the final answer still had `method`: redirects other than
    /// a 303, and a 301 or 302 after a POST, send the method again (RFC 9110 §15.4).
    static func keepsMethod(_ method: HTTPRequest.Method, through redirects: [HTTPResponse]) -> Bool {
        !redirects.contains { redirect in
            let code = redirect.status.code
            return code == 303 || ((code == 301 || code == 302) && method == .post)
        }
    }

    /// The normalised URLs a request with `method` was sent on to through `redirects` (each
    /// keeps its target in `Location`) while the redirects kept the method.
    static func hopsReached(by method: HTTPRequest.Method, through redirects: [HTTPResponse]) -> [String] {
        var hops: [String] = []
        for redirect in redirects {
            guard Self.keepsMethod(method, through: [redirect]) else { break }
            if let target = redirect.headerFields[.location], let hop = Self.sameOrigin(target, as: target) { hops.append(hop) }
        }
        return hops
    }

    /// The invalidation of RFC 9111 §4.4 for an exchange the cache otherwise leaves alone (a
    /// streamed body, a download): an unsafe method's non-error answer still invalidates.
    func invalidateAfter(_ request: Request, answer head: HTTPResponse, policy: CachePolicy) {
        guard CacheRules.invalidates(method: request.head.method, status: head.status.code, policy: policy) else { return }
        self.invalidate(
            LogicalKey.normalise(scheme: request.head.scheme, authority: request.head.authority, path: request.head.path), answer: head)
    }

    /// The invalidation of RFC 9111 §4.4 for an unsafe request that failed after the server
    /// answered it with a non-error status (2xx or 3xx): one the endpoint does not accept (a
    /// 300, a 2xx outside its range), a redirect that was followed and whose chain then failed,
    /// or an answer whose body then failed (cut short, too large, not content-decodable). Only
    /// the target URI is invalidated then: the failure kept no `Location` to go by.
    func invalidateAfter(_ request: Request, failure: any Error, record: ExchangeRecord, policy: CachePolicy) {
        // Each hop of a 307/308 chain the request reached answered it with a redirect: its target
        // URI goes, whatever the chain brought after (RFC 9111 §4.4).
        if CacheRules.invalidates(method: request.head.method, status: 307, policy: policy) {
            for hop in Self.hopsReached(by: request.head.method, through: record.redirects) { self.store.removeEntries(in: .url(hop)) }
        }
        if let error = failure as? CourierError, error.kind == .httpStatus, let status = error.status,
            CacheRules.invalidates(method: request.head.method, status: status.code, policy: policy)
        {
            self.invalidateAfter(request, answer: HTTPResponse(status: status, headerFields: error.headers ?? [:]), policy: policy)
        } else if let status = record.followedRedirect ?? record.status, (100..<1000).contains(status) {
            self.invalidateAfter(request, answer: HTTPResponse(status: .init(code: status)), policy: policy)
        }
    }

    /// Handles a network response that passed the status check and the unboxing: a 304
    /// answering a revalidation becomes the refreshed stored response; a storable response is
    /// stored (its payload); an unsafe method's success invalidates the URL.
    ///
    /// - Parameters:
    ///   - sentHeaders: the header fields of the request as sent; a response that varies
    ///     on a field whose sent value differs from the logical request's is not stored.
    ///   - redirects: the redirects followed to the response, which limit how long it is fresh
    ///     for the URL asked for (``CacheRules/freshnessLimit(afterRedirects:now:)``).
    func finish(
        _ run: CacheRun, outcome: Outcome, sentHeaders: HTTPFields?, redirects: [HTTPResponse] = [], didStore: (() -> Void)? = nil
    ) -> Outcome {
        let now = self.configuration.now()
        // How much longer the redirects allow, from now; each entry keeps it counted on its own
        // age (``CacheEntry/freshnessLimit`` is compared with the entry's age).
        let allowed = redirects.isEmpty ? nil : CacheRules.freshnessLimit(afterRedirects: redirects, now: now)
        // A limit that forbids reuse stays one, whatever the entry's age.
        func limit(_ entry: CacheEntry) -> TimeInterval? {
            allowed.map { CacheRules.forbidsReuse($0) ? $0 : $0 + CacheRules.age(of: entry, now: now) }
        }
        let head = outcome.response.head
        let status = head.status.code
        if CacheRules.invalidates(method: run.method, status: status, policy: run.policy) {
            // Each hop the unsafe request was sent on to (307, 308) answered it without an error:
            // its target URI goes too (§4.4).
            for hop in Self.hopsReached(by: run.method, through: redirects) { self.store.removeEntries(in: .url(hop)) }
            if Self.keepsMethod(run.method, through: redirects) {
                let final = outcome.response.url.flatMap { Self.sameOrigin($0.absoluteString, as: $0.absoluteString) }
                self.invalidate(run.url, answer: head, answeredBy: final)
                self.storeUnderContentLocation(run, outcome: outcome, now: now)
            } else {
                // A redirect made the request a GET (a 303; a 301 or 302 after a POST): the
                // answer is that GET's, which invalidates nothing. The unsafe request's target
                // URI goes, and the URI it was redirected to only when of the same origin (§4.4:
                // "MUST NOT trigger an invalidation ... if the origin ... differs").
                self.store.removeEntries(in: .url(run.url))
                if let final = outcome.response.url.flatMap({ Self.sameOrigin($0.absoluteString, as: run.url) }), final != run.url {
                    self.store.removeEntries(in: .url(final))
                }
            }
        }
        guard let key = run.key, outcome.source == .network, outcome.payloadMayBeCached else { return outcome }
        if Self.isNotModified(run, status: status), let entry = run.entry, let entryKey = run.entryKey {
            // A 304 whose validator is not the stored response's updates nothing (RFC 9111
            // §4.3.4 MUST NOT); the lookup stage then asks without conditions.
            guard CacheRules.notModified(head.headerFields, identifies: entry) else { return outcome }
            var refreshed = CacheRules.refreshed(entry, notModified: head.headerFields, requestDate: run.requestDate, responseDate: now)
            // The redirects of this exchange say how long it holds for the URL asked for now.
            refreshed.freshnessLimit = limit(refreshed)
            if CacheRules.forbidsStoring(requestHeaders: run.requestHeaders, responseHeaders: head.headerFields, status: entry.status)
                || CacheRules.changesVary(head.headerFields, of: entry)
            {
                // The refreshed response is this caller's answer, but `no-store` in the request or
                // the 304 forbids keeping it (RFC 9111 §5.2.1.5, §5.2.2.5), or it varies on fields
                // whose stored values are unknown (§4.1): the stored one goes too, rather than
                // stay to be served under its old freshness.
                self.store.removeEntry(forKey: entryKey)
            } else if self.stillHolds(entry, under: entryKey) {
                self.store.setEntry(refreshed, forKey: entryKey)
            }
            // The caller's range, cut from the confirmed response (RFC 9111 §4.3.4 with §3.4), or
            // the whole response where the range cannot be cut from it.
            let age = CacheRules.age(of: refreshed, now: now)
            guard
                var result = Self.stored(refreshed, age: age, source: .revalidated, key: entryKey, wanted: run.wantedRange)
                    ?? Self.stored(refreshed, age: age, source: .revalidated, key: entryKey)
            else { return outcome }
            result.response.version = outcome.response.version
            result.response.url = outcome.response.url
            return result
        }
        // (Under `.networkOnly` the cache is not written: a HEAD refreshes nothing.)
        if run.method == .head, run.policy.mode != .networkOnly, (200..<300).contains(status) {
            self.updateStoredGET(run, headResponse: head.headerFields, now: now, limit: limit)
        }
        let payload = outcome.payload ?? outcome.body
        if status == 206 {
            // A part of the representation: combined with what is stored (RFC 9111 §3.4).
            if run.policy.mode != .networkOnly, outcome.payload == nil,
                CacheRules.mayStore(
                    policy: run.policy, method: run.method, requestHeaders: run.requestHeaders, status: status,
                    responseHeaders: head.headerFields, received: now),
                Self.varyMatchesSent(responseHeaders: head.headerFields, logical: run.requestHeaders, sent: sentHeaders)
            {
                let template = CacheEntry(
                    url: run.url, method: run.method.rawValue, partition: run.partition, status: status,
                    headers: [:], body: Data(), requestDate: run.requestDate, responseDate: now
                )
                let stored = self.entry(forKey: key)
                if var entry = CacheRules.combined(stored: stored, partial: head.headerFields, body: payload, template: template) {
                    // Counted on the combined entry's own age (its fields are the part's).
                    entry.freshnessLimit = limit(entry)
                    if entry.body.count <= self.maxBodySize {
                        self.store.setEntry(entry, forKey: key)
                        didStore?()
                    } else if let stored, !stored.isVariantIndex, stored.body.count > self.maxBodySize {
                        // Larger than this client's limit already (a client with a larger one
                        // stored it): that client's entry, left as it is.
                    } else {
                        // Larger than a response may be: the part stored goes too, or every
                        // later request would resume it and fail again.
                        self.store.removeEntry(forKey: key)
                    }
                }
            }
            return outcome
        }
        if run.policy.mode != .networkOnly,
            CacheRules.mayStore(
                policy: run.policy, method: run.method, requestHeaders: run.requestHeaders, status: status,
                responseHeaders: head.headerFields, received: now),
            Self.varyMatchesSent(responseHeaders: head.headerFields, logical: run.requestHeaders, sent: sentHeaders)
        {
            var entry = CacheEntry(
                url: run.url, method: run.method.rawValue, partition: run.partition, status: status,
                headers: CacheRules.storable(head.headerFields), body: payload, requestDate: run.requestDate, responseDate: now,
                varyingFields: CacheRules.varyingFields(responseHeaders: head.headerFields, requestHeaders: run.requestHeaders)
            )
            entry.freshnessLimit = limit(entry)
            let names = CacheRules.varyNames(head.headerFields) ?? []
            if names.isEmpty {
                self.store.setEntry(entry, forKey: key)
            } else {
                // An index under the key names the varying fields; each variant has its own key.
                let index = CacheEntry(
                    url: run.url, method: run.method.rawValue, partition: run.partition, status: CacheEntry.variantIndexStatus,
                    headers: [.vary: names.joined(separator: ", ")], body: Data(), requestDate: run.requestDate, responseDate: now
                )
                self.store.setEntry(index, forKey: key)
                self.store.setEntry(entry, forKey: Self.variantKey(key, names: names, requestHeaders: run.requestHeaders))
            }
            didStore?()
        } else if (200..<300).contains(status) || status == 404 || status == 410 {
            // A newer answer that may not be stored replaces nothing: drop the outdated entry. A
            // reload looked none up: it drops what is stored under the request's key (a
            // variant index with it, whose variants are then never found).
            if run.entry != nil, let entryKey = run.entryKey {
                self.store.removeEntry(forKey: entryKey)
            } else if run.policy.mode == .reload {
                self.store.removeEntry(forKey: key)
            }
        }
        return outcome
    }

    /// The normalised form of a `Location` or `Content-Location` value (relative to `url`) when
    /// it has the same origin (scheme, host and port) as `url`; `nil` otherwise.
    static func sameOrigin(_ reference: String, as url: String) -> String? {
        guard let base = URL(string: url), let resolved = URL(string: reference, relativeTo: base)?.absoluteURL,
            let target = URLComponents(url: resolved, resolvingAgainstBaseURL: false),
            let origin = Authority(base), Authority(resolved) == origin
        else { return nil }
        let authority = (target.encodedHost ?? "") + (target.port.map { ":\($0)" } ?? "")
        let path =
            (target.percentEncodedPath.isEmpty ? "/" : target.percentEncodedPath) + (target.percentEncodedQuery.map { "?\($0)" } ?? "")
        return LogicalKey.normalise(scheme: target.scheme, authority: authority, path: path)
    }

    /// A POST response with explicit freshness whose `Content-Location` is its own URL is the
    /// current representation of that URL: it answers a later GET (RFC 9110 §9.3.3, RFC 9111 §4.4).
    /// A payload the wire protocol keeps out of the cache (opened fields) is not stored here either.
    private func storeUnderContentLocation(_ run: CacheRun, outcome: Outcome, now: Date) {
        let head = outcome.response.head
        // A body discarded unread (its caller decodes nothing) is no response to store (RFC 9111
        // §3.3: never an incomplete one).
        guard outcome.payloadMayBeCached, !outcome.bodyDiscarded, run.method == .post, run.policy.mode == .http,
            [200, 203].contains(head.status.code),
            let location = head.headerFields[values: .contentLocation].first,
            Self.sameOrigin(location, as: run.url) == run.url
        else { return }
        // The response of a request redirected elsewhere does not speak for this URL.
        if let final = outcome.response.url, Self.sameOrigin(final.absoluteString, as: run.url) != run.url { return }
        let control = CacheControl(head.headerFields)
        guard control.has("max-age") || head.headerFields[.expires] != nil, !control.has("no-store"),
            !CacheControl(run.requestHeaders).has("no-store"),
            CacheRules.varyNames(head.headerFields) == [],
            let getKey = Self.key(method: .get, url: run.url, partition: run.partition, wire: run.wire, bodyDigest: nil)
        else { return }
        let entry = CacheEntry(
            url: run.url, method: HTTPRequest.Method.get.rawValue, partition: run.partition, status: head.status.code,
            headers: CacheRules.storable(head.headerFields), body: outcome.payload ?? outcome.body,
            requestDate: run.requestDate, responseDate: now
        )
        self.store.setEntry(entry, forKey: getKey)
    }

    /// Whether the store still holds the response a revalidation began with. Meanwhile another
    /// request may have stored a newer one (a 200 to a request that went past the cache), or the
    /// entry may have gone (invalidated, or cleared at sign-out): a late 304 for the old one then
    /// answers its caller but replaces or brings back nothing.
    /// (Compared by validators, which a 304 identifies a stored response by (§4.3.4), not by
    /// dates: a store of an app's own may keep them to the second.)
    private func stillHolds(_ entry: CacheEntry, under key: String) -> Bool {
        guard let current = self.entry(forKey: key) else { return false }
        return current.headers[values: .eTag].first == entry.headers[values: .eTag].first
            && current.headers[values: .lastModified].first == entry.headers[values: .lastModified].first
    }

    /// A successful HEAD response updates the stored GET response of the URL (RFC 9111 §4.3.5):
    /// with the same validator its fields replace the stored ones; with a different validator or
    /// length the stored response is outdated and removed. `limit` gives the refreshed
    /// response's ``CacheEntry/freshnessLimit`` (from the HEAD's redirects).
    private func updateStoredGET(_ run: CacheRun, headResponse: HTTPFields, now: Date, limit: (CacheEntry) -> TimeInterval?) {
        guard let getKey = Self.key(method: .get, url: run.url, partition: run.partition, wire: run.wire, bodyDigest: nil),
            let entry = self.entry(forKey: getKey), !entry.isVariantIndex
        else { return }
        let etag = headResponse[values: .eTag].first
        let modified = headResponse[values: .lastModified].first
        let length = headResponse[values: .contentLength].first
        let sameValidator =
            (etag != nil && etag == entry.headers[values: .eTag].first)
            || (etag == nil && modified != nil && modified == entry.headers[values: .lastModified].first)
        // A partial entry's Content-Length is its part's, not the representation's.
        let sameLength =
            entry.status == 206 || length == nil || entry.headers[values: .contentLength].first == nil
            || length == entry.headers[values: .contentLength].first
        if CacheRules.forbidsStoring(requestHeaders: run.requestHeaders, responseHeaders: headResponse, status: entry.status)
            || CacheRules.changesVary(headResponse, of: entry)
        {
            // Its fields may not be kept (RFC 9111 §5.2.1.5, §5.2.2.5), nor the response they
            // describe; or they vary on fields whose stored values are unknown (§4.1).
            self.store.removeEntry(forKey: getKey)
        } else if sameValidator, sameLength {
            // The HEAD's redirects say how long it holds for the URL now, as a 304's do.
            var refreshed = CacheRules.refreshed(entry, notModified: headResponse, requestDate: run.requestDate, responseDate: now)
            refreshed.freshnessLimit = limit(refreshed)
            self.store.setEntry(refreshed, forKey: getKey)
        } else if etag != nil || modified != nil || !sameLength {
            self.store.removeEntry(forKey: getKey)
        }
    }

    /// Whether every field the response varies on had the same value in the request as sent as
    /// in the logical request the lookup uses (see ``CacheStoreStage``).
    static func varyMatchesSent(responseHeaders: HTTPFields, logical: HTTPFields, sent: HTTPFields?) -> Bool {
        guard let sent, responseHeaders[.vary] != nil else { return true }
        return CacheRules.varyingFields(responseHeaders: responseHeaders, requestHeaders: logical)
            == CacheRules.varyingFields(responseHeaders: responseHeaders, requestHeaders: sent)
    }

    /// The key of one variant: the key plus the request's values of the varying fields.
    static func variantKey(_ key: String, names: [String], requestHeaders: HTTPFields) -> String {
        let values = CacheRules.varyingFields(responseHeaders: [.vary: names.joined(separator: ",")], requestHeaders: requestHeaders)
        return key + names.sorted().map { "\nvary:\($0)=\(values[$0].flatMap { $0 } ?? "\u{0}")" }.joined()
    }

    private static func response(from entry: CacheEntry) -> RawResponse {
        var head = HTTPResponse(status: .init(code: entry.status))
        head.headerFields = entry.headers
        // No URL: parsing one costs more than the rest of a memory hit; the request's URL is used.
        return RawResponse(head: head, body: .data(entry.body), version: .http1_1, url: nil)
    }
}
