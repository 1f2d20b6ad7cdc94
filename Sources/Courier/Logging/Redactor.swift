import Foundation
import HTTPTypes

/// Hides secrets in what Courier prints: header values, query parameters and free text.
///
/// Used by the log lines, the cURL rendering and error descriptions. Add your own names to the
/// standard lists:
///
/// ```swift
/// var redactor = Redactor.standard
/// redactor.headerNames.insert("x-session")
/// ```
public struct Redactor: Sendable {
    /// Header names (lower-case) whose values are always hidden.
    public var headerNames: Set<String>
    /// Query parameter names (lower-case) whose values are always hidden.
    public var queryNames: Set<String>
    /// The text that replaces a secret.
    public var replacement: String

    /// Creates a redactor.
    public init(headerNames: Set<String>, queryNames: Set<String>, replacement: String = "REDACTED") {
        self.headerNames = headerNames
        self.queryNames = queryNames
        self.replacement = replacement
    }

    /// Hides Authorization, Cookie, Set-Cookie, Proxy-Authorization, API-key headers and
    /// token-like query parameters (OAuth's codes, PKCE verifiers and client assertions included).
    public static let standard = Redactor(
        headerNames: [
            "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key", "x-auth-token", "x-csrf-token",
            "x-signature",
        ],
        queryNames: [
            "token", "access_token", "refresh_token", "id_token", "api_key", "apikey", "key", "password", "passwd", "secret",
            "client_secret", "signature", "sig", "auth", "session", "sessionid", "session_id", "code", "code_verifier",
            "client_assertion", "assertion", "private_key", "jwt", "pwd",
        ]
    )

    /// Whether this redactor hides what ``standard`` hides, and nothing else.
    var isStandard: Bool {
        self.headerNames == Self.standard.headerNames && self.queryNames == Self.standard.queryNames
            && self.replacement == Self.standard.replacement
    }

    /// Whether the value of a header field should be hidden.
    public func isSecret(headerName: String) -> Bool {
        let name = headerName.lowercased()
        // Any name with `authorization` in it (`X-Authorization`, `X-Forwarded-Authorization`,
        // `X-Amzn-Remapped-Authorization`) carries what `Authorization` does. Cookies are
        // sessions, whatever lists a redactor of one's own was made with.
        return self.headerNames.contains(name) || name == "cookie" || name == "set-cookie" || name.contains("token")
            || name.contains("secret") || name.contains("password")
            || name.contains("signature") || name.contains("api-key") || name.contains("apikey") || name.contains("credential")
            || name.contains("authorization") || name.contains("passphrase") || Self.endsInKeyOrAuth(name)
    }

    /// Whether a field name's last word is `key` or `auth` (`Ocp-Apim-Subscription-Key`,
    /// `X-Auth-Key`, `X-Sentry-Auth`): how services name the fields that carry their keys.
    /// An idempotency key (`Idempotency-Key`, `X-Idempotency-Key`, …) is no credential, and
    /// stays shown (and with a request a redirect sends to another origin).
    private static func endsInKeyOrAuth(_ name: String) -> Bool {
        guard name.hasSuffix("key") || name.hasSuffix("auth"), !name.contains("idempotency") else { return false }
        let last = name.split(whereSeparator: { $0 == "-" || $0 == "_" }).last
        return last == "key" || last == "auth"
    }

    /// Whether the value of a query parameter should be hidden (also the signatures and
    /// credentials of pre-signed URLs: `X-Amz-Signature`, `X-Goog-Credential`, …, any name with
    /// `token` in it but a token's type — OpenID Connect's `id_token_hint` carries an ID token — and
    /// the device flow's `device_code`, RFC 8628 §3.4).
    public func isSecret(queryName: String) -> Bool {
        // A nested name (`user[api_key]`, `oauth[code]`, as Rails and PHP forms write them) is
        // judged by its innermost part as well.
        if queryName.hasSuffix("]"), let open = queryName.lastIndex(of: "["),
            case let inner = String(queryName[queryName.index(after: open)..<queryName.index(before: queryName.endIndex)]),
            !inner.isEmpty, self.isSecret(queryName: inner)
        {
            return true
        }
        let name = queryName.lowercased()
        // A token's type (RFC 8693's `subject_token_type`, RFC 7009's `token_type_hint`) and a
        // count of tokens (`max_tokens`) are no tokens.
        let namesAToken =
            name.contains("token") && !name.hasSuffix("token_type") && !name.hasSuffix("token_type_hint") && !name.hasSuffix("tokens")
        return self.queryNames.contains(name) || namesAToken || name.contains("secret") || name.contains("password")
            || name == "device_code" || name == "authorization" || name.hasSuffix("_authorization") || name.hasSuffix("-authorization")
            || name.contains("signature") || name.contains("credential") || name.hasSuffix("_key") || name.hasSuffix("-key")
            || name.contains("passphrase") || Self.isCredentialKey(queryName, lowercased: name)
    }

    /// Whether a name spelled without a separator names a key that is a credential: its last
    /// word is `Key` (`privateKey`, `accountKey`, `openAIKey`) or it ends in `apikey`, `secretkey`,
    /// … — unless it is a key that is no secret (`sortKey`, `publicKey`, `idempotencyKey`).
    private static func isCredentialKey(_ name: String, lowercased: String) -> Bool {
        guard !Self.keysThatAreNoSecret.contains(where: { lowercased.hasSuffix($0) }) else { return false }
        if Self.credentialKeys.contains(where: { lowercased.hasSuffix($0) }) { return true }
        let scalars = name.unicodeScalars
        guard name.hasSuffix("Key"), scalars.count > 3 else { return false }
        let before = scalars[scalars.index(scalars.endIndex, offsetBy: -4)]
        return !CharacterSet.whitespaces.contains(before) && before != "-" && before != "_" && before != "."
    }

    /// Keys spelled without a separator that are credentials however they are cased.
    private static let credentialKeys = [
        "privatekey", "secretkey", "signingkey", "accesskey", "apikey", "clientkey", "encryptionkey", "masterkey", "sessionkey",
        "authkey",
    ]

    /// Keys whose names end in `Key` that carry no secret: shown.
    private static let keysThatAreNoSecret = [
        "idempotencykey", "sortkey", "publickey", "partitionkey", "primarykey", "foreignkey", "cachekey", "hashkey", "rangekey",
        "lastevaluatedkey", "exclusivestartkey", "objectkey", "messagekey", "routingkey", "groupingkey", "dedupkey",
    ]

    /// The value of a header field, or the replacement when it is a secret; a field that
    /// carries a URL (`Location`, `Content-Location`) has the URL's secrets hidden, and so do the
    /// fields whose value holds URLs among other text (`Link`, `Referer`, `Refresh`).
    public func value(of field: HTTPField) -> String {
        if self.isSecret(headerName: field.name.canonicalName) { return self.replacement }
        if field.name == .location || field.name == .contentLocation { return self.redact(urlString: field.value) }
        switch field.name.canonicalName {
        case "link", "referer", "refresh": return self.redactFreeText(field.value)
        default: return field.value
        }
    }

    /// The URL with the values of secret query parameters and any user info replaced; so are
    /// secret `name=value` parameters in the fragment (an implicit grant's `#access_token=…`).
    public func redact(url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return url.absoluteString }
        // A user name alone can be the secret (`https://TOKEN@host/`).
        if components.user != nil { components.user = self.replacement }
        if components.password != nil { components.password = self.replacement }
        if let fragment = components.percentEncodedFragment, fragment.utf8.contains(UInt8(ascii: "=")) {
            // Percent-encoded as a fragment allows: a replacement of one's own may hold any character.
            let replacement = self.replacement.addingPercentEncoding(withAllowedCharacters: .urlFragmentAllowed) ?? "REDACTED"
            components.percentEncodedFragment = self.redact(pairs: fragment, replacement: replacement)
        }
        if let items = components.percentEncodedQueryItems {
            // Percent-encoded too: Foundation stops the process when a percent-encoded query item
            // holds a character a query cannot (a replacement of one's own such as `[hidden]`).
            let replacement = QueryEncoding.escape(self.replacement)
            components.percentEncodedQueryItems = items.map { item in
                self.isSecret(queryName: item.name.removingPercentEncoding ?? item.name) && item.value != nil
                    ? URLQueryItem(name: item.name, value: replacement) : item
            }
        }
        return components.string ?? url.absoluteString
    }

    /// A URL string with secrets hidden (see ``redact(url:)``); input that does not parse as a
    /// URL (a careless server's `Location`) has its secrets hidden as free text instead.
    public func redact(urlString: String) -> String {
        // Without a query, a fragment or user info there is nothing to hide (and nothing to parse).
        guard urlString.utf8.contains(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "#") })
        else { return urlString }
        return URL(string: urlString).map(self.redact(url:)) ?? self.redactFreeText(Self.withoutUserInfo(urlString, self.replacement))
    }

    /// `text` with what stands between `://` and an `@` before the path (a user name and a
    /// password) replaced: for a URL that does not parse, where no URL type finds it.
    static func withoutUserInfo(_ text: String, _ replacement: String) -> String {
        guard let scheme = text.range(of: "://") else { return text }
        let rest = text[scheme.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return text }
        return String(text[..<scheme.upperBound]) + replacement + String(text[at...])
    }

    /// Hides bearer tokens, secret header lines and `name=value` / `"name": "value"` pairs with
    /// secret names inside free text: a quoted value whole (spaces, commas and escaped quotes
    /// included), also in JSON escaped inside a string.
    public func redactFreeText(_ text: String) -> String {
        var result = text
        for rule in self.freeTextRules() {
            result = rule.expression.stringByReplacingMatches(
                in: result, range: NSRange(result.startIndex..., in: result), withTemplate: rule.template)
        }
        return result
    }

    /// A compiled pattern of ``redactFreeText(_:)`` and what its matches are replaced with.
    struct FreeTextRule: @unchecked Sendable {
        // `NSRegularExpression` is immutable once made, and safe to use from any thread.
        let expression: NSRegularExpression
        let template: String
    }

    /// What the free-text rules are made from: a redactor's names and replacement.
    private struct FreeTextKey: Hashable {
        let headerNames: Set<String>
        let queryNames: Set<String>
        let replacement: String
    }

    /// The free-text rules of the redactors in use, compiled once each (a few per process; the
    /// cache is emptied should a process make more than `freeTextCacheLimit`).
    private static let freeTextCache = Locked<[FreeTextKey: [FreeTextRule]]>([:])
    static let freeTextCacheLimit = 16

    /// This redactor's free-text rules, in the order they apply.
    func freeTextRules() -> [FreeTextRule] {
        let key = FreeTextKey(headerNames: self.headerNames, queryNames: self.queryNames, replacement: self.replacement)
        if let rules = Self.freeTextCache.withLock({ $0[key] }) { return rules }
        let rules = self.compileFreeTextRules()
        Self.freeTextCache.withLock { cache in
            if cache.count >= Self.freeTextCacheLimit { cache.removeAll() }
            cache[key] = rules
        }
        return rules
    }

    private func compileFreeTextRules() -> [FreeTextRule] {
        var rules: [FreeTextRule] = []
        let replacement = NSRegularExpression.escapedTemplate(for: self.replacement)
        func replace(_ pattern: String, _ template: String) {
            guard let expression = try? NSRegularExpression(pattern: pattern, options: [.caseInsensitive]) else { return }
            rules.append(FreeTextRule(expression: expression, template: template))
        }
        let headers = self.headerNames.union(["authorization", "proxy-authorization", "cookie", "set-cookie"])
        // A secret header written out as a line of text: its value to the end of the line.
        let headerPattern = headers.sorted().map(NSRegularExpression.escapedPattern(for:)).joined(separator: "|")
        replace(#"(?<![A-Za-z0-9_-])((?:"# + headerPattern + #")[ \t]*:[ \t]*)[^\r\n]+"#, "$1" + replacement)
        // A credential up to white space, a quote, a comma or a backslash (a JSON escape): token68
        // (RFC 9110 §11.2) and the characters real tokens carry beyond it (`7|Xk9s…`).
        replace(#"(bearer|basic)\s+[^\s"',\\]+"#, "$1 " + replacement)
        // A URL's user info (`postgres://app:hunter2@db/prod` in a message or a body), up to the
        // last `@` before the path: a password may hold one (`p@ss`).
        replace(#"([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^\s/?#"'<>\\]+@"#, "$1" + replacement + "@")
        let names = self.queryNames.union(headers)
            .union([
                "access_token", "refresh_token", "password", "id_token_hint", "device_code", "subject_token", "actor_token", "passphrase",
                "credential",
            ])
            .sorted().map(NSRegularExpression.escapedPattern(for:)).joined(separator: "|")
        // The name, quoted or not (a quote may be escaped: JSON inside a JSON string), then `=` or `:`.
        let key = #"((?:\\?")?(?:"# + names + #")(?:\\?")?\s*[=:]\s*)"#
        // A quoted value up to its closing quote (escaped quotes inside it are part of it), or to
        // the end of the text when it has none there (text cut from a longer body) ...
        replace(key + #"(\\?")(?:[^"\\]|\\[^"]|\\")*?(?:\2|$)"#, "$1$2" + replacement + "$2")
        // ... or an unquoted one up to the end of the line, a `&`, a quote, a `>` (a URL in `<…>`)
        // or a comma before white space or a quote (a list, JSON): a secret may hold spaces, `;`
        // and other commas (`password=correct horse battery`), so what follows on the line is
        // hidden with it rather than the rest of the secret shown. A value redacted already (a
        // URL's, in a message) is left as it is, with the text after it.
        let redacted = NSRegularExpression.escapedPattern(for: self.replacement)
        replace(key + #"(?![\\"])(?!"# + redacted + #"(?:[^A-Za-z0-9_-]|$))((?:[^"&\r\n}\\>,]|,(?![\s"]))+)"#, "$1" + replacement)
        // An XML element whose name says it holds a credential (`<SecretAccessKey>`,
        // `<SessionToken>`, `<Password>`): its text, when its closing tag follows (so a type
        // named in a message, `Page<SessionToken>`, is left alone). Not names that merely equal
        // a secret query name: S3's `<Key>` and `<Code>` name objects and errors. Bounded and
        // possessive, so hostile text cannot make the match backtrack.
        replace(
            #"(<((?:[\w.-]{1,64}:)?(?=[\w.-]{0,64}?(?:token|secret|passw(?:or)?d|passphrase|credential|signature|private_?key|api_?key))[\w.-]{1,128}+)(?:\s[^<>]{0,2048}+)?>)[^<]++(?=</\2>)"#,
            "$1" + replacement)
        return rules
    }

    /// A body as text for a log line, with secrets hidden and at most `limit` bytes shown.
    ///
    /// JSON has the values of secret-named keys replaced (at any depth), a form body
    /// (`application/x-www-form-urlencoded`) its secret-named fields, other text its bearer tokens
    /// and `name=value` secrets. Text is read in its charset (UTF-8 when none is named); bytes
    /// that are not text in it are shown as a byte count only.
    public func redact(body: Data, contentType: String?, limit: Int) -> String {
        self.redact(body: body, contentType: contentType, limit: limit, inMultipart: false)
    }

    /// ``redact(body:contentType:limit:)``, for a body or a part of a multipart body (whose own
    /// parts, a multipart nested in a multipart, are shown as a count only: a hostile body nested
    /// deep cannot make the redactor recurse).
    private func redact(body: Data, contentType: String?, limit: Int, inMultipart: Bool) -> String {
        if body.isEmpty { return "(empty)" }
        let type = contentType?.lowercased() ?? ""
        let text: String
        if type.contains("json") || (type.isEmpty && (body.first == UInt8(ascii: "{") || body.first == UInt8(ascii: "["))),
            let json = self.redactedJSON(body)
        {
            text = json
        } else if type.contains("x-www-form-urlencoded"), case .success(let form) = TextCharset.decode(body, contentType: contentType) {
            // A body labelled a form that is JSON, or text without a `name=value` pair (what a
            // command line's `-d` sends), has its secrets where no pair holds them.
            // What a form encoder writes has no white space and no `:` (it escapes them); text
            // with them (`user=ann password=…`, `Authorization: Basic …=`) is read as free text
            // too. A real form is judged field by field only: `country_code` is no `code`.
            if let json = self.redactedJSON(body) {
                text = json
            } else if !form.contains("=") {
                text = self.redactFreeText(form)
            } else if form.contains(where: { $0.isWhitespace || $0 == ":" }) {
                text = self.redactFreeText(self.redact(pairs: form, replacement: self.replacement))
            } else {
                text = self.redact(pairs: form, replacement: self.replacement)
            }
        } else if type.hasPrefix("multipart/") {
            guard !inMultipart, let boundary = Self.parameter("boundary", in: contentType ?? ""),
                let parts = self.redact(multipart: body, boundary: boundary)
            else { return "(\(body.count) bytes, multipart)" }
            text = parts
        } else if !Self.looksBinary(type), case .success(let plain) = TextCharset.decode(body, contentType: contentType) {
            // Read in its charset: UTF-16 read as UTF-8 is text with a NUL between letters, which
            // no pattern matches (`p\0a\0s\0s…`), so its secrets were shown.
            text = self.redactFreeText(plain)
        } else {
            return "(\(body.count) bytes, binary)"
        }
        let utf8 = Array(text.utf8)
        guard utf8.count > limit else { return text }
        let shown = String(decoding: utf8.prefix(max(0, limit)), as: UTF8.self)
        return "\(shown)… (\(body.count) bytes)"
    }

    /// The body as JSON with secret-named values hidden, when it is JSON.
    private func redactedJSON(_ body: Data) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed]),
            let data = try? JSONSerialization.data(withJSONObject: self.redact(json: object), options: [.sortedKeys, .fragmentsAllowed])
        else { return nil }
        return String(data: data, encoding: .utf8)
    }

    /// The most parts of a multipart body shown; the rest are counted.
    static let maxParts = 64

    /// A multipart body (RFC 7578, RFC 2046 §5.1.1) as text: each part's header lines, then its
    /// content hidden whole when the part's name (in its `Content-Disposition`) is a secret one
    /// (`password`, `client_secret`), else redacted as a body of the part's own type (a file's
    /// bytes shown as a count); `nil` when no delimiter line is in the body. Line breaks may be
    /// CRLF or LF alone; a delimiter counts only at the start of a line.
    private func redact(multipart body: Data, boundary: String) -> String? {
        let bytes = [UInt8](body)
        let delimiter = Array("--\(boundary)".utf8)
        // Where each delimiter line starts: at the start of the body or after a line feed.
        var starts: [Int] = []
        var index = 0
        while index + delimiter.count <= bytes.count, starts.count <= Self.maxParts {
            if index == 0 || bytes[index - 1] == UInt8(ascii: "\n"), bytes[index..<(index + delimiter.count)].elementsEqual(delimiter) {
                starts.append(index)
                index += delimiter.count
            } else {
                index += 1
            }
        }
        guard let first = starts.first else { return nil }
        var text = self.redactFreeText(String(decoding: bytes[0..<first], as: UTF8.self))
        for (number, start) in starts.enumerated() {
            let end = number + 1 < starts.count ? starts[number + 1] : bytes.count
            // (The closing delimiter after the last part shown is shown as it is.)
            let isClosing = bytes[(start + delimiter.count)..<end].starts(with: [UInt8(ascii: "-"), UInt8(ascii: "-")])
            if number == Self.maxParts, !isClosing {
                text += "(\(bytes.count - start) more bytes, parts not shown)"
                break
            }
            text += "--" + boundary
            text += self.redact(part: bytes[(start + delimiter.count)..<end])
        }
        return text
    }

    /// One multipart part after its delimiter: the rest of the delimiter line, the header lines,
    /// the blank line and the content (see ``redact(multipart:boundary:)``).
    private func redact(part: ArraySlice<UInt8>) -> String {
        let (headerBytes, content) = Self.split(part)
        let headers = String(decoding: headerBytes, as: UTF8.self)
        let disposition = Self.headerValue("content-disposition", in: headers)
        let isSecret =
            disposition.flatMap { Self.parameter("name", in: $0) }.map {
                self.isSecret(queryName: $0) || self.isSecret(headerName: $0)
            } ?? false
        guard let (separator, body) = content else {
            // No blank line: the closing delimiter's `--` and the epilogue, or a part cut short.
            return isSecret
                ? self.redactFreeText(headers.split(whereSeparator: \.isNewline).first.map(String.init) ?? "") + "\r\n" + self.replacement
                : self.redactFreeText(headers)
        }
        // The line break before the next delimiter belongs to it (RFC 2046 §5.1.1).
        var value = body
        var lineBreak = ""
        if value.last == UInt8(ascii: "\n") {
            value = value.dropLast()
            lineBreak = "\n"
            if value.last == UInt8(ascii: "\r") {
                value = value.dropLast()
                lineBreak = "\r\n"
            }
        }
        let shown: String
        if isSecret {
            shown = self.replacement
        } else if value.isEmpty {
            shown = ""
        } else {
            shown = self.redact(
                body: Data(value), contentType: Self.headerValue("content-type", in: headers) ?? "text/plain", limit: .max,
                inMultipart: true)
        }
        return self.redactFreeText(headers) + separator + shown + lineBreak
    }

    /// A part's header lines and, after the first blank line (CRLF CRLF or LF LF), its content
    /// with the blank line's text.
    private static func split(_ part: ArraySlice<UInt8>) -> (ArraySlice<UInt8>, (String, ArraySlice<UInt8>)?) {
        var index = part.startIndex
        while index < part.endIndex {
            if part[index] == UInt8(ascii: "\n") {
                let next = part.index(after: index)
                if next < part.endIndex, part[next] == UInt8(ascii: "\n") {
                    return (part[part.startIndex..<index], ("\n\n", part[part.index(after: next)...]))
                }
                if next + 1 < part.endIndex, part[next] == UInt8(ascii: "\r"), part[next + 1] == UInt8(ascii: "\n"),
                    index > part.startIndex, part[index - 1] == UInt8(ascii: "\r")
                {
                    return (part[part.startIndex..<(index - 1)], ("\r\n\r\n", part[(next + 2)...]))
                }
            }
            index += 1
        }
        return (part, nil)
    }

    /// The value of a `name=value` parameter (quoted or not) in a header's text: a media type's
    /// `boundary`, a part's `name` (never the `name` inside `filename`).
    static func parameter(_ name: String, in text: String) -> String? {
        let pattern = #"(?:^|[;\s])"# + NSRegularExpression.escapedPattern(for: name) + #"\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s"]+))"#
        guard let expression = try? NSRegularExpression(pattern: pattern, options: [.caseInsensitive]),
            let match = expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text))
        else { return nil }
        for group in [1, 2] {
            if let range = Range(match.range(at: group), in: text) { return String(text[range]) }
        }
        return nil
    }

    /// The value of a header line (`Content-Type: …`) in a block of header lines.
    private static func headerValue(_ name: String, in headers: String) -> String? {
        // (`\r\n` is one `Character`: split on any line break.)
        for line in headers.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == name {
                return parts[1].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    /// `name=value&…` text (a form body, a URL's fragment) with the values of secret names replaced.
    private func redact(pairs text: String, replacement: String) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            var name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            // A hash route with a query of its own (`#/callback?code=…`): the name follows its `?`.
            if let question = name.lastIndex(of: "?") { name = String(name[name.index(after: question)...]) }
            return parts.count == 2 && self.isSecret(queryName: name) ? "\(parts[0])=\(replacement)" : String(pair)
        }.joined(separator: "&")
    }

    /// Whether a JSON object reads as a response envelope: a `code` beside a message or a payload.
    private static func isEnvelope(_ object: [String: Any]) -> Bool {
        object.keys.contains { Self.envelopeKeys.contains($0.lowercased()) }
    }

    private static let envelopeKeys: Set<String> = ["msg", "message", "data", "result", "error", "errors", "success"]

    private func redact(json: Any) -> Any {
        if let object = json as? [String: Any] {
            var result: [String: Any] = [:]
            for (key, value) in object {
                // A number under `code` beside a message or a payload is an envelope's status (`{"code":
                // 0, "msg": …}`), never OAuth's authorization code, which is text: hidden, it
                // turned recorded fixtures into failures when replayed. Alone (`{"phone": …,
                // "code": 123456}`, a one-time code) it stays hidden.
                if value is NSNumber, key.lowercased() == "code", Self.isEnvelope(object) {
                    result[key] = value
                    continue
                }
                result[key] = self.isSecret(queryName: key) || self.isSecret(headerName: key) ? self.replacement : self.redact(json: value)
            }
            return result
        }
        if let array = json as? [Any] { return array.map { self.redact(json: $0) } }
        if let text = json as? String {
            // JSON inside a string (an echo, an envelope) is redacted as JSON; other text as free text.
            if text.first == "{" || text.first == "[", let inner = try? JSONSerialization.jsonObject(with: Data(text.utf8)),
                let data = try? JSONSerialization.data(withJSONObject: self.redact(json: inner), options: [.sortedKeys]),
                let redacted = String(data: data, encoding: .utf8)
            {
                return redacted
            }
            return self.redactFreeText(text)
        }
        return json
    }

    private static func looksBinary(_ type: String) -> Bool {
        ["image/", "audio/", "video/", "octet-stream", "protobuf", "application/zip", "application/gzip", "application/pdf"].contains {
            type.contains($0)
        }
    }
}
