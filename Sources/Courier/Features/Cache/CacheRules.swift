import Crypto
import Foundation
import HTTPTypes

/// What the cache does for one request.
package enum CacheAction: Sendable, Equatable {
    /// Answer with the stored response, which is this old.
    case serve(age: TimeInterval)
    /// Answer at once with the stored, stale response (this old), and revalidate it in the
    /// background with these conditional fields (none: a full fetch) — `stale-while-revalidate`.
    case serveStale(age: TimeInterval, revalidate: HTTPFields)
    /// Ask the server whether the stored response is still current, with these conditional fields.
    case revalidate(HTTPFields)
    /// Ask the server for a full response.
    case fetch
    /// Nothing usable is stored and the request said `only-if-cached`: answer `504` without the network.
    case unavailable
    /// The stored partial response holds the start of what is wanted: ask the origin for the
    /// rest with these fields (`Range` replacing the request's, and `If-Range`), then answer
    /// from the combined entry (RFC 9111 §3.4).
    case resume(HTTPFields)
}

/// The cache's decisions as pure functions: values in, a decision out, no I/O and no clock.
///
/// The rules are those of a private cache in RFC 9111, plus the app-chosen policies of
/// ``CachePolicy``.
package enum CacheRules {
    /// Status codes whose responses may be given heuristic freshness (RFC 9110 §15.1).
    static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]
    /// The largest heuristic freshness lifetime given to a response with only `Last-Modified`.
    /// Status codes whose caching rules this cache implements (for `must-understand`).
    static let understoodStatuses: Set<Int> = [200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501]
    /// Header fields never stored (RFC 9111 §3.1): the hop-by-hop fields of RFC 9110 §7.6.1 and
    /// the fields of the proxy that forwarded the response. Fields named in `Connection` go too.
    ///
    /// `Set-Cookie` is not stored either. RFC 9111 §7.3 lets a cache keep it, but this cache
    /// belongs to one app: a stored one would put session cookies (which the jar keeps in memory
    /// only) on disk, out of reach of clearing the jar, and replay them on every hit.
    static let unstoredFields: Set<String> = [
        "connection", "proxy-connection", "keep-alive", "te", "transfer-encoding", "upgrade", "trailer",
        "proxy-authenticate", "proxy-authentication-info", "proxy-authorization", "set-cookie",
    ]
    /// Header fields a request may carry that make it conditional: such requests bypass the
    /// cache (the caller is managing validation itself). A `Range` alone is answered by the
    /// cache when it holds the bytes (see `PartialContent.swift`).
    static let conditionalFields: [HTTPField.Name] = [.ifNoneMatch, .ifModifiedSince, .ifMatch, .ifUnmodifiedSince, .ifRange]

    /// Whether the request's `Range` (if any) is one the cache handles: a single byte range.
    static func rangeIsHandled(_ requestHeaders: HTTPFields) -> Bool {
        let values = requestHeaders[values: .range]
        return values.isEmpty || (values.count == 1 && ByteRangeRequest.parse(values[0]) != nil)
    }

    /// Whether the policy lets the cache handle `method` at all.
    package static func handles(_ method: HTTPRequest.Method, policy: CachePolicy) -> Bool {
        method == .get || method == .head || policy.cachesAnyMethod
    }

    /// What to do for a request, given the entry stored under its key (if any), at time `now`.
    package static func action(
        policy: CachePolicy, method: HTTPRequest.Method, requestHeaders: HTTPFields, entry: CacheEntry?, now: Date
    ) -> CacheAction {
        var action = self.networkOrStored(policy: policy, method: method, requestHeaders: requestHeaders, entry: entry, now: now)
        if let entry, !entry.isVariantIndex {
            // A stored response that does not hold the bytes asked for cannot answer alone; a
            // partial one is completed from the origin rather than revalidated.
            let wanted = requestHeaders[.range].flatMap(ByteRangeRequest.parse)
            switch action {
            case .serve, .serveStale:
                if !self.answers(entry, wanted: wanted) {
                    action = self.resumption(of: entry, wanted: wanted).map(CacheAction.resume) ?? .fetch
                }
            case .revalidate:
                if entry.status == 206 { action = self.resumption(of: entry, wanted: wanted).map(CacheAction.resume) ?? .fetch }
            case .fetch, .unavailable, .resume:
                break
            }
        }
        // RFC 9111 §5.2.1.7: only-if-cached never reaches the origin.
        if CacheControl(requestHeaders).has("only-if-cached") {
            switch action {
            case .serve: return action
            // Served as it is: no background request either.
            case .serveStale(let age, _): return .serve(age: age)
            case .revalidate, .fetch, .unavailable, .resume: return .unavailable
            }
        }
        return action
    }

    private static func networkOrStored(
        policy: CachePolicy, method: HTTPRequest.Method, requestHeaders: HTTPFields, entry: CacheEntry?, now: Date
    ) -> CacheAction {
        guard self.handles(method, policy: policy) else { return .fetch }
        guard let entry, self.matchesVary(entry, requestHeaders: requestHeaders) else { return .fetch }
        if self.conditionalFields.contains(where: { requestHeaders[$0] != nil }) || !self.rangeIsHandled(requestHeaders) { return .fetch }
        switch policy.mode {
        case .networkOnly, .reload:
            return .fetch
        case .cacheElseNetwork:
            return .serve(age: self.age(of: entry, now: now))
        case .cacheFor(let lifetime):
            let stored = Self.boundedAge(now.timeIntervalSince(entry.responseDate))
            if stored < lifetime.inSeconds { return .serve(age: stored) }
            if let window = policy.staleWhileRevalidate, stored - lifetime.inSeconds <= window.inSeconds {
                return .serveStale(age: stored, revalidate: self.conditions(for: entry))
            }
            return self.refetch(entry)
        case .http:
            let request = CacheControl(requestHeaders)
            if request.has("no-store") { return .fetch }
            let response = CacheControl(entry.headers)
            // A redirect's no-cache or no-store holds for where it led, as the response's own
            // no-cache does: not even a request's max-stale uses it without asking (§5.2.2.4).
            if request.has("no-cache") || self.pragmaNoCache(requestHeaders) || response.has("no-cache")
                || self.forbidsReuse(entry.freshnessLimit)
            {
                return self.refetch(entry)
            }
            let age = self.age(of: entry, now: now)
            let lifetime = self.freshnessLifetime(of: entry, heuristic: policy.heuristic)
            var fresh = age < lifetime
            // RFC 8246: a fresh `immutable` response is not revalidated because a reload asked for a younger one.
            if let maxAge = request.seconds("max-age"), age > maxAge, !(fresh && response.has("immutable")) { fresh = false }
            if let minFresh = request.seconds("min-fresh"), lifetime - age < minFresh { fresh = false }
            if fresh { return .serve(age: age) }
            if !response.has("must-revalidate"), request.has("max-stale") {
                // `max-stale` without a value accepts any staleness; an invalid value accepts none.
                let limit: TimeInterval =
                    request.directives["max-stale"].flatMap { $0 }.map { UntrustedNumber.deltaSeconds($0).map(TimeInterval.init) ?? 0 }
                    ?? .infinity
                if age - lifetime <= limit { return .serve(age: age) }
            }
            // RFC 5861 §3: within the window, serve the stale response and revalidate in the background.
            if age >= lifetime, request.seconds("max-age") == nil, request.seconds("min-fresh") == nil,
                age - lifetime
                    <= self.staleWindow(
                        "stale-while-revalidate", override: policy.staleWhileRevalidate, entry: entry, requestHeaders: requestHeaders)
            {
                return .serveStale(age: age, revalidate: self.conditions(for: entry))
            }
            return self.refetch(entry)
        }
    }

    private static func pragmaNoCache(_ requestHeaders: HTTPFields) -> Bool {
        requestHeaders[.cacheControl] == nil
            && requestHeaders[values: HTTPField.Name("Pragma")!].contains { $0.lowercased().contains("no-cache") }
    }

    /// How long past its freshness lifetime the entry may be served under `directive`
    /// (`stale-while-revalidate` or `stale-if-error`, RFC 5861): the policy's override, else the
    /// response's directive (and for `stale-if-error` the request's too, the larger), no further
    /// than the redirects that led to the entry allow (``CacheEntry/freshnessLimit``); none (-1),
    /// the policy's override too, when the response says `must-revalidate` or `no-cache`, a
    /// redirect that led to it forbade reuse, or the request says `no-cache` (RFC 9111 §4.2.4).
    package static func staleWindow(_ directive: String, override: Duration?, entry: CacheEntry, requestHeaders: HTTPFields) -> TimeInterval
    {
        let response = CacheControl(entry.headers)
        let request = CacheControl(requestHeaders)
        if response.has("must-revalidate") || response.has("no-cache") || request.has("no-cache") || self.pragmaNoCache(requestHeaders)
            || self.forbidsReuse(entry.freshnessLimit)
        {
            return -1
        }
        if let override { return override.inSeconds }
        var window = response.has(directive) ? response.seconds(directive) ?? 0 : -1
        if directive == "stale-if-error", request.has(directive) { window = max(window, request.seconds(directive) ?? 0) }
        // Reached through redirects that limit it: its own window speaks of its own URL, and
        // holds for the one it is kept for only as far as the redirects still allow; none when
        // they allow less than its own freshness (they granted no staleness).
        if window >= 0, let limit = entry.freshnessLimit {
            let own = self.freshnessLifetime(status: entry.status, headers: entry.headers, received: entry.responseDate)
            guard !limit.isNaN, limit >= own else { return -1 }
            window = min(window, limit - own)
        }
        return window
    }

    /// Whether a stored response may answer because the origin failed (RFC 5861 §4:
    /// `stale-if-error`), at time `now`.
    package static func servesStaleOnError(policy: CachePolicy, entry: CacheEntry, requestHeaders: HTTPFields, now: Date) -> TimeInterval? {
        guard self.mayStandIn(entry, requestHeaders: requestHeaders) else { return nil }
        let age: TimeInterval
        let lifetime: TimeInterval
        switch policy.mode {
        case .cacheFor(let duration):
            guard let window = policy.staleIfError else { return nil }
            age = Self.boundedAge(now.timeIntervalSince(entry.responseDate))
            lifetime = duration.inSeconds
            return age - lifetime <= window.inSeconds ? age : nil
        case .http:
            age = self.age(of: entry, now: now)
            lifetime = self.freshnessLifetime(of: entry, heuristic: policy.heuristic)
        case .networkOnly, .reload, .cacheElseNetwork:
            return nil
        }
        let window = self.staleWindow("stale-if-error", override: policy.staleIfError, entry: entry, requestHeaders: requestHeaders)
        return window >= 0 && age - lifetime <= window ? age : nil
    }

    /// Whether a stored entry may stand in for the origin's answer to this request at all, as
    /// the lookup requires of any entry it uses: a response (not a variant index) whose `Vary`
    /// the request matches, for a request without conditional fields of its own (an `If-Range`
    /// against another representation must get the whole new one, RFC 9110 §13.1.5) and with at
    /// most one range.
    static func mayStandIn(_ entry: CacheEntry, requestHeaders: HTTPFields) -> Bool {
        !entry.isVariantIndex && self.matchesVary(entry, requestHeaders: requestHeaders)
            && !self.conditionalFields.contains(where: { requestHeaders[$0] != nil }) && self.rangeIsHandled(requestHeaders)
    }

    /// Whether a stored response may answer because the origin could not be reached at all
    /// (RFC 9111 §4.2.4: a cache that is disconnected may serve stale unless an in-protocol
    /// directive forbids it), at time `now`: its age, or `nil`.
    package static func servesStaleWhenDisconnected(
        policy: CachePolicy, entry: CacheEntry, requestHeaders: HTTPFields, now: Date
    ) -> TimeInterval? {
        guard policy.servesStaleWhenDisconnected, self.mayStandIn(entry, requestHeaders: requestHeaders) else { return nil }
        let request = CacheControl(requestHeaders)
        if request.has("no-store") || request.has("no-cache") || self.pragmaNoCache(requestHeaders) { return nil }
        switch policy.mode {
        case .cacheFor:
            return Self.boundedAge(now.timeIntervalSince(entry.responseDate))
        case .http:
            let response = CacheControl(entry.headers)
            // RFC 9111 §5.2.2.2 (must-revalidate) and §5.2.2.4 (no-cache): never without a
            // successful validation, disconnected or not; nor when a redirect that led to the
            // response said so for the URL asked for.
            if response.has("must-revalidate") || response.has("no-cache") || self.forbidsReuse(entry.freshnessLimit) { return nil }
            let age = self.age(of: entry, now: now)
            let staleness = age - self.freshnessLifetime(of: entry, heuristic: policy.heuristic)
            if request.has("max-stale") {
                // §5.2.1.2: a stated limit binds; without a value any staleness is accepted.
                let limit: TimeInterval =
                    request.directives["max-stale"].flatMap { $0 }.map { UntrustedNumber.deltaSeconds($0).map(TimeInterval.init) ?? 0 }
                    ?? .infinity
                return staleness <= limit ? age : nil
            }
            // §5.2.1.1 and §5.2.1.3: a request with max-age or min-fresh does not want a stale response.
            if request.has("max-age") || request.has("min-fresh") { return nil }
            return age
        case .networkOnly, .reload, .cacheElseNetwork:
            return nil
        }
    }

    /// The conditional fields that revalidate the entry (RFC 9111 §4.3.1): its `ETag` in
    /// `If-None-Match` and its `Last-Modified` in `If-Modified-Since`, byte for byte as received.
    /// None for a response to another method than GET or HEAD (kept under
    /// ``CachePolicy/allowingAnyMethod()``): on a POST, `If-None-Match` asks the server to act only
    /// when nothing matches, and a server that honours it answers 412 (RFC 9110 §13.1.2), so such
    /// a response is fetched again, never revalidated.
    static func conditions(for entry: CacheEntry) -> HTTPFields {
        guard entry.method == "GET" || entry.method == "HEAD" else { return HTTPFields() }
        var conditions = HTTPFields()
        if let etag = entry.headers[values: .eTag].first { conditions[.ifNoneMatch] = etag }
        if let modified = entry.headers[values: .lastModified].first { conditions[.ifModifiedSince] = modified }
        return conditions
    }

    /// Revalidation when the entry has a validator, a full fetch otherwise.
    static func refetch(_ entry: CacheEntry) -> CacheAction {
        let conditions = self.conditions(for: entry)
        return conditions.isEmpty ? .fetch : .revalidate(conditions)
    }

    /// Whether a response received at `received` may be stored under the policy.
    package static func mayStore(
        policy: CachePolicy, method: HTTPRequest.Method, requestHeaders: HTTPFields, status: Int, responseHeaders: HTTPFields,
        received: Date = Date()
    ) -> Bool {
        guard self.handles(method, policy: policy) else { return false }
        if self.conditionalFields.contains(where: { requestHeaders[$0] != nil }) || !self.rangeIsHandled(requestHeaders) { return false }
        if status == 206, !self.mayStorePartial(method: method, responseHeaders: responseHeaders) { return false }
        let response = CacheControl(responseHeaders)
        if self.forbidsStoring(requestHeaders: requestHeaders, responseHeaders: responseHeaders, status: status) { return false }
        // RFC 9111 §5.2.2.3: with must-understand, stored only when the cache knows the status
        // code's rules.
        if response.has("must-understand"), !self.understoodStatuses.contains(status) { return false }
        if self.varyNames(responseHeaders) == nil { return false }
        switch policy.mode {
        case .networkOnly:
            return false
        case .cacheElseNetwork, .cacheFor, .reload:
            return (200..<300).contains(status)
        case .http:
            guard status >= 200, status != 304 else { return false }
            let explicit =
                response.has("public") || response.has("private") || response.has("max-age")
                || responseHeaders[.expires] != nil
            guard explicit || self.heuristicallyCacheable.contains(status) else { return false }
            // Storing a response that is stale at once and cannot be revalidated is useless.
            let hasValidator = responseHeaders[.eTag] != nil || responseHeaders[.lastModified] != nil
            // A response without `Date` is dated when it was received (RFC 9110 §6.6.1): an
            // `Expires` already past is stale at once.
            return hasValidator
                || self.freshnessLifetime(status: status, headers: responseHeaders, received: received, heuristic: policy.heuristic) > 0
        }
    }

    /// Whether `no-store` forbids keeping any of the response: in the request (RFC 9111
    /// §5.2.1.5) or in the response (§5.2.2.5), unless the response's `must-understand` names a
    /// status whose rules the cache knows (§5.2.2.3: then its `no-store` is for other caches).
    /// Also asked of a `304` or `HEAD` answer that would refresh a stored response.
    package static func forbidsStoring(requestHeaders: HTTPFields, responseHeaders: HTTPFields, status: Int) -> Bool {
        if CacheControl(requestHeaders).has("no-store") { return true }
        let response = CacheControl(responseHeaders)
        guard response.has("no-store") else { return false }
        return !(response.has("must-understand") && self.understoodStatuses.contains(status))
    }

    /// How long a response stays fresh (RFC 9111 §4.2.1): `max-age`, else `Expires` − `Date`,
    /// else the policy's heuristic (by default 10% of `Date` − `Last-Modified`, capped at a day)
    /// for a status that allows it, else 0. `s-maxage` is ignored: this is a private cache.
    /// An entry reached through a redirect lives at most as long as the redirect allowed
    /// (``CacheEntry/freshnessLimit``; a limit that is not a number allows nothing).
    package static func freshnessLifetime(of entry: CacheEntry, heuristic: HeuristicFreshness = .standard) -> TimeInterval {
        let own = self.freshnessLifetime(status: entry.status, headers: entry.headers, received: entry.responseDate, heuristic: heuristic)
        guard let limit = entry.freshnessLimit else { return own }
        return limit.isNaN ? 0 : min(own, max(0, limit))
    }

    /// The ``CacheEntry/freshnessLimit`` of a response reached through a redirect that said
    /// `no-cache` or `no-store`: below zero, so neither fresh nor served stale (any limit that is
    /// below zero or not a number means the same).
    package static let reuseForbidden: TimeInterval = -1

    /// Whether a limit forbids every reuse without asking the origin, stale answers included.
    package static func forbidsReuse(_ limit: TimeInterval?) -> Bool {
        guard let limit else { return false }
        return !(limit >= 0)
    }

    /// How much longer a response reached through these redirects may be served for the URL
    /// asked for, from `now`, at most; `nil` when they set no limit.
    ///
    /// A stored response is reused only for its own target URI (RFC 9111 §4); the cache sits
    /// above the redirects and keeps the final response for the URL asked for, so it is the
    /// redirects that say how long that holds: a redirect's own freshness (RFC 9111 §4.2.1, less
    /// its current age from its `Date` and `Age`, §4.2.3); ``reuseForbidden`` for one with
    /// `no-cache` or `no-store` (no freshness, and no stale answer either, §4.2.4: the origin
    /// said never to reuse where it leads without asking); for one without explicit freshness 0
    /// for a temporary redirect (`302`, `303`, `307`: cacheable only with explicit
    /// freshness, RFC 9110 §15.4.3, §15.4.4, §15.4.8) and no limit for a permanent one (`301`,
    /// `308`: heuristically cacheable, RFC 9110 §15.4.2, §15.4.9).
    package static func freshnessLimit(afterRedirects redirects: [HTTPResponse], now: Date) -> TimeInterval? {
        // (The smallest wins, so one redirect that forbids reuse forbids it for the chain.)
        var limit: TimeInterval?
        for redirect in redirects {
            let headers = redirect.headerFields
            let control = CacheControl(headers)
            let allowed: TimeInterval?
            if control.has("no-store") || control.has("no-cache") {
                allowed = Self.reuseForbidden
            } else if control.seconds("max-age") != nil || headers[.expires] != nil {
                let lifetime = self.freshnessLifetime(status: redirect.status.code, headers: headers, received: now)
                let standIn = CacheEntry(
                    url: "", method: "GET", partition: "", status: redirect.status.code, headers: headers, body: Data(),
                    requestDate: now, responseDate: now)
                allowed = max(0, lifetime - self.age(of: standIn, now: now))
            } else {
                allowed = self.heuristicallyCacheable.contains(redirect.status.code) ? nil : 0
            }
            if let allowed { limit = min(limit ?? allowed, allowed) }
        }
        return limit
    }

    /// The freshness lifetime of a response with this status and these fields, received at `received`
    /// (the stand-in for a missing `Date`).
    package static func freshnessLifetime(
        status: Int, headers: HTTPFields, received: Date, heuristic: HeuristicFreshness = .standard
    ) -> TimeInterval {
        let control = CacheControl(headers)
        if let maxAge = control.seconds("max-age") { return maxAge }
        let date = headers[.date].flatMap(HTTPDate.parseIgnoringCase) ?? received
        if let expires = headers[.expires] {
            // An invalid Expires (such as "0") means already expired (§5.3).
            guard let expiry = HTTPDate.parse(expires, ignoringCase: true) else { return 0 }
            // Capped as max-age is (2^31 seconds): with a `Date` in year 1 the difference is
            // centuries, and only a capped lifetime stays below the capped age (``ageLimit``).
            return UntrustedNumber.clamp(expiry.timeIntervalSince(date), to: TimeInterval(UntrustedNumber.deltaSecondsLimit)) ?? 0
        }
        guard self.heuristicallyCacheable.contains(status) || control.has("public"),
            let modified = headers[.lastModified].flatMap(HTTPDate.parseIgnoringCase)
        else { return 0 }
        return min(heuristic.limit.inSeconds, max(0, date.timeIntervalSince(modified) * heuristic.fraction))
    }

    /// The entry's current age (RFC 9111 §4.2.3), from its `Date` and `Age` fields and the
    /// times the request was sent and its response arrived.
    ///
    /// `Age` is delta-seconds (RFC 9111 §5.1): a value past 2^31 counts as 2^31, an invalid one is
    /// ignored. The result is never negative, never NaN and at most ``ageLimit``, whatever the
    /// stored dates say (a cache file is input too).
    package static func age(of entry: CacheEntry, now: Date) -> TimeInterval {
        let date = entry.headers[.date].flatMap(HTTPDate.parseIgnoringCase) ?? entry.responseDate
        let ageValue = self.ageField(entry.headers) ?? 0
        let apparentAge = self.boundedAge(entry.responseDate.timeIntervalSince(date))
        let responseDelay = self.boundedAge(entry.responseDate.timeIntervalSince(entry.requestDate))
        let correctedInitialAge = max(apparentAge, ageValue + responseDelay)
        let residentTime = self.boundedAge(now.timeIntervalSince(entry.responseDate))
        return self.boundedAge(correctedInitialAge + residentTime)
    }

    /// The value of the `Age` field (RFC 9111 §5.1): delta-seconds, read from the field's first
    /// member (`Age: 7200, 0` and two lines `Age: 7200`, `Age: 0` are both 7200); a value that is
    /// not delta-seconds (`7200.0`, `10a`, `-1`) is ignored; one past 2^31 is 2^31.
    package static func ageField(_ headers: HTTPFields) -> TimeInterval? {
        guard let line = headers[values: .age].first else { return nil }
        let first = FieldText.split(line, at: ",", maxSplits: 1)[0]
        return UntrustedNumber.deltaSeconds(FieldText.trimmed(first)).map(TimeInterval.init)
    }

    /// Fields meant for every recipient, which `Connection` cannot make hop-by-hop (RFC 9110
    /// §7.6.1: "Cache-Control is never appropriate as a connection option"): the cache decided on
    /// them, so the stored copy keeps them.
    static let endToEndFields: Set<String> = [
        "cache-control", "expires", "date", "age", "etag", "last-modified", "vary", "pragma", "content-type",
        "content-encoding", "content-length", "content-range", "content-location",
    ]

    /// The fields of a response as stored (RFC 9111 §3.1): without hop-by-hop and proxy fields,
    /// and without the fields its `Connection` names (but for ``endToEndFields``: a `Connection:
    /// cache-control` cannot turn a stored `no-cache` into heuristic freshness).
    package static func storable(_ headers: HTTPFields) -> HTTPFields {
        var named = self.unstoredFields
        for value in headers[values: .connection] {
            for part in FieldText.split(value, at: ",") {
                let name = FieldText.token(part)
                if !self.endToEndFields.contains(name) { named.insert(name) }
            }
        }
        guard headers.contains(where: { named.contains($0.name.canonicalName) }) else { return headers }
        return HTTPFields(headers.filter { !named.contains($0.name.canonicalName) })
    }

    /// The largest age the cache reports: 2^32 seconds (two of RFC 9111's 2^31 caps, so a capped
    /// `Age` plus time in the cache still compares as older than any capped lifetime).
    package static let ageLimit = TimeInterval(2 * UntrustedNumber.deltaSecondsLimit)

    /// A time difference as an age: NaN and negative are 0, anything past ``ageLimit`` is that.
    static func boundedAge(_ seconds: TimeInterval) -> TimeInterval {
        UntrustedNumber.clamp(seconds, to: self.ageLimit) ?? 0
    }

    /// The lower-cased field names a response's `Vary` lists; `nil` for `Vary: *` (never reusable),
    /// and for a member that is no field name (`Cookie Authorization`, `"Cookie"`, `X-User;`):
    /// RFC 9110 §12.5.5 allows only `*` and field names, and a member the cache cannot compare
    /// would otherwise match every request, handing one user's variant to another.
    package static func varyNames(_ responseHeaders: HTTPFields) -> [String]? {
        var names: [String] = []
        for value in responseHeaders[values: .vary] {
            for part in FieldText.split(value, at: ",") {
                let name = FieldText.token(part)
                if name.isEmpty { continue }
                if name == "*" || HTTPField.Name(name) == nil { return nil }
                if !names.contains(name) { names.append(name) }
            }
        }
        return names
    }

    /// Whether a `304` or `HEAD` answer names other fields in `Vary` than the stored response:
    /// the stored request's values of the new ones are unknown, so the refreshed response could
    /// be chosen for a request it does not fit (RFC 9111 §4.1). An answer without `Vary` changes
    /// nothing.
    package static func changesVary(_ answer: HTTPFields, of entry: CacheEntry) -> Bool {
        guard answer[.vary] != nil else { return false }
        guard let new = self.varyNames(answer), let old = self.varyNames(entry.headers) else { return true }
        return Set(new) != Set(old)
    }

    /// The request's values of the fields the response varies on, to store with the entry.
    package static func varyingFields(responseHeaders: HTTPFields, requestHeaders: HTTPFields) -> [String: String?] {
        var fields: [String: String?] = [:]
        for name in self.varyNames(responseHeaders) ?? [] {
            fields[name] = self.value(of: name, in: requestHeaders)
        }
        return fields
    }

    /// Whether a request selects the stored variant: each field the response varies on has the
    /// same value in the request as in the stored request, as ``VaryValues`` normalises them.
    package static func matchesVary(_ entry: CacheEntry, requestHeaders: HTTPFields) -> Bool {
        guard self.varyNames(entry.headers) != nil else { return false }
        for (name, stored) in entry.varyingFields where self.value(of: name, in: requestHeaders) != stored {
            return false
        }
        return true
    }

    /// What the cache keeps and compares of a field a response varies on: the SHA-256 digest of
    /// its value as ``VaryValues`` normalises it, never the value itself. A response may vary on
    /// a credential (`Vary: Authorization`, `Cookie`), which would otherwise sit in clear in
    /// every stored variant's key and entry, on disk for a disk store (RFC 9111 §7).
    private static func value(of name: String, in fields: HTTPFields) -> String? {
        VaryValues.value(of: name, in: fields).map { "sha256:" + SHA256.hex(Data($0.utf8)) }
    }

    /// The stored entry after a `304 Not Modified` (RFC 9111 §4.3.4), or a HEAD answer that
    /// updates it (§4.3.5): their header fields replace the stored ones, except the fields that
    /// describe the stored body's bytes (framing, and `Content-Encoding`: the body is stored
    /// decoded, and a HEAD or 304 keeps the coding of the representation it describes); the
    /// body stays, the times are the new exchange's.
    ///
    /// A 304 without `Date` is dated at receipt (RFC 9110 §6.6.1 MUST): the stored `Date` goes,
    /// and the age counts from `responseDate`. A 304 without `Age` comes from the origin (a cache
    /// that answers sends one, RFC 9111 §5.1), which has just validated the response: the
    /// stored `Age`, which spoke of the earlier exchange, goes too.
    package static func refreshed(_ entry: CacheEntry, notModified: HTTPFields, requestDate: Date, responseDate: Date) -> CacheEntry {
        var entry = entry
        let excluded: Set<HTTPField.Name> = [.contentLength, .contentRange, .contentEncoding]
        var replaced = Set<HTTPField.Name>()
        for field in self.storable(notModified) where !excluded.contains(field.name) {
            if replaced.insert(field.name).inserted { entry.headers[field.name] = nil }
            entry.headers.append(field)
        }
        if notModified[.date] == nil { entry.headers[.date] = nil }
        if notModified[.age] == nil { entry.headers[.age] = nil }
        entry.requestDate = requestDate
        entry.responseDate = responseDate
        return entry
    }

    /// Whether a method is safe (RFC 9110 §9.2.1): its answers invalidate nothing.
    static func isSafe(_ method: HTTPRequest.Method) -> Bool {
        switch method {
        case .get, .head, .options, .trace: return true
        default: return false
        }
    }

    /// Whether a `304` identifies the stored response for an update (RFC 9111 §4.3.4): a strong
    /// `ETag` must be the stored one's, strong too; a weak one must match it by weak comparison
    /// (RFC 9110 §8.8.3.2); without an `ETag`, a `Last-Modified` must equal the stored one (one
    /// with a `Last-Modified` identifies no stored response without one). A 304
    /// that carries no validator identifies the one stored response it answers.
    package static func notModified(_ fields: HTTPFields, identifies entry: CacheEntry) -> Bool {
        if let tag = fields[values: .eTag].first {
            guard let stored = entry.headers[values: .eTag].first else { return false }
            let weak = "W/"
            if !tag.hasPrefix(weak) { return !stored.hasPrefix(weak) && tag.utf8.elementsEqual(stored.utf8) }
            let opaque = { (text: String) in text.hasPrefix(weak) ? String(text.dropFirst(weak.count)) : text }
            return opaque(tag).utf8.elementsEqual(opaque(stored).utf8)
        }
        if let modified = fields[values: .lastModified].first {
            // A date the stored response does not carry identifies another response.
            guard let stored = entry.headers[values: .lastModified].first else { return false }
            return modified.utf8.elementsEqual(stored.utf8)
        }
        return true
    }

    /// Whether a response to `method` invalidates the stored entries for its URL (RFC 9111 §4.4):
    /// an unsafe method answered with a non-error status, unless the policy caches the method.
    package static func invalidates(method: HTTPRequest.Method, status: Int, policy: CachePolicy) -> Bool {
        guard !Self.isSafe(method), !policy.cachesAnyMethod else { return false }
        return (200..<400).contains(status)
    }
}
