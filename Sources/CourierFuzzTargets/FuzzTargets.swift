import Courier
import Foundation
import HTTPTypes

/// Fuzz targets for every parser of untrusted bytes: each takes any bytes and checks, with
/// `precondition`, what must hold for every input (a typed error or a value, a round trip that
/// gives the same value, a bound that is kept). A crash is a finding.
///
/// `CourierFuzz` runs them under libFuzzer (`scripts/fuzz.sh`) and replays corpus files; the
/// test suite replays the committed corpora (`Fuzz/corpus/<target>/`).
package enum FuzzTargets {
    /// A named target.
    package struct Target: Sendable {
        package let name: String
        package let run: @Sendable (Data) -> Void
    }

    /// Every target, by name.
    package static let all: [Target] = [
        Target(name: "envelope", run: envelope),
        Target(name: "jsonrpc", run: jsonRPC),
        Target(name: "jsonrpc-batch", run: jsonRPCBatch),
        Target(name: "sse", run: serverSentEvents),
        Target(name: "multipart", run: multipart),
        Target(name: "cache-headers", run: cacheHeaders),
        Target(name: "disk-cache-entry", run: diskCacheEntry),
        Target(name: "content-range", run: contentRange),
        Target(name: "oauth-token", run: oauthToken),
        Target(name: "cookie", run: cookie),
        Target(name: "content-decoding", run: contentDecoding),
    ]

    package static func target(named name: String) -> Target? {
        self.all.first { $0.name == name }
    }

    /// Fails unless `body` returns or throws a `CourierError`.
    private static func expectTyped(_ body: () throws -> Void) {
        do {
            try body()
        } catch is CourierError {
        } catch {
            preconditionFailure("an error that is not a CourierError: \(error)")
        }
    }

    private static let call = WireCall(operation: "fuzz", isNotification: false, id: 1)

    /// An envelope response (`{"code": 0, "msg": …, "data": …}`) under HTTP 200.
    static func envelope(_ data: Data) {
        let envelope = EnvelopeProtocol(successCodes: [0, "OK"], events: [1001: "sessionExpired"])
        self.expectTyped { _ = try envelope.unbox(data, head: HTTPResponse(status: .ok), call: self.call) }
    }

    /// A single JSON-RPC 2.0 response to call id 1.
    static func jsonRPC(_ data: Data) {
        self.expectTyped { _ = try JSONRPCProtocol().unbox(data, head: HTTPResponse(status: .ok), call: self.call) }
    }

    /// A JSON-RPC 2.0 batch response, and each call's answer from it.
    static func jsonRPCBatch(_ data: Data) {
        self.expectTyped {
            let results = try JSONRPCBatchResults(parsing: data, decoder: JSONDecoder())
            for id in -1...3 {
                _ = results[JSONRPCBatchItem<JSONValue>(id: id)]
                _ = results[JSONRPCBatchItem<Int>(id: id)]
            }
        }
    }

    /// A `text/event-stream` body: the first byte picks the chunk size. The lines must not depend
    /// on where the chunks split, and no line or event may pass its limit.
    static func serverSentEvents(_ data: Data) {
        let maxLine = 64
        let maxEvent = 256
        let step = Int(data.first ?? 0) % 16 + 1
        let body = data.dropFirst()
        var whole = LineSplitter(maxLineLength: maxLine)
        let wholeLines: [String]? = try? whole.feed(Data(body)) + [whole.finish()].compactMap { $0 }
        var pieces = LineSplitter(maxLineLength: maxLine)
        var pieceLines: [String] = []
        var parser = ServerSentEventParser(maxEventSize: maxEvent)
        do {
            var index = body.startIndex
            while index < body.endIndex {
                let end = min(index + step, body.endIndex)
                pieceLines += try pieces.feed(Data(body[index..<end]))
                index = end
            }
            if let last = pieces.finish() { pieceLines.append(last) }
        } catch let error as CourierError {
            precondition(error.kind == .responseTooLarge, "a line error of kind \(error.kind)")
            precondition(wholeLines == nil, "fed whole the body splits, in pieces it fails")
            return
        } catch {
            preconditionFailure("an error that is not a CourierError: \(error)")
        }
        precondition(wholeLines == pieceLines, "the lines depend on the chunking: \(String(describing: wholeLines)) vs \(pieceLines)")
        for line in pieceLines {
            // Each invalid byte sequence becomes one U+FFFD: never more scalars than bytes.
            precondition(line.unicodeScalars.count <= maxLine, "a line longer than the limit")
            do {
                if let event = try parser.feed(line) {
                    precondition(event.data.utf8.count <= maxEvent, "an event longer than the limit")
                }
            } catch let error as CourierError {
                precondition(error.kind == .responseTooLarge && error.limit == maxEvent, "an event error of kind \(error.kind)")
                return
            } catch {
                preconditionFailure("an error that is not a CourierError: \(error)")
            }
        }
    }

    /// Multipart form fields from untrusted text (NUL-separated name, value, file name, content
    /// type): a part's header block is always its own lines, never a field injected by CR or LF.
    static func multipart(_ data: Data) {
        let fields = data.split(separator: 0, maxSplits: 3, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        let name = fields.first ?? ""
        let value = fields.count > 1 ? fields[1] : ""
        let fileName = fields.count > 2 ? fields[2] : "f"
        let contentType = fields.count > 3 ? fields[3] : "text/plain"
        var form = MultipartForm()
        form.add(name: name, value: value)
        let accepted = (try? form.addData(Data(value.utf8), name: name, fileName: fileName, contentType: contentType)) != nil
        precondition(accepted == !contentType.unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" }, "content type check")
        for header in form.partHeaders {
            // Lines by bytes (a name may start with a combining mark, which String comparison
            // would join to the quote before it).
            let lines = Self.crlfLines(Array(header))
            // "--boundary", Content-Disposition, optional Content-Type, "", "" (after the blank line).
            precondition(lines.count == 4 || lines.count == 5, "a part header with \(lines.count) lines")
            precondition(lines[0] == Array("--\(form.boundary)".utf8), "a part header that does not start with the boundary")
            precondition(lines[1].starts(with: Array("Content-Disposition: form-data; name=\"".utf8)), "the disposition line moved")
            for line in lines {
                precondition(!line.contains(13) && !line.contains(10), "a bare CR or LF in a part header")
            }
        }
    }

    /// Bytes split at each CR LF.
    private static func crlfLines(_ bytes: [UInt8]) -> [[UInt8]] {
        var lines: [[UInt8]] = [[]]
        var index = 0
        while index < bytes.count {
            if bytes[index] == 13, index + 1 < bytes.count, bytes[index + 1] == 10 {
                lines.append([])
                index += 2
            } else {
                lines[lines.count - 1].append(bytes[index])
                index += 1
            }
        }
        return lines
    }

    /// Caching fields: lines of the input become `Cache-Control`, `Vary`, `Age`, `Date`,
    /// `Expires` and `Last-Modified` in turn. Lifetimes and ages are finite and not negative;
    /// a date that parses formats back to the same instant.
    static func cacheHeaders(_ data: Data) {
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let names: [HTTPField.Name] = [.cacheControl, .vary, .age, .date, .expires, .lastModified]
        var fields = HTTPFields()
        for (name, line) in zip(names, lines) { fields.append(HTTPField(name: name, value: line)) }
        _ = CacheControl(fields)
        _ = CacheRules.varyNames(fields)
        if let age = CacheRules.ageField(fields) {
            precondition(age.isFinite && age >= 0, "age \(age)")
        }
        let received = Date(timeIntervalSince1970: 1_800_000_000)
        for status in [200, 203, 301, 404] {
            let lifetime = CacheRules.freshnessLifetime(status: status, headers: fields, received: received)
            precondition(lifetime.isFinite && lifetime >= 0, "lifetime \(lifetime)")
        }
        for line in lines {
            let lenient = HTTPDate.parse(line, ignoringCase: true)
            guard let date = HTTPDate.parse(line) else { continue }
            precondition(date.timeIntervalSince1970.isFinite, "a date that is not finite")
            // Every form names a whole second.
            precondition(date.timeIntervalSince1970.rounded() == date.timeIntervalSince1970, "a fractional date")
            // Ignoring case only adds dates: a date read strictly reads the same.
            precondition(lenient == date, "a date read differently when ignoring case")
        }
        // Vary values: read for every field name the cache normalises, and stable when read again.
        for name in ["accept", "accept-language", "accept-encoding", "accept-charset"] {
            guard let field = HTTPField.Name(name) else { continue }
            for line in lines {
                guard let value = VaryValues.value(of: name, in: [field: line]) else { continue }
                if let again = HTTPField.Name(name).map({ VaryValues.value(of: name, in: [$0: value]) }) {
                    precondition(again == value, "a Vary value that changes when normalised again")
                }
            }
        }
    }

    /// A disk cache entry file: it is refused or read, and what is read writes back the same.
    static func diskCacheEntry(_ data: Data) {
        guard let entry = DiskCacheStore.decode(data, key: "fuzz") else { return }
        guard let again = DiskCacheStore.encode(entry, key: "fuzz") else { return }
        precondition(DiskCacheStore.decode(again, key: "fuzz") == entry, "an entry that does not round-trip")
        precondition(DiskCacheStore.decode(again, key: "other") == nil, "an entry read under another key")
    }

    /// `Content-Range` and `Range` values: what parses states itself back, and positions are in order.
    static func contentRange(_ data: Data) {
        let text = String(decoding: data, as: UTF8.self)
        if let range = ContentRangeHeader.parse(text) {
            precondition(range.range.lowerBound >= 0 && range.range.upperBound >= range.range.lowerBound, "range order")
            if let complete = range.completeLength { precondition(range.range.upperBound < complete, "range past the length") }
            precondition(ContentRangeHeader.parse(range.header) == range, "a range that does not round-trip")
        }
        if let length = ContentRangeHeader.unsatisfiedLength(text) {
            precondition(length >= 0, "a negative length")
        }
        _ = ByteRangeRequest.parse(text)
    }

    /// An OAuth2 token response body, and a `WWW-Authenticate` value.
    static func oauthToken(_ data: Data) {
        if let token = try? OAuth2TokenEndpoint.decodeToken(data), let expiry = token.expiresAt {
            precondition(expiry.timeIntervalSince1970.isFinite, "an expiry that is not finite")
        }
        _ = AuthenticationChallenge.parse(String(decoding: data, as: UTF8.self))
    }

    /// A `Set-Cookie` value from a secure origin.
    static func cookie(_ data: Data) {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        guard
            let cookie = CookieRules.parse(
                String(decoding: data, as: UTF8.self), host: "www.example.com", requestPath: "/a/b", secureOrigin: true, now: now)
        else { return }
        // The separator is the byte %x3B (RFC 6265 §5.2); `contains(";")` on a String would also
        // match characters canonically equivalent to it (U+037E), which are no separator.
        let separator = UInt8(ascii: ";")
        precondition(!cookie.name.utf8.contains(separator) && !cookie.value.utf8.contains(separator), "a cookie with a separator")
        precondition(CookieRules.domainMatches("www.example.com", cookie.domain), "a cookie for a domain the host is not in")
    }

    /// A compressed response body: the first byte picks the coding (gzip, deflate, br, zstd) and
    /// the size of the pieces it arrives in, the rest is the body. Decoding gives bytes within the
    /// limits or a typed error; fed in other pieces it gives the same result.
    static func contentDecoding(_ data: Data) {
        guard let first = data.first else { return }
        let codings = ["gzip", "deflate", "br", "zstd"]
        let coding = codings[Int(first) % codings.count]
        let body = data.dropFirst()
        let limits = DecompressionLimits(maxRatio: 50, ratioFloor: 64 * 1024, maxSize: 1 << 20)
        let pieceSize = 1 + Int(first >> 2) % 64
        var results: [Result<Data, CourierError>] = []
        for size in [pieceSize, body.count + 1] {
            do {
                let decoded = try ContentDecoding.decode(Data(body), coding: coding, pieceSize: size, limits: limits)
                precondition(decoded.count <= 1 << 20, "decoded past the size limit")
                results.append(.success(decoded))
            } catch let error as CourierError {
                precondition([.decoding, .transport, .responseTooLarge].contains(error.kind), "an error of kind \(error.kind)")
                results.append(.failure(error))
            } catch {
                preconditionFailure("an error that is not a CourierError: \(error)")
            }
        }
        if case .success(let one) = results[0], case .success(let other) = results[1] {
            precondition(one == other, "the pieces changed the decoded bytes")
        }
    }
}
