import Courier
import Foundation
import Testing

/// The credential types print without their secrets, however an app prints them.
@Suite("Credential types describe themselves without their secrets")
struct SecretDescriptionTests {
    /// Every way a value is commonly turned into text: interpolation, `print`'s, a debugger's, `dump`.
    private static func renderings(_ value: Any) -> [String] {
        var dumped = ""
        dump(value, to: &dumped)
        return ["\(value)", String(describing: value), String(reflecting: value), dumped]
    }

    private static func expectHidden(_ value: Any, secrets: [String], shown: [String]) {
        for text in Self.renderings(value) {
            for secret in secrets { #expect(!text.contains(secret), "\(secret) in \(text)") }
            for part in shown { #expect(text.contains(part), "\(part) not in \(text)") }
        }
    }

    @Test
    func tokensEndpointsGrantsAndAuthorizationRequestsHideTheirSecrets() throws {
        let token = OAuth2Token(
            accessToken: "access-s3cr3t", refreshToken: "refresh-s3cr3t", expiresAt: Date(timeIntervalSince1970: 0), scope: "read")
        Self.expectHidden(token, secrets: ["access-s3cr3t", "refresh-s3cr3t"], shown: ["Bearer", "read", "1970"])

        let endpoint = OAuth2TokenEndpoint(
            url: URL(string: "https://id:url-s3cr3t@auth.example/token")!, clientID: "app", clientSecret: "client s3cr3t with spaces")
        Self.expectHidden(endpoint, secrets: ["client s3cr3t", "s3cr3t"], shown: ["auth.example/token", "app"])

        let grants: [OAuth2TokenEndpoint.Grant] = [
            .password(username: "ann", password: "pass s3cr3t", scope: "read"), .refreshToken("refresh-s3cr3t"),
            .authorizationCode(code: "code-s3cr3t", redirectURI: "app://callback", codeVerifier: "verifier-s3cr3t"),
        ]
        for grant in grants {
            Self.expectHidden(grant, secrets: ["s3cr3t"], shown: [])
        }
        Self.expectHidden(grants[0], secrets: ["pass s3cr3t"], shown: ["ann"])
        Self.expectHidden(grants[2], secrets: ["code-s3cr3t", "verifier-s3cr3t"], shown: ["app://callback"])

        let verifier = String(repeating: "v", count: 43)
        let authorization = try OAuth2AuthorizationRequest(
            authorizationEndpoint: URL(string: "https://auth.example/authorize")!, clientID: "app", redirectURI: "app://callback",
            scope: nil, state: "state-1", codeVerifier: verifier)
        Self.expectHidden(authorization, secrets: [verifier], shown: ["state-1", "app://callback"])
        // The values themselves stay as they were.
        #expect(token.accessToken == "access-s3cr3t")
        #expect(authorization.codeVerifier == verifier)
    }
}
