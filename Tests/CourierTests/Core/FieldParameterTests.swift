import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// Parameters of a field value read as RFC 9110 writes them, an origin that cannot be read kept
/// apart, and a URL's user info kept out of an endpoint's default name.
@Suite("Field parameters, unreadable origins and default names")
struct FieldParameterTests {
    @Test
    func aCharsetInsideAnotherParametersQuotedValueIsNotTheCharset() {
        // RFC 9110 §5.6.6: a parameter value may be a quoted string, and a `;` in it is text.
        #expect(TextCharset.label(inContentType: #"text/plain; title="a;charset=utf-16be"; charset=utf-8"#) == "utf-8")
        #expect(TextCharset.label(inContentType: #"text/plain; charset="utf-8""#) == "utf-8")
        #expect(TextCharset.label(inContentType: #"text/plain; title="say \"hi\"; charset=utf-16be""#) == nil)
        #expect(TextCharset.label(inContentType: "text/plain;CHARSET=UTF-16BE") == "UTF-16BE")
        // A quote inside a token opens no quoted string (only a value that starts with one is).
        #expect(TextCharset.label(inContentType: #"text/plain; x=a"b; charset=utf-16be"#) == "utf-16be")
        #expect(TextCharset.label(inContentType: #"text/plain; charset = "utf-8" ; q=1"#) == "utf-8")
        // A quoted string without its closing quote is no value (§5.6.4).
        #expect(TextCharset.label(inContentType: #"text/plain; charset="utf-8"#) == nil)
        #expect(TextCharset.label(inContentType: #"text/plain; a="x; charset=utf-16be"#) == nil)
        #expect(FieldText.parameters("text/plain;").isEmpty)
        #expect(FieldText.parameters("").isEmpty)
        #expect(FieldText.parameters("text/plain; flag; a=1;; b").map(\.name) == ["a"])
        let parameters = FieldText.parameters(#"multipart/form-data; boundary="a;b=c"; name=x"#)
        #expect(parameters.map(\.name) == ["boundary", "name"])
        #expect(parameters.map(\.value) == ["a;b=c", "x"])
    }

    @Test(arguments: TransportKind.allCases)
    func aTextBodyIsDecodedInTheCharsetItsTypeNames(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in
            ScriptedResponse(
                status: 200, headers: [("Content-Type", #"text/plain; title="a;charset=utf-16be"; charset=utf-8"#)], body: Data("hi".utf8))
        }
        try await withClient(kind, server: server) { client in
            // Read as UTF-16BE, the two bytes were one CJK character (U+6869), as a success.
            let text = try await client.send(Endpoint<String>(path: "/text", decoding: .string))
            #expect(text == "hi")
        }
    }

    private static func base(_ text: String) throws -> BaseURL {
        let url = try #require(URL(string: text))
        return try #require(BaseURL(url))
    }

    @Test
    func twoBasesWhoseAuthoritiesCannotBeReadAreNotTheSameOrigin() throws {
        // A port past 65535 is no port (RFC 3986 §3.2.3 allows the digits; TCP does not): the
        // authority cannot be read, and two such are no proof of one origin.
        let target = try Self.base("https://a.example:99999/")
        let home = try Self.base("https://b.example:99999/")
        #expect(!RequestBuilder.isSameOrigin(target, home))
        let readable = try Self.base("https://a.example/v1")
        let same = try Self.base("HTTPS://A.example:443/v2")
        #expect(RequestBuilder.isSameOrigin(readable, same))
    }

    @Test
    func theDefaultNameHidesTheUserInfoOfAnyAbsoluteURL() {
        for path in [
            "https://ann:pw@api.example/a b", "https://ann:pw@api.example/{x}", "https://ann:pw@api.example/a%zz",
            "https://ann:pw@api.example/caf\u{E9}|x", "https://ann:p@w@api.example/x",
        ] {
            let name = EndpointNaming.defaultName(method: .get, path: path)
            #expect(!name.contains("pw") && !name.contains("p@w"), "\(path) → \(name)")
            #expect(name.hasPrefix("GET https://") && name.contains("api.example/"), "\(path) → \(name)")
        }
    }
}
