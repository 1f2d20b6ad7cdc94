import Courier
import CourierOpenAPI
import CourierTestServer
import Foundation
import HTTPTypes
import OpenAPIRuntime
import PetsAPI
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The pets API of `Examples/PetsAPI/openapi.yaml`, served by the in-process server: pet 42 is Rex
/// (cacheable for a minute), others are 404; POST /pets creates pet 7. `/pets/500` closes the connection.
enum PetsOrigin {
    static func handle(_ request: RecordedRequest) async -> ScriptedResponse {
        switch (request.method, request.path) {
        case ("GET", "/pets/42"):
            return .json(#"{"id":42,"name":"Rex"}"#, headers: [("Cache-Control", "max-age=60")])
        case ("GET", "/pets/500"):
            return ScriptedResponse().with(.closeBeforeResponding)
        case ("POST", "/pets"):
            let name = (try? JSONDecoder().decode([String: String].self, from: request.body))?["name"] ?? "?"
            return .json(#"{"id":7,"name":"\#(name)"}"#, status: 201)
        default:
            return .text("no such pet", status: 404)
        }
    }
}

/// A middleware that marks requests, to show a generated client's calls pass Courier's middleware.
struct OpenAPIStamp: Middleware, Hashable {
    func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        var request = request
        request.head.headerFields[HTTPField.Name("X-Through-Courier")!] = "yes"
        return try await next(request)
    }
}

@Suite("OpenAPI: a generated client over Courier, and an OpenAPI transport under Courier")
struct CourierOpenAPITests {
    @Test(arguments: TransportKind.allCases)
    func aGeneratedClientGetsCourierMiddlewareAndCache(_ kind: TransportKind) async throws {
        let server = try await http1Server(PetsOrigin.handle)
        try await withClient(
            kind, server: server,
            configure: {
                $0.middleware = [OpenAPIStamp()]
                $0.cache.store = MemoryCacheStore()
                $0.retry = .never
            }
        ) { courier in
            let pets = PetsAPI.Client(serverURL: server.baseURL, transport: CourierClientTransport(client: courier))
            guard case .ok(let ok) = try await pets.getPet(path: .init(petId: 42)), case .json(let rex) = ok.body else {
                Issue.record("pet 42 was not found")
                return
            }
            #expect(rex == .init(id: 42, name: "Rex"))
            #expect(server.requests.last?.header("X-Through-Courier") == "yes")
            // Courier's cache answers the second call (max-age=60): the server sees one request.
            _ = try await pets.getPet(path: .init(petId: 42))
            #expect(server.requests.count == 1)
            // A documented error status is the generated client's case, not an exception.
            guard case .notFound = try await pets.getPet(path: .init(petId: 1)) else {
                Issue.record("pet 1 was not a 404")
                return
            }
            // A JSON body goes out as the generated client encoded it.
            guard case .created(let created) = try await pets.createPet(body: .json(.init(name: "Tom"))), case .json(let tom) = created.body
            else {
                Issue.record("the pet was not created")
                return
            }
            #expect(tom == .init(id: 7, name: "Tom"))
            #expect(server.requests.last?.header("Content-Type") == "application/json; charset=utf-8")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aGeneratedClientReadsRawAnswersWhateverTheDefaultWireProtocolAndKeepsTrailingSlashes(_ kind: TransportKind) async throws {
        // An envelope default must not unbox (or fail) a generated client's answers; an absolute
        // URL's trailing slash is part of the resource.
        let server = try await http1Server { request in
            request.path == "/pets/42/" ? .json(#"{"id":42,"name":"Slash"}"#) : await PetsOrigin.handle(request)
        }
        try await withClient(kind, server: server, configure: { $0.defaultWireProtocol = EnvelopeProtocol() }) { courier in
            let pets = PetsAPI.Client(serverURL: server.baseURL, transport: CourierClientTransport(client: courier))
            guard case .ok(let ok) = try await pets.getPet(path: .init(petId: 42)), case .json(let rex) = ok.body else {
                Issue.record("pet 42 was not found")
                return
            }
            #expect(rex.name == "Rex")
            let slash = try await courier.send(
                Endpoint<Data>(path: server.baseURL.absoluteString + "/pets/42/", decoding: .data).wire(RESTProtocol()))
            #expect(String(decoding: slash, as: UTF8.self).contains("Slash"))
            #expect(server.requests.last?.path == "/pets/42/")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func identicalGeneratedCallsInFlightShareOneRequest(_ kind: TransportKind) async throws {
        // Courier's deduplication applies to a generated client's GETs too.
        let gate = Gate()
        let server = try await http1Server { request in
            await gate.wait()
            return await PetsOrigin.handle(request)
        }
        try await withClient(kind, server: server) { courier in
            let pets = PetsAPI.Client(serverURL: server.baseURL, transport: CourierClientTransport(client: courier))
            async let first = pets.getPet(path: .init(petId: 42))
            async let second = pets.getPet(path: .init(petId: 42))
            #expect(await eventually { server.requests.count == 1 && courier.deduplicationCounts.coalesced == 1 })
            await gate.open()
            let (a, b) = try await (first, second)
            #expect(a == b)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func courierFailuresReachTheGeneratedClientAsCourierErrors(_ kind: TransportKind) async throws {
        let server = try await http1Server(PetsOrigin.handle)
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { courier in
            let pets = PetsAPI.Client(serverURL: server.baseURL, transport: CourierClientTransport(client: courier))
            do {
                _ = try await pets.getPet(path: .init(petId: 500))
                Issue.record("a closed connection succeeded")
            } catch let error as ClientError {
                let underlying = error.underlyingError as? CourierError
                #expect(underlying?.kind == .transport)
                #expect(underlying?.context?.endpoint == "getPet")
            }
        }
    }

    /// A request body past the client's size limit (held in memory, so bounded) fails before
    /// anything is sent, with a `CourierError` of kind `invalidRequest` naming the limit: it was
    /// OpenAPIRuntime's own error, which the rest of Courier's failures never are.
    @Test(arguments: TransportKind.allCases)
    func aRequestBodyPastTheLimitIsATypedErrorAndNothingIsSent(_ kind: TransportKind) async throws {
        let server = try await http1Server(PetsOrigin.handle)
        try await withClient(kind, server: server, configure: { $0.maxResponseSize = 64 }) { courier in
            let pets = PetsAPI.Client(serverURL: server.baseURL, transport: CourierClientTransport(client: courier))
            do {
                _ = try await pets.createPet(body: .json(.init(name: String(repeating: "x", count: 100))))
                Issue.record("a body past the limit was sent")
            } catch let error as ClientError {
                let underlying = error.underlyingError as? CourierError
                #expect(underlying?.kind == .invalidRequest, "\(error.underlyingError)")
                #expect(underlying?.message.contains("64 bytes") == true, "\(error.underlyingError)")
            }
            #expect(server.requests.isEmpty)
        }
    }

    /// A minimal OpenAPI `ClientTransport` over Foundation's URLSession, standing for any third-party one.
    struct FoundationClientTransport: ClientTransport {
        func send(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String) async throws -> (HTTPResponse, HTTPBody?) {
            var urlRequest = URLRequest(url: URL(string: baseURL.absoluteString + (request.path ?? "/"))!)
            urlRequest.httpMethod = request.method.rawValue
            for field in request.headerFields { urlRequest.addValue(field.value, forHTTPHeaderField: field.name.rawName) }
            if let body { urlRequest.httpBody = try await Data(collecting: body, upTo: 1 << 20) }
            let (data, response) = try await URLSession.shared.data(for: urlRequest)
            let http = response as! HTTPURLResponse
            var fields = HTTPFields()
            for (name, value) in http.allHeaderFields {
                if let name = HTTPField.Name("\(name)") { fields.append(HTTPField(name: name, value: "\(value)")) }
            }
            return (HTTPResponse(status: .init(code: http.statusCode), headerFields: fields), HTTPBody(data))
        }
    }

    /// ``FoundationClientTransport``, whose response body fails after its first bytes with the
    /// error URLSession gives a read that timed out.
    struct TimingOutBodyTransport: ClientTransport {
        func send(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String) async throws -> (HTTPResponse, HTTPBody?) {
            let (response, whole) = try await FoundationClientTransport().send(
                request, body: body, baseURL: baseURL, operationID: operationID)
            let bytes = try await [UInt8](collecting: whole ?? HTTPBody(), upTo: 1 << 20)
            let cut = AsyncThrowingStream<HTTPBody.ByteChunk, any Error> { continuation in
                continuation.yield(bytes.prefix(4))
                continuation.finish(throwing: URLError(.timedOut))
            }
            return (response, HTTPBody(cut, length: .unknown))
        }
    }

    /// A failure while the body is read is mapped as one before the head is: a read that timed
    /// out is kind `timeout` (as Courier's own transports give it, and as the adapter's
    /// documentation promises), not a `transport` error with the platform's text.
    @Test
    func aBodyThatFailsHalfwayThroughAnOpenAPITransportKeepsItsKind() async throws {
        let server = try await http1Server(PetsOrigin.handle)
        let client = Client(
            configuration: .init(transport: OpenAPIClientTransportAdapter(TimingOutBodyTransport()), baseURL: server.baseURL) {
                $0.retry = .never
            })
        let error = await expectCourierError { _ = try await client.send(Endpoint<Pet>(path: "/pets/42")) }
        #expect(error?.kind == .timeout, "\(String(describing: error))")
        #expect(error?.couldNotConnect == false)
        try await server.stop()
    }

    struct Pet: Codable, Sendable, Equatable {
        var id: Int
        var name: String
    }

    @Test
    func anOpenAPITransportCarriesCouriersPipeline() async throws {
        // The other direction: Courier's stages (middleware, status check, decoding) above any ClientTransport.
        let server = try await http1Server(PetsOrigin.handle)
        let client = Client(
            configuration: .init(transport: OpenAPIClientTransportAdapter(FoundationClientTransport()), baseURL: server.baseURL) {
                $0.middleware = [OpenAPIStamp()]
                $0.retry = .never
            })
        let rex = try await client.send(Endpoint<Pet>(path: "/pets/42"))
        #expect(rex == Pet(id: 42, name: "Rex"))
        #expect(server.requests.last?.header("X-Through-Courier") == "yes")
        let tom = try await client.send(Endpoint<Pet>(method: .post, path: "/pets", body: .json(["name": "Tom"])))
        #expect(tom == Pet(id: 7, name: "Tom"))
        let missing = await expectCourierError { _ = try await client.send(Endpoint<Pet>(path: "/pets/1")) }
        #expect(missing?.kind == .httpStatus)
        #expect(missing?.status?.code == 404)
        let response = try await client.response(Endpoint<Pet>(path: "/pets/42"))
        #expect(response.version == .unknown)
        try await server.stop()
    }
}
