import Foundation
import HTTPTypes

/// What the cache does for one request.
package enum CacheAction: Sendable, Equatable {
    /// Answer with the stored response, which is this old.
    case serve(age: TimeInterval)
    /// Ask the server whether the stored response is still current, with these conditional fields.
    case revalidate(HTTPFields)
    /// Ask the server for a full response.
    case fetch
}

/// The cache's decisions as pure functions: values in, a decision out, no I/O and no clock.
///
/// The rules are those of a private cache in RFC 9111, plus the app-chosen policies of
/// ``CachePolicy``.
package enum CacheRules {
    /// Status codes whose responses may be given heuristic freshness (RFC 9110 §15.1).
    static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]
    /// The largest heuristic freshness lifetime given to a response with only `Last-Modified`.
    static let heuristicLimit: TimeInterval = 24 * 3600
    /// Header fields a request may carry that make it conditional or partial: such requests
    /// bypass the cache (the caller is managing validation itself).
    static let conditionalFields: [HTTPField.Name] = [.ifNoneMatch, .ifModifiedSince, .ifMatch, .ifUnmodifiedSince, .ifRange, .range]

    /// Whether the policy lets the cache handle `method` at all.
    package static func handles(_ method: HTTPRequest.Method, policy: CachePolicy) -> Bool {
        method == .get || method == .head || policy.cachesAnyMethod
    }

    /// What to do for a request, given the entry stored under its key (if any), at time `now`.
    package static func action(
        policy: CachePolicy, method: HTTPRequest.Method, requestHeaders: HTTPFields, entry: CacheEntry?, now: Date
    ) -> CacheAction {
        guard self.handles(method, policy: policy) else { return .fetch }
        guard let entry, self.matchesVary(entry, requestHeaders: requestHeaders) else { return .fetch }
        if self.conditionalFields.contains(where: { requestHeaders[$0] != nil }) { return .fetch }
        let age = self.age(of: entry, now: now)
        switch policy.mode {
        case .networkOnly, .reload:
            return .fetch
        case .cacheElseNetwork:
            return .serve(age: age)
        case .cacheFor(let lifetime):
            let stored = Self.boundedAge(now.timeIntervalSince(entry.responseDate))
            if stored < lifetime.inSeconds { return .serve(age: stored) }
            return self.refetch(entry)
        case .http:
            let request = CacheControl(requestHeaders)
            if request.has("no-store") { return .fetch }
            let response = CacheControl(entry.headers)
            let pragmaNoCache = requestHeaders[.cacheControl] == nil
                && (requestHeaders[values: HTTPField.Name("Pragma")!].contains { $0.lowercased().contains("no-cache") })
            if request.has("no-cache") || pragmaNoCache || response.has("no-cache") {
                return self.refetch(entry)
            }
            let lifetime = self.freshnessLifetime(of: entry)
            var fresh = age < lifetime
            if let maxAge = request.seconds("max-age"), age > maxAge { fresh = false }
            if let minFresh = request.seconds("min-fresh"), lifetime - age < minFresh { fresh = false }
            if fresh { return .serve(age: age) }
            if !response.has("must-revalidate"), request.has("max-stale") {
                // `max-stale` without a value accepts any staleness; an invalid value accepts none.
                let limit: TimeInterval = request.directives["max-stale"].flatMap { $0 }.map { UntrustedNumber.deltaSeconds($0).map(TimeInterval.init) ?? 0 } ?? .infinity
                if age - lifetime <= limit { return .serve(age: age) }
            }
            return self.refetch(entry)
        }
    }

    /// Revalidation when the entry has a validator, a full fetch otherwise.
    private static func refetch(_ entry: CacheEntry) -> CacheAction {
        var conditions = HTTPFields()
        if let etag = entry.headers[.eTag] { conditions[.ifNoneMatch] = etag }
        if let modified = entry.headers[.lastModified] { conditions[.ifModifiedSince] = modified }
        return conditions.isEmpty ? .fetch : .revalidate(conditions)
    }

    /// Whether a response may be stored under the policy.
    package static func mayStore(
        policy: CachePolicy, method: HTTPRequest.Method, requestHeaders: HTTPFields, status: Int, responseHeaders: HTTPFields
    ) -> Bool {
        guard self.handles(method, policy: policy) else { return false }
        if self.conditionalFields.contains(where: { requestHeaders[$0] != nil }) { return false }
        let request = CacheControl(requestHeaders)
        let response = CacheControl(responseHeaders)
        if request.has("no-store") || response.has("no-store") { return false }
        if self.varyNames(responseHeaders) == nil { return false }
        switch policy.mode {
        case .networkOnly:
            return false
        case .cacheElseNetwork, .cacheFor, .reload:
            return (200..<300).contains(status) && status != 206
        case .http:
            guard status >= 200, status != 206, status != 304 else { return false }
            let explicit = response.has("public") || response.has("private") || response.has("max-age")
                || responseHeaders[.expires] != nil
            guard explicit || self.heuristicallyCacheable.contains(status) else { return false }
            // Storing a response that is stale at once and cannot be revalidated is useless.
            let hasValidator = responseHeaders[.eTag] != nil || responseHeaders[.lastModified] != nil
            return hasValidator || self.freshnessLifetime(status: status, headers: responseHeaders, received: .distantPast) > 0
        }
    }

    /// How long a response stays fresh (RFC 9111 §4.2.1): `max-age`, else `Expires` − `Date`,
    /// else 10% of `Date` − `Last-Modified` (capped at a day) when heuristics are allowed, else 0.
    /// `s-maxage` is ignored: this is a private cache.
    package static func freshnessLifetime(of entry: CacheEntry) -> TimeInterval {
        self.freshnessLifetime(status: entry.status, headers: entry.headers, received: entry.responseDate)
    }

    /// The freshness lifetime of a response with this status and these fields, received at `received`
    /// (the stand-in for a missing `Date`).
    static func freshnessLifetime(status: Int, headers: HTTPFields, received: Date) -> TimeInterval {
        let control = CacheControl(headers)
        if let maxAge = control.seconds("max-age") { return maxAge }
        let date = headers[.date].flatMap(HTTPDate.parse) ?? received
        if let expires = headers[.expires] {
            // An invalid Expires (such as "0") means already expired (§5.3).
            guard let expiry = HTTPDate.parse(expires) else { return 0 }
            return max(0, expiry.timeIntervalSince(date))
        }
        guard self.heuristicallyCacheable.contains(status) || control.has("public"),
              let modified = headers[.lastModified].flatMap(HTTPDate.parse)
        else { return 0 }
        return min(self.heuristicLimit, max(0, date.timeIntervalSince(modified) / 10))
    }

    /// The entry's current age (RFC 9111 §4.2.3), from its `Date` and `Age` fields and the
    /// times the request was sent and its response arrived.
    ///
    /// `Age` is delta-seconds (RFC 9111 §5.1): a value past 2^31 counts as 2^31, an invalid one is
    /// ignored. The result is never negative, never NaN and at most ``ageLimit``, whatever the
    /// stored dates say (a cache file is input too).
    package static func age(of entry: CacheEntry, now: Date) -> TimeInterval {
        let date = entry.headers[.date].flatMap(HTTPDate.parse) ?? entry.responseDate
        let ageValue = entry.headers[.age].flatMap { UntrustedNumber.deltaSeconds($0.trimmingCharacters(in: .whitespaces)) }.map(TimeInterval.init) ?? 0
        let apparentAge = self.boundedAge(entry.responseDate.timeIntervalSince(date))
        let responseDelay = self.boundedAge(entry.responseDate.timeIntervalSince(entry.requestDate))
        let correctedInitialAge = max(apparentAge, ageValue + responseDelay)
        let residentTime = self.boundedAge(now.timeIntervalSince(entry.responseDate))
        return self.boundedAge(correctedInitialAge + residentTime)
    }

    /// The largest age the cache reports: 2^32 seconds (two of RFC 9111's 2^31 caps, so a capped
    /// `Age` plus time in the cache still compares as older than any capped lifetime).
    package static let ageLimit = TimeInterval(2 * UntrustedNumber.deltaSecondsLimit)

    /// A time difference as an age: NaN and negative are 0, anything past ``ageLimit`` is that.
    static func boundedAge(_ seconds: TimeInterval) -> TimeInterval {
        UntrustedNumber.clamp(seconds, to: self.ageLimit) ?? 0
    }

    /// The lower-cased field names a response's `Vary` lists; `nil` for `Vary: *` (never reusable).
    package static func varyNames(_ responseHeaders: HTTPFields) -> [String]? {
        var names: [String] = []
        for value in responseHeaders[values: .vary] {
            for part in value.split(separator: ",") {
                let name = part.trimmingCharacters(in: .whitespaces).lowercased()
                if name == "*" { return nil }
                if !name.isEmpty, !names.contains(name) { names.append(name) }
            }
        }
        return names
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
    /// same value (after whitespace normalisation) in the request as in the stored request.
    package static func matchesVary(_ entry: CacheEntry, requestHeaders: HTTPFields) -> Bool {
        guard self.varyNames(entry.headers) != nil else { return false }
        for (name, stored) in entry.varyingFields where self.value(of: name, in: requestHeaders) != stored {
            return false
        }
        return true
    }

    private static func value(of name: String, in fields: HTTPFields) -> String? {
        guard let fieldName = HTTPField.Name(name) else { return nil }
        let values = fields[values: fieldName]
        guard !values.isEmpty else { return nil }
        return values.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ",") }
            .joined(separator: ",")
    }

    /// The stored entry after a `304 Not Modified` (RFC 9111 §4.3.4): the 304's header fields
    /// replace the stored ones (except framing fields), the body stays, the times are the new exchange's.
    package static func refreshed(_ entry: CacheEntry, notModified: HTTPFields, requestDate: Date, responseDate: Date) -> CacheEntry {
        var entry = entry
        let excluded: Set<HTTPField.Name> = [.contentLength, .transferEncoding, .connection, .init("Keep-Alive")!]
        var replaced = Set<HTTPField.Name>()
        for field in notModified where !excluded.contains(field.name) {
            if replaced.insert(field.name).inserted { entry.headers[field.name] = nil }
            entry.headers.append(field)
        }
        entry.requestDate = requestDate
        entry.responseDate = responseDate
        return entry
    }

    /// Whether a response to `method` invalidates the stored entries for its URL (RFC 9111 §4.4):
    /// an unsafe method answered with a non-error status, unless the policy caches the method.
    package static func invalidates(method: HTTPRequest.Method, status: Int, policy: CachePolicy) -> Bool {
        let safe: Set<HTTPRequest.Method> = [.get, .head, .options, .trace]
        guard !safe.contains(method), !policy.cachesAnyMethod else { return false }
        return (200..<400).contains(status)
    }
}
