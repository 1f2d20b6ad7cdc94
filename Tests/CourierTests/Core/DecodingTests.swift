import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

struct OptionalTitle: Codable, Sendable {
    var id: Int
    var title: String?
}

@Suite("Bad bodies give typed decoding errors")
struct DecodingTests {
    @Test(arguments: TransportKind.allCases)
    func nullForANonOptionalNamesTheCodingPath(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<[Article]>(path: "/nested-null")) }
            #expect(error?.kind == .decoding)
            #expect(error?.codingPath == "[1].title")
            #expect(error?.decodingType == "Array<Article>")
            #expect(error?.bodyExcerpt()?.contains("\"title\":null") == true)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func nullForAnOptionalDecodesAsNil(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let value = try await client.send(Endpoint<OptionalTitle>(path: "/null-title"))
            #expect(value.id == 1)
            #expect(value.title == nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func malformedJSONIsADecodingError(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/bad-json")) }
            #expect(error?.kind == .decoding)
            #expect(error?.message.contains("malformed") == true)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func wrongContentTypeIsADecodingErrorThatNamesIt(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/html")) }
            #expect(error?.kind == .decoding)
            #expect(error?.message.contains("text/html") == true)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func customDecoderFromTheClientConfigurationIsUsed(_ kind: TransportKind) async throws {
        struct Snake: Decodable, Sendable { var userName: String }
        let server = try await http1Server { _ in .json(#"{"user_name":"ada"}"#) }
        try await withClient(kind, server: server, configure: { $0.decoder.keyDecodingStrategy = .convertFromSnakeCase }) { client in
            let value = try await client.send(Endpoint<Snake>(path: "/anything"))
            #expect(value.userName == "ada")
        }
    }

    /// RFC 9110 §8.3.2 (the charset parameter names the text's encoding; names are
    /// case-insensitive) and the WHATWG Encoding Standard §6 "decode" (a byte order mark wins over
    /// the label and is not part of the text; `utf-16` without one is little-endian).
    @Test(arguments: TransportKind.allCases)
    func aStringBodyIsReadInTheCharsetItsHeadOrItsByteOrderMarkNames(_ kind: TransportKind) async throws {
        let bodies: [String: ([(String, String)], [UInt8])] = [
            "/latin1": ([("Content-Type", "text/plain; charset=ISO-8859-1")], [0x63, 0x61, 0x66, 0xE9]),
            "/utf16be": ([("Content-Type", "text/plain; charset=\"UTF-16BE\"")], [0x00, 0x68, 0x00, 0xE9]),
            "/utf16-bom": ([("Content-Type", "text/plain")], [0xFF, 0xFE, 0x68, 0x00, 0xE9, 0x00]),
            "/utf8-bom-beats-label": ([("Content-Type", "text/plain; charset=iso-8859-1")], [0xEF, 0xBB, 0xBF, 0x68, 0xC3, 0xA9]),
            "/no-type": ([], Array("hé".utf8)),
            "/cyrillic": ([("Content-Type", "text/plain; charset=windows-1251")], [0xEF, 0xF0, 0xE8]),
            "/ascii-other-label": ([("Content-Type", "text/plain; charset=iso-8859-15")], Array("hé".utf8)),
            "/cp1252": ([("Content-Type", "text/plain; charset=windows-1252")], [0x80, 0x20, 0x93, 0x68, 0x94]),
            "/bad-utf8": ([("Content-Type", "text/plain; charset=utf-8")], [0x68, 0xFF, 0x41]),
            "/odd-utf16": ([("Content-Type", "text/plain; charset=utf-16le")], [0x68, 0x00, 0xE9]),
        ]
        let server = try await http1Server { request in
            guard let (headers, bytes) = bodies[request.path] else { return .text("not found", status: 404) }
            return ScriptedResponse(status: 200, headers: headers, body: Data(bytes))
        }
        try await withClient(kind, server: server) { client in
            func text(_ path: String) async throws -> String { try await client.send(Endpoint<String>(path: path, decoding: .string)) }
            let latin1 = try await text("/latin1")
            #expect(latin1 == "café")
            let cp1252 = try await text("/cp1252")
            #expect(cp1252 == "€ “h”")
            for path in ["/utf16be", "/utf16-bom", "/utf8-bom-beats-label", "/no-type", "/ascii-other-label"] {
                let read = try await text(path)
                #expect(read == "hé", "\(path)")
            }
            let unsupported = await expectCourierError { _ = try await text("/cyrillic") }
            #expect(unsupported?.kind == .decoding)
            #expect(unsupported?.message.contains("charset 'windows-1251' is not supported") == true)
            let invalid = await expectCourierError { _ = try await text("/bad-utf8") }
            #expect(invalid?.kind == .decoding)
            #expect(invalid?.message.contains("not valid UTF-8") == true)
            let odd = await expectCourierError { _ = try await text("/odd-utf16") }
            #expect(odd?.message.contains("not valid UTF-16LE") == true)
        }
    }
}

extension DecodingTests {
    /// A body that does not decode still came with an answer: the error carries the response's
    /// status and header fields, as `CourierError.status` promises for an undecodable body (an
    /// endpoint that accepts a 422 can tell which answer it could not read).
    @Test(arguments: TransportKind.allCases)
    func anUndecodableBodyCarriesTheStatusItCameWith(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in
            .json(#"{"problem":"no title"}"#, status: 422, headers: [("X-Trace", "t-1")])
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Article>(path: "/article", acceptedStatuses: 200..<500))
            }
            #expect(error?.kind == .decoding)
            #expect(error?.status?.code == 422)
            #expect(error?.headers?[HTTPField.Name("X-Trace")!] == "t-1")
            #expect(error?.body.map { String(decoding: $0, as: UTF8.self) } == #"{"problem":"no title"}"#)
        }
    }

    /// A stored answer is not the server's: a body from the cache that does not decode carries
    /// no status (monitors would report a response for a request that never went out).
    @Test(arguments: TransportKind.allCases)
    func anUndecodableStoredBodyCarriesNoStatus(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in .text("not an article", headers: [("Cache-Control", "max-age=600")]) }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let text = try await client.send(Endpoint<String>(path: "/article", decoding: .string))
            #expect(text == "not an article")
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/article")) }
            #expect(error?.kind == .decoding)
            #expect(error?.status == nil)
            #expect(server.requests.count == 1)
        }
    }
}
