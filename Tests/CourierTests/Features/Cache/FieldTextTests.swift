import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// Field values are read byte by byte (RFC 9110 §5.6: lists, parameters and quoted strings are
/// defined over octets), never by Swift character: a `,`, `;` or `=` followed by a combining mark
/// is one `Character`, and reading by character hid what followed it (found by fuzzing `Vary`).
@Suite("Field values read by byte, not by character")
struct FieldTextTests {
    /// A comma, then U+0301 COMBINING ACUTE ACCENT: one Swift character.
    static let commaAndMark = ",\u{301}"

    @Test func aDelimiterFollowedByACombiningMarkStillSeparates() {
        let text = "a" + Self.commaAndMark + "b"
        // Read by character, the comma is not there at all.
        #expect(text.split(separator: ",").count == 1)
        #expect(FieldText.split(text, at: ",") == ["a", "\u{301}b"])
        #expect(FieldText.split("a,,b", at: ",") == ["a", "", "b"])
        #expect(FieldText.split("a,,b", at: ",", omittingEmpty: true) == ["a", "b"])
        #expect(FieldText.split("a=b=c", at: "=", maxSplits: 1) == ["a", "b=c"])
    }

    @Test func onlySpacesAndTabsAreTrimmedAndOnlyASCIIIsLowerCased() {
        #expect(FieldText.trimmed(" \t a b \t") == "a b")
        #expect(FieldText.trimmed("\u{A0}a\u{A0}") == "\u{A0}a\u{A0}")
        // The Kelvin sign is not a `k` in a token (RFC 9110 §5.6.2 tokens are ASCII).
        #expect(FieldText.lowercased("NO-STORE \u{212A}") == "no-store \u{212A}")
        #expect(FieldText.token("  Max-Age\t") == "max-age")
    }

    /// RFC 9111 §5.2: `Cache-Control` is a list of directives; a directive after a comma and a
    /// combining mark is still its own, and the one before it keeps its meaning.
    @Test func aCacheControlDirectiveBeforeACombiningMarkIsKept() {
        let control = CacheControl("no-store" + Self.commaAndMark + "max-age=60")
        #expect(control.has("no-store"))
        #expect(control.seconds("max-age") == nil)
        #expect(control.directives.count == 2)
        let quoted = CacheControl("private=\"set-cookie" + Self.commaAndMark + "x\", max-age=5")
        #expect(quoted.directives["private"] == .some("set-cookie" + Self.commaAndMark + "x"))
        #expect(quoted.seconds("max-age") == 5)
        #expect(CacheControl("max-age=\"7\\\"\"").directives["max-age"] == .some("7\""))
    }

    /// RFC 9111 §4.1: the response varies on every name its `Vary` lists. A combining mark after
    /// the comma is a member that is no field name (RFC 9110 §12.5.5), so the whole `Vary` reads
    /// as `*`: the response varies on `X-User` and on everything else, and is never reused.
    @Test func aVaryNameBeforeACombiningMarkReadsAsStar() {
        #expect(CacheRules.varyNames([.vary: "X-User" + Self.commaAndMark]) == nil)
        #expect(CacheRules.varyNames([.vary: "X-User, Accept"]) == ["x-user", "accept"])
    }

    /// The fuzzer's input, made small: a parameter whose `=` was followed by white space and then a
    /// combining mark normalises to a value that reads the same again.
    @Test func aVaryValueNormalisesTheSameWhenReadAgain() throws {
        for name in ["accept", "accept-language", "accept-encoding", "accept-charset"] {
            let field = try #require(HTTPField.Name(name))
            let value = try #require(VaryValues.value(of: name, in: [field: "s;=  \u{489}x, t ;q=0.50"]))
            #expect(VaryValues.value(of: name, in: [field: value]) == value, "\(name): \(value)")
        }
    }

    @Test func mediaTypesCodingsAndJoinedCookiesSplitAtTheByte() throws {
        #expect(isJSONContentType("application/json;" + "\u{301}charset=utf-8"))
        #expect(throws: CourierError.self) { _ = try ContentCoding.of("gzip" + Self.commaAndMark + "br") }
        #expect(URLSessionTransport.splitSetCookie("a=1, \u{301}b=2") == ["a=1", "\u{301}b=2"])
        // The platform joins with ", ": a comma without the space is inside one field's value.
        #expect(URLSessionTransport.splitSetCookie("a=1" + Self.commaAndMark + "b=2") == ["a=1" + Self.commaAndMark + "b=2"])
        #expect(
            URLSessionTransport.splitSetCookie("a=1; Expires=Wed, 09 Jun 2031 10:18:14 GMT, b=2") == [
                "a=1; Expires=Wed, 09 Jun 2031 10:18:14 GMT", "b=2",
            ])
    }

    /// RFC 9111 §3: a response with `no-store` is not stored, however its list goes on, on both
    /// transports.
    @Test(arguments: TransportKind.allCases)
    func aNoStoreBeforeACombiningMarkIsObeyed(_ kind: TransportKind) async throws {
        let control = "no-store" + Self.commaAndMark + "max-age=60"
        let server = try await http1Server { _ in .text("fresh", headers: [("Cache-Control", control)]) }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            _ = try await client.send(Endpoint<String>(path: "/item", decoding: .string))
            let second = try await client.response(Endpoint<String>(path: "/item", decoding: .string))
            #expect(second.source == .network)
            #expect(server.requests.count == 2)
        }
    }

    /// RFC 9111 §4.1: a response that varies on `X-User` (listed before a comma and a combining
    /// mark) is not given to a request from another user, on both transports.
    @Test(arguments: TransportKind.allCases)
    func aVaryNameBeforeACombiningMarkKeepsUsersApart(_ kind: TransportKind) async throws {
        try await Self.expectUsersKeptApart(kind, vary: "X-User" + Self.commaAndMark)
    }

    /// RFC 9110 §12.5.5: `Vary` lists `*` or field names. A member that is neither (two names
    /// with a space between, a quoted name, a name with a semicolon) is read as `*`, never as a
    /// field both requests lack: each user gets their own answer (RFC 9111 §4.1), on both
    /// transports.
    @Test(arguments: TransportKind.allCases, ["X-User Authorization", "\"X-User\"", "X-User;", "X-User, Cookie Authorization"])
    func aVaryMemberThatIsNoFieldNameMatchesNoOtherRequest(_ kind: TransportKind, _ vary: String) async throws {
        try await Self.expectUsersKeptApart(kind, vary: vary)
    }

    /// Alice's and then Bob's request for a response with `Vary: vary`: each gets their own
    /// answer from the server, none the other's from the cache.
    static func expectUsersKeptApart(_ kind: TransportKind, vary: String) async throws {
        let server = try await http1Server { request in
            .text(request.header("x-user") ?? "nobody", headers: [("Cache-Control", "max-age=60"), ("Vary", vary)])
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let user = try #require(HTTPField.Name("X-User"))
            let first = try await client.send(Endpoint<String>(path: "/me", headers: [user: "alice"], decoding: .string))
            let second = try await client.send(Endpoint<String>(path: "/me", headers: [user: "bob"], decoding: .string))
            #expect(first == "alice")
            #expect(second == "bob")
            #expect(server.requests.count == 2)
        }
    }
}
