import Crypto
import Foundation

/// An authorization-code request with PKCE (RFC 7636, method S256) and a `state` (RFC 6749
/// §10.12): the URL to open in a browser, and what is needed to check and use its answer.
///
/// ```swift
/// let request = try OAuth2AuthorizationRequest(authorizationEndpoint: authorizeURL, clientID: "app", redirectURI: "app://callback")
/// // open request.url in ASWebAuthenticationSession (or a browser); it calls back with a URL:
/// try await authenticator.signIn(with: request, callback: callbackURL)
/// ```
///
/// The code verifier is 32 random bytes in base64url (43 characters); the state, 16 random
/// bytes. A callback whose `state` differs, or that carries an `error`, fails with kind
/// `authenticationRequired` and never reaches the token endpoint.
public struct OAuth2AuthorizationRequest: Sendable {
    /// The URL to open: the authorization endpoint with `response_type=code`, the client,
    /// redirect URI, scope, state and code challenge.
    public let url: URL
    /// The value the callback must carry back unchanged.
    public let state: String
    /// The PKCE secret sent only with the code exchange.
    public let codeVerifier: String
    /// The redirect URI, sent again with the code exchange.
    public let redirectURI: String

    /// Creates a request with a fresh state and code verifier.
    ///
    /// - Throws: `invalidRequest` when `authorizationEndpoint` cannot take query items.
    public init(authorizationEndpoint: URL, clientID: String, redirectURI: String, scope: String? = nil) throws {
        try self.init(
            authorizationEndpoint: authorizationEndpoint, clientID: clientID, redirectURI: redirectURI, scope: scope,
            state: Self.randomText(bytes: 16), codeVerifier: Self.randomText(bytes: 32)
        )
    }

    /// Creates a request with a given state and verifier (the verifier must be 43–128 unreserved characters).
    public init(
        authorizationEndpoint: URL, clientID: String, redirectURI: String, scope: String?, state: String, codeVerifier: String
    ) throws {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        guard (43...128).contains(codeVerifier.count), codeVerifier.unicodeScalars.allSatisfy(unreserved.contains) else {
            throw CourierError.invalidRequest("a PKCE code verifier is 43 to 128 unreserved characters (RFC 7636 §4.1)")
        }
        guard var components = URLComponents(url: authorizationEndpoint, resolvingAgainstBaseURL: false) else {
            throw CourierError.invalidRequest("the authorization endpoint is not a URL that can take a query")
        }
        var items: [URLQueryItem] = []
        items += [
            URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: clientID),
            URLQueryItem(name: "redirect_uri", value: redirectURI),
        ]
        if let scope { items.append(URLQueryItem(name: "scope", value: scope)) }
        items += [
            URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "code_challenge", value: Self.challenge(for: codeVerifier)),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        // The endpoint's own query stays as it is written (`prompt=select+account` keeps its `+`);
        // ours follow, every byte but the unreserved ones percent-encoded (`+` too: it means a
        // space to form decoders).
        let ours = items.map { "\(QueryEncoding.escape($0.name))=\(QueryEncoding.escape($0.value ?? ""))" }.joined(separator: "&")
        let own = components.percentEncodedQuery.flatMap { $0.isEmpty ? nil : $0 }
        components.percentEncodedQuery = own.map { "\($0)&\(ours)" } ?? ours
        guard let url = components.url else { throw CourierError.invalidRequest("the authorization URL could not be built") }
        self.url = url
        self.state = state
        self.codeVerifier = codeVerifier
        self.redirectURI = redirectURI
    }

    /// The S256 code challenge: base64url(SHA-256(verifier)), no padding (RFC 7636 §4.2).
    public static func challenge(for verifier: String) -> String {
        Self.base64URL(Data(SHA256.hash(data: Data(verifier.utf8))))
    }

    /// The authorization code the callback carries, after checking its `state`.
    ///
    /// - Throws: kind `authenticationRequired` when the state is missing or different (a forged or
    ///   stale callback), when the server answered with an `error` (`access_denied`, …; its code is
    ///   the error's ``CourierError/code``), or when there is no code.
    public func authorizationCode(from callback: URL) throws -> String {
        let items = URLComponents(url: callback, resolvingAgainstBaseURL: false)?.queryItems ?? []
        func value(_ name: String) -> String? { items.first { $0.name == name }?.value }
        guard let state = value("state"), state.utf8.elementsEqual(self.state.utf8) else {
            throw CourierError(.authenticationRequired, "the authorization callback's state does not match this request (RFC 6749 §10.12)")
        }
        if let code = value("error") {
            var error = CourierError(
                .authenticationRequired, "the authorization server refused: \(code)\(value("error_description").map { " (\($0))" } ?? "")")
            error.code = code
            throw error
        }
        guard let code = value("code"), !code.isEmpty else {
            throw CourierError(.authenticationRequired, "the authorization callback carries no code")
        }
        return code
    }

    static func randomText(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return Self.base64URL(Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }))
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
