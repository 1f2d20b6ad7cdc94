import Courier
import Foundation
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
}
