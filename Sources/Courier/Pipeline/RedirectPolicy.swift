import HTTPTypes

/// How the pipeline follows redirects; the same policy applies on every transport.
///
/// 303 turns any method but `HEAD` into a `GET` without a body, and so do 301 and 302 for a `POST`
/// (RFC 9110 §15.4); every other redirect (301 and 302 of any other method, 307, 308) keeps the
/// method and body when the body can be replayed. When the next hop is another origin
/// (scheme, host or port), the sensitive header fields are removed: `Authorization`, `Cookie`,
/// `Proxy-Authorization` and the default signature headers (add custom signature header names),
/// and every field the client's ``Redactor`` hides as a secret (`X-Api-Key`, `X-CSRF-Token`,
/// any name with `token`, `secret`, `password`, `signature` or `api-key` in it, and the names
/// added to its `headerNames`; RFC 9110 §15.4).
public struct RedirectPolicy: Sendable {
    /// The most redirects followed for one request; 0 turns following off.
    public var maxRedirects: Int
    /// Whether a redirect from `https` to `http` is followed (refused by default).
    public var allowsInsecureDowngrade: Bool
    /// Header fields never forwarded to another origin.
    public var sensitiveFields: [HTTPField.Name]

    /// Creates a policy.
    public init(
        maxRedirects: Int = 10,
        allowsInsecureDowngrade: Bool = false,
        sensitiveFields: [HTTPField.Name] = [.authorization, .cookie, .proxyAuthorization] + SignatureHeaders().all
    ) {
        self.maxRedirects = maxRedirects
        self.allowsInsecureDowngrade = allowsInsecureDowngrade
        self.sensitiveFields = sensitiveFields
    }

    /// Follows up to ten redirects and refuses https → http.
    public static let `default` = RedirectPolicy()
    /// Never follows redirects: the 3xx response is returned as is.
    public static let none = RedirectPolicy(maxRedirects: 0)

    /// `fields` without the ones that stay at their origin: ``sensitiveFields`` and the secrets
    /// `redactor` hides.
    func withoutSecrets(_ fields: HTTPFields, redactor: Redactor) -> HTTPFields {
        var fields = fields
        for name in self.sensitiveFields { fields[name] = nil }
        guard fields.contains(where: { redactor.isSecret(headerName: $0.name.canonicalName) }) else { return fields }
        return HTTPFields(fields.filter { !redactor.isSecret(headerName: $0.name.canonicalName) })
    }
}
