import Courier
import CourierProtobuf
import CourierTestServer
import Foundation
import HTTPTypes
import NewsProto
import SwiftProtobuf
import Testing

@Suite("Protocol Buffers bodies and decodings through the whole pipeline")
struct ProtobufTests {
    /// A server that speaks protobuf: it reads an `ArticleDraft` and answers an `Article`.
    static let routes: TestServer.Handler = { request in
        switch request.path {
        case "/articles":
            guard request.header("content-type") == "application/x-protobuf",
                let draft = try? Courier_Tests_ArticleDraft(serializedBytes: request.body)
            else { return .text("expected a protobuf ArticleDraft", status: 415) }
            var article = Courier_Tests_Article()
            article.id = 42
            article.title = draft.title
            article.tags = draft.tags
            article.coverSize = Int32(draft.cover.count)
            article.labels = ["lang": "en", "emoji": "✓"]
            let bytes: Data = (try? article.serializedBytes()) ?? Data()
            return ScriptedResponse(status: 201, headers: [("Content-Type", "application/x-protobuf")], body: bytes)
        case "/cached":
            var article = Courier_Tests_Article()
            article.id = 7
            article.title = "cached"
            let bytes: Data = (try? article.serializedBytes()) ?? Data()
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/x-protobuf"), ("Cache-Control", "max-age=600")], body: bytes)
        case "/json-form":
            return .json(#"{"id":"9","title":"as json","tags":["a"],"unknownField":1}"#)
        case "/garbage":
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/x-protobuf")], body: Data([0x0a, 0xff, 0xff, 0xff]))
        case "/no-content":
            return ScriptedResponse(status: 204)
        case "/empty-untyped":
            return ScriptedResponse(status: 200)
        case "/empty-defaults":
            return ScriptedResponse(status: 200, headers: [("Content-Type", "application/x-protobuf")])
        case "/html":
            return ScriptedResponse(status: 200, headers: [("Content-Type", "text/html")], body: Data("<html>login</html>".utf8))
        default:
            return .text("not found", status: 404)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aMessageGoesOutAndOneComesBackInBinaryForm(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server) { client in
            var draft = Courier_Tests_ArticleDraft()
            draft.title = "Protobuf, über alles"
            draft.tags = ["swift", "wire"]
            draft.cover = Data(repeating: 0xAB, count: 3000)
            let endpoint = Endpoint<Courier_Tests_Article>(
                name: "articles.create", method: .post, path: "/articles", body: try .protobuf(draft), decoding: .protobuf
            )
            let response = try await client.response(endpoint)
            #expect(response.status.code == 201)
            #expect(response.value.id == 42)
            #expect(response.value.title == "Protobuf, über alles")
            #expect(response.value.tags == ["swift", "wire"])
            #expect(response.value.coverSize == 3000)
            #expect(response.value.labels == ["lang": "en", "emoji": "✓"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func theJSONMappingDecodesAndIgnoresUnknownFields(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server) { client in
            let article = try await client.send(Endpoint<Courier_Tests_Article>(path: "/json-form", decoding: .protobufJSON))
            #expect(article.id == 9)
            #expect(article.title == "as json")
            #expect(article.tags == ["a"])
        }
    }

    /// A 204 (RFC 9110 §15.3.5: no content) is no message: decoding it gave a message of
    /// defaults as a success, which an app could store over real data. `google.protobuf.Empty`
    /// is nothing but that, and an empty 200, typed or not, is the message of defaults.
    @Test(arguments: TransportKind.allCases)
    func aResponseWithoutContentIsNoMessageOfDefaults(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<Courier_Tests_Article>(method: .put, path: "/no-content", decoding: .protobuf))
            }
            #expect(error?.kind == .decoding)
            let empty = try await client.send(Endpoint<Google_Protobuf_Empty>(method: .delete, path: "/no-content", decoding: .protobuf))
            #expect(empty == Google_Protobuf_Empty())
            for path in ["/empty-defaults", "/empty-untyped"] {
                let defaults = try await client.send(Endpoint<Courier_Tests_Article>(path: path, decoding: .protobuf))
                #expect(defaults == Courier_Tests_Article(), "\(path)")
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func badBytesAndAWrongContentTypeAreDecodingErrors(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server) { client in
            let garbage = await expectCourierError {
                _ = try await client.send(Endpoint<Courier_Tests_Article>(path: "/garbage", decoding: .protobuf))
            }
            #expect(garbage?.kind == .decoding)
            #expect(garbage?.message.contains("courier.tests.Article") == true)
            let html = await expectCourierError {
                _ = try await client.send(Endpoint<Courier_Tests_Article>(path: "/html", decoding: .protobuf))
            }
            #expect(html?.kind == .decoding)
            #expect(html?.message.contains("expected a protobuf response, got Content-Type text/html") == true)
            // A server that refuses the body says so with a status, not a silent success.
            let refused = await expectCourierError {
                _ = try await client.send(
                    Endpoint<Courier_Tests_Article>(
                        method: .post, path: "/articles", body: .data(Data("{}".utf8), contentType: "application/json"), decoding: .protobuf
                    ))
            }
            #expect(refused?.status?.code == 415)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func protobufAnswersAreCachedAndSharedLikeAnyOther(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.routes)
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let endpoint = Endpoint<Courier_Tests_Article>(path: "/cached", decoding: .protobuf)
            async let first = client.response(endpoint)
            async let second = client.response(endpoint)
            let (a, b) = try await (first, second)
            #expect(a.value == b.value)
            #expect(a.value.title == "cached")
            let third = try await client.response(endpoint)
            #expect(third.source == .cache)
            #expect(third.value.id == 7)
            #expect(server.requests.count == 1)
        }
    }
}
