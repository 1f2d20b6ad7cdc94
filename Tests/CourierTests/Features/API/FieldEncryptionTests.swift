import Courier
import CourierTestServer
import Crypto
import Foundation
import Testing

/// Selected JSON fields sealed with AES-GCM on the way out and opened on the way back.
@Suite("Field encryption wire protocol")
struct FieldEncryptionTests {
    struct Payment: Codable, Sendable, Equatable {
        var amount: Int
        var card: String
        var cvv: Int
    }

    static let key = SymmetricKey(size: .bits256)

    /// Echoes the request body; `/tamper` flips one byte of the sealed `card`; `/plain` answers unsealed.
    static func origin(_ request: RecordedRequest) async -> ScriptedResponse {
        var object = (try? JSONSerialization.jsonObject(with: request.body) as? [String: Any]) ?? [:]
        if request.path == "/tamper", let text = object["card"] as? String, var bytes = Data(base64Encoded: text) {
            bytes[bytes.count / 2] ^= 0x01
            object["card"] = bytes.base64EncodedString()
        }
        if request.path == "/plain" { return .json(#"{"amount":1,"card":"4111","cvv":123}"#) }
        let body = (try? JSONSerialization.data(withJSONObject: object)) ?? Data()
        return ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)
    }

    static func pay(_ path: String, key: SymmetricKey = Self.key) -> Endpoint<Payment> {
        Endpoint<Payment>(method: .post, path: path, body: .json(Payment(amount: 42, card: "4111 1111 1111 1111", cvv: 737)))
            .wire(FieldEncryptionProtocol(fields: ["card", "cvv"], key: key))
    }

    @Test(arguments: TransportKind.allCases)
    func sealedFieldsTravelEncryptedAndComeBackOpened(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let echoed = try await client.send(Self.pay("/echo"))
            #expect(echoed == Payment(amount: 42, card: "4111 1111 1111 1111", cvv: 737))
            // On the wire: the amount in clear, card and cvv as base64 AES-GCM boxes.
            let request = try #require(server.requests.first)
            let sent = try #require(try JSONSerialization.jsonObject(with: request.body) as? [String: Any])
            #expect(sent["amount"] as? Int == 42)
            let card = try #require(sent["card"] as? String)
            #expect(!card.contains("4111"))
            #expect(Data(base64Encoded: card)?.count == 12 + "\"4111 1111 1111 1111\"".utf8.count + 16)
            #expect(sent["cvv"] is String)
        }
    }

    /// A key AES-GCM cannot use is the app's mistake: kind `invalidRequest` before anything is
    /// sent, for a call with a body and one without (whose sealed answer would otherwise fail as
    /// a field that was tampered with, code `fieldIntegrity`).
    @Test(arguments: TransportKind.allCases)
    func aKeyOfAWrongSizeIsAnInvalidRequestNotATamperedField(_ kind: TransportKind) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let short = SymmetricKey(size: SymmetricKeySize(bitCount: 64))
            let posted = await expectCourierError { _ = try await client.send(Self.pay("/echo", key: short)) }
            #expect(posted?.kind == .invalidRequest)
            let fetched = await expectCourierError {
                _ = try await client.send(Endpoint<Payment>(path: "/plain").wire(FieldEncryptionProtocol(fields: ["card"], key: short)))
            }
            #expect(fetched?.kind == .invalidRequest)
            #expect(fetched?.code != "fieldIntegrity")
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aResponseThatIsNoJSONObjectPassesAsItIs(_ kind: TransportKind) async throws {
        // Text, or an image, has no fields to open: only a JSON object the parser refuses fails.
        let server = try await http1Server { _ in .text("hi") }
        try await withClient(kind, server: server) { client in
            let text = try await client.send(
                Endpoint<String>(path: "/terms.txt", decoding: .string).wire(FieldEncryptionProtocol(fields: ["card"], key: Self.key)))
            #expect(text == "hi")
        }
    }

    /// A card sealed under another key, as a server with the wrong key would send it.
    static let foreignCard: String = {
        let sealed = try! AES.GCM.seal(Data("\"4111\"".utf8), using: SymmetricKey(size: .bits256), authenticating: Data("card".utf8))
        return sealed.combined!.base64EncodedString()
    }()

    @Test(arguments: TransportKind.allCases, ["/tamper", "/foreign", "/swapped", "/overflow", "/surrogate", "/bom"])
    func aTamperedForeignOrMovedFieldFailsTypedAndDeliversNothing(_ kind: TransportKind, _ path: String) async throws {
        let server = try await http1Server { request in
            switch request.path {
            case "/foreign":
                return .json(#"{"amount":1,"card":"\#(Self.foreignCard)","cvv":1}"#)
            case "/overflow":
                // A plain card beside a number no Double holds: JSONSerialization refuses the
                // body, JSONDecoder reads it (the number unused), so the card went unchecked.
                return .json(#"{"amount":1,"card":"4111","cvv":1,"pad":1e400}"#)
            case "/surrogate":
                // The same with a lone surrogate escape in an unused field.
                return .json(#"{"amount":1,"card":"4111","cvv":1,"pad":"\ud800"}"#)
            case "/bom":
                // The same behind a byte order mark, which JSONDecoder skips.
                return ScriptedResponse(
                    status: 200, headers: [("Content-Type", "application/json")],
                    body: Data([0xEF, 0xBB, 0xBF]) + Data(#"{"amount":1,"card":"4111","cvv":1,"pad":1e400}"#.utf8))
            case "/swapped":
                // The sealed cvv moved into card: the field name is authenticated, so it fails.
                let object = (try? JSONSerialization.jsonObject(with: request.body) as? [String: Any]) ?? [:]
                let cvv = object["cvv"] as? String ?? ""
                return .json(#"{"amount":1,"card":"\#(cvv)","cvv":"\#(cvv)"}"#)
            default:
                return await Self.origin(request)
            }
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Self.pay(path)) }
            #expect(error?.kind == .decoding)
            #expect(error?.code == "fieldIntegrity")
        }
    }

    struct CardHolder: Codable, Sendable {
        var amount: Int
        var cardNumber: String?
    }

    /// A field sent under another spelling of a sealed field's name (`cardNumber`, `CARD_NUMBER`
    /// for `card_number`) fails the integrity check: a decoder that converts from snake case
    /// reads it as the sealed field, which would arrive in clear, unchecked (before, it did).
    @Test(arguments: TransportKind.allCases, ["cardNumber", "CARD_NUMBER", "card-number"])
    func aSealedFieldSpelledAnotherWayFailsTyped(_ kind: TransportKind, _ spelling: String) async throws {
        let server = try await http1Server { _ in .json(#"{"amount":1,"\#(spelling)":"4111"}"#) }
        try await withClient(
            kind, server: server,
            configure: {
                let decoder = JSONDecoder()
                decoder.keyDecodingStrategy = .convertFromSnakeCase
                $0.decoder = decoder
            }
        ) { client in
            let endpoint = Endpoint<CardHolder>(path: "/holder").wire(FieldEncryptionProtocol(fields: ["card_number"], key: Self.key))
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .decoding)
            #expect(error?.code == "fieldIntegrity")
            #expect(error?.message.contains("4111") == false)
        }
    }

    /// Runs `body` with a caching client against ``origin(_:)``, whose answers say `max-age=600`
    /// (and, with `contentLocation`, name their own path in `Content-Location`).
    func withCachingOrigin(
        _ kind: TransportKind, contentLocation: Bool = false, _ body: (Client, TestServer, MemoryCacheStore) async throws -> Void
    ) async throws {
        let server = try await http1Server { request in
            var response = await Self.origin(request)
            response.headers.append(("Cache-Control", "max-age=600"))
            if contentLocation { response.headers.append(("Content-Location", request.path)) }
            return response
        }
        let store = MemoryCacheStore()
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache.store = store
                $0.retry = .never
            }
        ) { client in
            try await body(client, server, store)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func decryptedAnswersNeverRestInTheCache(_ kind: TransportKind) async throws {
        // The payload holds the opened fields: the cache must not store it, whatever the server says.
        try await self.withCachingOrigin(kind) { client, server, store in
            var endpoint = Self.pay("/echo")
            endpoint.cachePolicy = CachePolicy.http.allowingAnyMethod()
            _ = try await client.send(endpoint)
            _ = try await client.send(endpoint)
            #expect(server.requests.count == 2)
            #expect(store.count == 0)
            // The same policy stores an answer that holds no opened field: the store above was
            // empty because of the wire protocol, not because nothing is ever stored.
            var plain = Endpoint<Data>(
                method: .post, path: "/plain", body: .json(Payment(amount: 1, card: "4111", cvv: 123)), decoding: .data)
            plain.cachePolicy = CachePolicy.http.allowingAnyMethod()
            _ = try await client.send(plain)
            #expect(store.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aDecryptedAnswerIsNotStoredForItsContentLocationEither(_ kind: TransportKind) async throws {
        // Under the default policy a POST answer whose Content-Location is its own URL may be
        // stored for a later GET (RFC 9110 §9.3.3): not when its payload holds opened fields.
        try await self.withCachingOrigin(kind, contentLocation: true) { client, server, store in
            _ = try await client.send(Self.pay("/echo"))
            #expect(server.requests.count == 1)
            #expect(store.count == 0)
            // The same answer to a plain POST is stored for its URL: the store was empty because
            // of the wire protocol, not because this path never stores.
            let plain = Endpoint<Data>(
                method: .post, path: "/plain", body: .json(Payment(amount: 1, card: "4111", cvv: 123)), decoding: .data)
            _ = try await client.send(plain)
            #expect(store.count == 1)
        }
    }

    /// Refused in the wire stage, before any transport is involved: one transport is enough.
    @Test
    func aBodyThatIsNotAJSONObjectIsRefusedBeforeSending() async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(.asyncHTTPClient, server: server) { client in
            let endpoint = Endpoint<Payment>(
                method: .post, path: "/echo", body: .data(Data("card=4111".utf8), contentType: "application/x-www-form-urlencoded")
            )
            .wire(FieldEncryptionProtocol(fields: ["card"], key: Self.key))
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .invalidRequest)
            #expect(server.requests.isEmpty)
        }
    }
}
