import Foundation
import HTTPTypes

/// Partial content in the cache (RFC 9111 §3.3–3.4, §4.3.4; RFC 9110 §14): `206` responses are
/// stored with their range, combined with later ones of the same representation, and ranges are
/// answered from what is stored — asking the origin only for the bytes that are missing.
///
/// Choices: one range per request (a `Range` with several is passed to the origin untouched and
/// its answer is not stored); a partial response is stored only when it has a strong `ETag` or a
/// `Last-Modified`, no content coding, no `Vary`, and came through no wire protocol (REST).
extension CacheRules {
    /// Whether a `206` response may be stored as a partial entry.
    static func mayStorePartial(method: HTTPRequest.Method, responseHeaders: HTTPFields) -> Bool {
        guard method == .get, let range = responseHeaders[values: .contentRange].first, ContentRangeHeader.parse(range) != nil,
            responseHeaders[values: .contentRange].count == 1, responseHeaders[.vary] == nil
        else { return false }
        if let coding = responseHeaders[.contentEncoding], coding.lowercased() != "identity" { return false }
        return self.strongValidator(responseHeaders) != nil
    }

    /// The response's strong validator: a strong `ETag`, or — when it has no `ETag` at all — a
    /// `Last-Modified` at least 60 seconds before its `Date` (RFC 9110 §8.8.2.2); `nil` otherwise
    /// (a weak `ETag` makes `Last-Modified` unusable for `If-Range` too, RFC 9110 §13.1.5).
    static func strongValidator(_ headers: HTTPFields) -> String? {
        if let etag = headers[values: .eTag].first { return Validators.strongETag(etag) }
        guard let text = headers[values: .lastModified].first, let modified = HTTPDate.parse(text, ignoringCase: true),
            let date = headers[values: .date].first.flatMap(HTTPDate.parseIgnoringCase),
            date.timeIntervalSince(modified) >= 60
        else { return nil }
        return text
    }

    /// Whether two responses carry the same representation: the same strong validator (RFC 9111 §3.4).
    static func sameRepresentation(_ a: HTTPFields, _ b: HTTPFields) -> Bool {
        guard let validatorA = self.strongValidator(a), let validatorB = self.strongValidator(b) else { return false }
        return validatorA.utf8.elementsEqual(validatorB.utf8)
    }

    /// The bytes an entry holds and where they lie: all of them for a complete response, the
    /// `Content-Range` for a partial one; `nil` for an empty or damaged entry.
    static func piece(of entry: CacheEntry) -> PartialBody? {
        if entry.status == 206 {
            guard let text = entry.headers[values: .contentRange].first, let range = ContentRangeHeader.parse(text) else { return nil }
            return PartialBody(range, bytes: entry.body)
        }
        // Only a 200 is a representation whose bytes a range may be taken from (never an error page).
        guard entry.status == 200, !entry.body.isEmpty else { return nil }
        return PartialBody(range: 0...(entry.body.count - 1), bytes: entry.body, completeLength: entry.body.count)
    }

    /// The positions a request's `Range` asks for, given what is known of the representation.
    static func positions(_ wanted: ByteRangeRequest, in piece: PartialBody) -> ClosedRange<Int>? {
        if let length = piece.completeLength { return wanted.resolve(length: length) }
        // Unknown length: only an explicit first and last position can be placed.
        if case .closed(let first, let last) = wanted.spec { return first...last }
        return nil
    }

    /// Whether the entry alone answers the request: a complete response answers a request
    /// without `Range` and any satisfiable range; a partial one only ranges inside it.
    static func answers(_ entry: CacheEntry, wanted: ByteRangeRequest?) -> Bool {
        guard let wanted else { return entry.status != 206 }
        guard let piece = self.piece(of: entry), let positions = self.positions(wanted, in: piece) else { return false }
        return piece.slice(positions) != nil
    }

    /// The request for only the missing bytes, when the entry holds the start of what is wanted:
    /// `Range` from the first missing byte, and `If-Range` with the entry's validator so that a
    /// changed representation comes back whole (RFC 9110 §13.1.5). `nil`: ask as the caller did.
    static func resumption(of entry: CacheEntry, wanted: ByteRangeRequest?) -> HTTPFields? {
        // The complete length must be known: otherwise the missing bytes may be none, and the
        // origin would answer 416 to a caller who never sent a range.
        guard entry.status == 206, let piece = self.piece(of: entry), piece.completeLength != nil,
            let validator = self.strongValidator(entry.headers)
        else { return nil }
        let next = piece.range.upperBound + 1
        let range: String
        if let wanted {
            guard let positions = self.positions(wanted, in: piece), piece.range.contains(positions.lowerBound),
                positions.upperBound > piece.range.upperBound
            else { return nil }
            range = "bytes=\(next)-\(positions.upperBound)"
        } else {
            guard piece.range.lowerBound == 0 else { return nil }
            range = "bytes=\(next)-"
        }
        return [.range: range, .ifRange: validator]
    }

    /// The response the entry gives a request: the whole stored response, or a `206` with the
    /// wanted bytes and their `Content-Range`; `nil` when it does not hold them.
    static func answer(from entry: CacheEntry, wanted: ByteRangeRequest?) -> (status: Int, headers: HTTPFields, body: Data)? {
        guard let wanted else {
            return entry.status == 206 ? nil : (entry.status, entry.headers, entry.body)
        }
        guard let piece = self.piece(of: entry), let positions = self.positions(wanted, in: piece),
            let bytes = piece.slice(positions),
            let contentRange = ContentRangeHeader(range: positions, completeLength: piece.completeLength)
        else { return nil }
        var headers = entry.headers
        headers[.contentRange] = contentRange.header
        headers[.contentLength] = String(bytes.count)
        return (206, headers, bytes)
    }

    /// The entry after a new `206` arrives: combined with the stored one when both carry the same
    /// representation and their ranges touch, else the new part alone. A combination that covers
    /// every byte becomes a complete `200` response. Combined, the stored fields are updated as
    /// RFC 9111 §3.4 asks (by §3.2): the new part's fields replace those of the same name, and the
    /// stored ones it lacks stay — a 206 that answers `If-Range` need not repeat `Content-Type`
    /// or `Last-Modified` (RFC 9110 §15.3.7).
    static func combined(stored: CacheEntry?, partial headers: HTTPFields, body: Data, template: CacheEntry) -> CacheEntry? {
        guard let text = headers[values: .contentRange].first, let range = ContentRangeHeader.parse(text),
            var piece = PartialBody(range, bytes: body)
        else { return nil }
        var fields = self.storable(headers)
        if let stored, !stored.isVariantIndex, self.sameRepresentation(stored.headers, headers),
            let old = self.piece(of: stored), let union = old.merged(with: piece)
        {
            piece = union
            var merged = stored.headers
            var replaced = Set<HTTPField.Name>()
            for field in fields {
                if replaced.insert(field.name).inserted { merged[field.name] = nil }
                merged.append(field)
            }
            // As for a 304 (`CacheRules.refreshed`): the combined response dates from this exchange.
            if headers[.date] == nil { merged[.date] = nil }
            if headers[.age] == nil { merged[.age] = nil }
            fields = merged
        }
        var entry = template
        fields[.contentLength] = String(piece.bytes.count)
        if piece.isComplete {
            fields[.contentRange] = nil
            entry.status = 200
        } else {
            guard let header = ContentRangeHeader(range: piece.range, completeLength: piece.completeLength) else { return nil }
            fields[.contentRange] = header.header
            entry.status = 206
        }
        entry.headers = fields
        entry.body = piece.bytes
        return entry
    }
}

extension ResponseCache {
    /// After the network answered a request the cache planned for (a range, or the rest of a
    /// partial entry): the response built from the entry as now stored, when the stored entry
    /// is the representation that just arrived and holds what the caller asked for.
    func answerAfterNetwork(_ run: CacheRun, outcome: Outcome) -> Outcome? {
        let status = outcome.response.statusCode
        guard run.policy.mode != .networkOnly, run.policy.mode != .reload,
            status == 206 || outcome.source == .revalidated, let key = run.entryKey ?? run.key,
            let entry = self.entry(forKey: key), !entry.isVariantIndex,
            CacheRules.sameRepresentation(entry.headers, outcome.response.head.headerFields),
            let answer = CacheRules.answer(from: entry, wanted: run.wantedRange)
        else { return nil }
        var result = outcome
        result.response.head.status = .init(code: answer.status)
        result.response.head.headerFields = answer.headers
        result.response.body = .data(answer.body)
        result.payload = nil
        result.cacheKey = nil
        return result
    }
}
