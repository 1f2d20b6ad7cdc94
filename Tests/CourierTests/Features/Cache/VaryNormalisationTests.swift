import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// RFC 9111 §4.1: the values of the fields a response varies on may be normalised "in a manner
/// consistent with the field's own specification" before they are compared: two requests whose
/// values differ only in what the field's specification ignores select the same stored variant.
@Suite("HTTP cache: variants matched as their fields' specifications allow (RFC 9111 §4.1)")
struct VaryNormalisationTests {
    /// RFC 9110 §5.6.1: empty list members and the white space around members are not part of
    /// the value; §12.4.2: the weight's name is case-insensitive, `q=1` is the default weight,
    /// and a weight is a number (`0.80` is `0.8`).
    @Test(arguments: [
        // Accept-Language: language ranges are case-insensitive (RFC 4647 §2); order kept.
        ("accept-language", "en-US, fr;q=0.8", "EN-us ,, fr; Q=0.80", true),
        ("accept-language", "en-US, fr;q=0.8", "en-us;q=1.000,fr;q=.8", false),  // ".8" is not a qvalue: kept as written
        ("accept-language", "en-US;q=1.0, fr;q=0.8", "en-US, fr;q=0.8", true),
        ("accept-language", "en-US, fr", "fr, en-US", false),
        ("accept-language", "en", "en-GB", false),
        // Accept-Encoding: codings are case-insensitive (RFC 9110 §8.4.1) and order carries no preference.
        ("accept-encoding", "gzip, br;q=0.5", "BR; q=0.5,GZIP", true),
        ("accept-encoding", "gzip", "gzip, br", false),
        ("accept-encoding", "gzip;q=0", "gzip", false),
        // Accept: type, subtype and parameter names are case-insensitive (§8.3.1); parameter values and order are kept.
        ("accept", "application/json, text/plain;q=0.5", "Application/JSON,text/plain; Q=0.500", true),
        ("accept", "text/plain;format=Flowed", "text/plain;FORMAT=Flowed", true),
        ("accept", "text/plain;format=Flowed", "text/plain;format=flowed", false),
        ("accept", "application/json, text/plain", "text/plain, application/json", false),
        // Any other field: only the white space around its members is ignored.
        ("x-tenant", "a, b", "a,b", true),
        // RFC 9110 §5.6.1: empty list members are ignored.
        ("x-tenant", "a, , b", "a, b", true),
        ("x-tenant", "a, ", "a", true),
        ("x-tenant", "A", "a", false),
        // RFC 9110 §5.6.4: inside a quoted string nothing is ignored.
        ("accept", "text/plain;p=\"a, b\"", "text/plain;p=\"a,b\"", false),
        ("accept", "text/plain;p=\"A,B\"", "text/plain;p=\"A,b\"", false),
        ("accept", "text/plain;p=\"a;q=1;b\"", "text/plain;p=\"a;b\"", false),
        ("x-tenant", "\"a, b\"", "\"a,b\"", false),
        // Only ASCII letters fold, and only spaces and tabs are white space.
        ("accept-language", "\u{212A}o", "ko", false),  // KELVIN SIGN is not K
        ("accept-language", "en\u{00A0}", "en", false),
    ])
    func valuesAreComparedAsTheirFieldDefinesThem(_ name: String, _ first: String, _ second: String, _ same: Bool) throws {
        let field = try #require(HTTPField.Name(name))
        let a = VaryValues.value(of: name, in: [field: first])
        let b = VaryValues.value(of: name, in: [field: second])
        #expect(a != nil)
        #expect((a == b) == same, "\(name): \(first) → \(a ?? "nil"), \(second) → \(b ?? "nil")")
    }

    @Test
    func aFieldInSeveralLinesIsOneList() throws {
        var fields = HTTPFields()
        fields.append(HTTPField(name: .acceptEncoding, value: "br"))
        fields.append(HTTPField(name: .acceptEncoding, value: " GZIP"))
        #expect(
            VaryValues.value(of: "accept-encoding", in: fields)
                == VaryValues.value(of: "accept-encoding", in: [.acceptEncoding: "gzip, br"]))
        #expect(VaryValues.value(of: "accept-encoding", in: [:]) == nil)
    }

    @Test
    func weightsAreNumbers() {
        #expect(VaryValues.weight("1.000") == "1")
        #expect(VaryValues.weight("0.800") == "0.8")
        #expect(VaryValues.weight("0") == "0")
        #expect(VaryValues.weight("0.") == "0")
        #expect(VaryValues.weight("0.001") == "0.001")
        #expect(VaryValues.weight("1.5") == nil)
        #expect(VaryValues.weight("0.0001") == nil)
        #expect(VaryValues.weight("2") == nil)
        #expect(VaryValues.weight("") == nil)
        #expect(VaryValues.weight("0.8x") == nil)
    }

    /// Through the cache, in memory and on disk, on both transports: requests whose
    /// `Accept-Language` and `Accept` differ only in letter case, white space, empty members and
    /// a weight of 1 get the stored variant; another order of languages is another variant.
    @Test(arguments: TransportKind.allCases, [false, true])
    func equivalentValuesSelectTheStoredVariant(_ kind: TransportKind, onDisk: Bool) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-vary-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store: any CacheStore = onDisk ? DiskCacheStore(directory: directory) : MemoryCacheStore()
        let serial = Locked(0)
        let server = try await http1Server { request in
            let number = serial.withLock {
                $0 += 1
                return $0
            }
            return .text(
                "\(number) \(request.header("accept-language") ?? "-")",
                headers: [("Cache-Control", "max-age=600"), ("Vary", "Accept-Language, Accept")])
        }
        try await withClient(kind, server: server, configure: { $0.cache = CacheConfiguration(store: store) }) { client in
            func get(_ language: String, _ accept: String) async throws -> Response<String> {
                var endpoint = Endpoint<String>(
                    path: "/greeting", headers: [.acceptLanguage: language, .accept: accept], decoding: .string)
                endpoint.deduplication = .disabled
                return try await client.response(endpoint)
            }
            let first = try await get("en-US, fr;q=0.8", "text/plain, application/json;q=0.5")
            #expect(first.source == .network)
            let same = try await get("EN-us ,, fr; Q=0.80", "Text/Plain,application/JSON; q=0.500")
            #expect(same.source == .cache)
            #expect(same.value == first.value)
            let weighted = try await get("en-US;q=1.0, fr;q=0.8", "text/plain;q=1, application/json;q=0.5")
            #expect(weighted.source == .cache)
            // Order is kept for Accept-Language: servers use it to break ties between equal weights.
            let reordered = try await get("fr;q=0.8, en-US", "text/plain, application/json;q=0.5")
            #expect(reordered.source == .network)
            #expect(server.requests.count == 2)
        }
    }
}
