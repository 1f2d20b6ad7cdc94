import Courier
import CourierTesting
import Foundation
import HTTPTypes
import Testing

@Suite("CourierTesting's stub transport, for users' own tests")
struct StubTransportTests {
    @Test
    func answersFromTheClosureAndRecordsRequests() async throws {
        let stub = StubTransport { request in
            request.head.path == "/v2/missing" ? .status(.notFound) : .json(#"{"id":3,"title":"stubbed"}"#)
        }
        let client = Client(configuration: .init(transport: stub, baseURL: URL(string: "https://api.example.com/v2")!))
        let article = try await client.send(Endpoint<Article>(method: .post, path: "/articles", body: .json(Article(id: 3, title: "new"))))
        #expect(article == Article(id: 3, title: "stubbed"))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/missing")) }
        #expect(error?.status == .notFound)
        #expect(stub.requests.map(\.head.path) == ["/v2/articles", "/v2/missing"])
        #expect(stub.requests.first?.head.method == .post)
        let sent = try #require(stub.requests.first?.body?.bytes)
        #expect(try JSONDecoder().decode(Article.self, from: sent) == Article(id: 3, title: "new"))
    }
}
