import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// What makes two logical requests the same for deduplication, on the key alone (the seams with
/// the cache, middleware and wire protocols are in `LogicalIdentityTests`).
@Suite("The logical key: equal for the same request, different for a different one")
struct LogicalKeyTests {
    let endpoint = EndpointDescription.erasing(Endpoint<Data>(path: "/items"))

    func key(
        _ scheme: String = "https", _ host: String = "api.example.com", path: String = "/items?a=1",
        method: HTTPRequest.Method = .get, fields: [(String, String)] = [], body: Data? = nil, partition: String = "",
        ignored: [HTTPField.Name] = []
    ) -> LogicalKey? {
        var head = HTTPRequest(method: method, scheme: scheme, authority: host, path: path)
        for (name, value) in fields { head.headerFields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        let request = Request(head: head, body: body.map { RequestBody.data($0) })
        return LogicalKey(request: request, endpoint: self.endpoint, partition: partition, wire: "", ignoredHeaders: ignored)
    }

    func same(_ a: LogicalKey?, _ b: LogicalKey?) -> Bool {
        guard let a, let b else { return false }
        return a == b && a.hashValue == b.hashValue && Set([a, b]).count == 1
    }

    /// RFC 3986 §6.2.2.1: the scheme and host are case-insensitive; an empty query is no query.
    @Test
    func schemeAndHostInAnyCaseAndAnEmptyQueryAreTheSameRequest() {
        #expect(self.same(self.key("https", "api.example.com"), self.key("HTTPS", "API.Example.COM")))
        #expect(self.same(self.key(path: "/items"), self.key(path: "/items?")))
        // RFC 3986 §3.4: a query may end in `?`; only an empty query is none. `q=what?` and
        // `q=what` were one request, and the second caller got the first one's answer.
        #expect(self.key(path: "/search?q=what?") != self.key(path: "/search?q=what"))
        #expect(self.key(path: "/search??") != self.key(path: "/search?"))
        #expect(self.same(self.key(path: "/search?q=what?"), self.key(path: "/search?q=what?")))
        #expect(self.key(path: "/Items") != self.key(path: "/items"))
        #expect(self.key(path: "/items?a=1&b=2") != self.key(path: "/items?b=2&a=1"))
        #expect(self.key("http") != self.key("https"))
        #expect(self.key("https", "api.example.com:8443") != self.key("https", "api.example.com"))
    }

    /// Equal keys hash equal (the `Hashable` contract): values that are the same text in two
    /// Unicode forms, a field sent with another indexing strategy, a default port written out.
    @Test
    func equalKeysHashEqual() {
        #expect(self.same(self.key(fields: [("X-Name", "caf\u{E9}")]), self.key(fields: [("X-Name", "cafe\u{301}")])))
        var head = HTTPRequest(method: .get, scheme: "https", authority: "api.example.com", path: "/items?a=1")
        head.headerFields.append(HTTPField(name: .authorization, value: "Bearer t"))
        let plain = LogicalKey(request: Request(head: head), endpoint: self.endpoint, partition: "", wire: "", ignoredHeaders: [])
        head.headerFields[0].indexingStrategy = .avoid
        let avoided = LogicalKey(request: Request(head: head), endpoint: self.endpoint, partition: "", wire: "", ignoredHeaders: [])
        #expect(self.same(plain, avoided))
        #expect(self.same(self.key("https", "api.example.com:443"), self.key("https", "API.example.com")))
        #expect(self.same(self.key("http", "api.example.com:80"), self.key("http", "api.example.com")))
        #expect(self.key("http", "api.example.com:443") != self.key("http", "api.example.com"))
    }

    /// An endpoint's own retry policy is part of the key: the shared exchange retries as its
    /// first caller's endpoint says.
    @Test
    func endpointsThatRetryDifferentlyAreDifferentRequests() {
        let request = Request(head: HTTPRequest(method: .get, scheme: "https", authority: "api.example.com", path: "/items"))
        func key(_ policy: RetryPolicy?) -> LogicalKey? {
            var endpoint = Endpoint<Data>(path: "/items")
            endpoint.retryPolicy = policy
            return LogicalKey(request: request, endpoint: .erasing(endpoint), partition: "", wire: "", ignoredHeaders: [])
        }
        #expect(key(.never) != key(nil))
        #expect(key(.never) != key(.standard))
        #expect(self.same(key(.never), key(.never)))
        #expect(self.same(key(nil), key(nil)))
    }

    /// RFC 9110 §5.3: the order of fields with different names carries no meaning; the order of
    /// fields of one name does.
    @Test
    func fieldsOfDifferentNamesInAnyOrderAreTheSameRequest() {
        #expect(
            self.same(self.key(fields: [("Accept", "a/b"), ("X-Tenant", "7")]), self.key(fields: [("x-tenant", "7"), ("accept", "a/b")])))
        #expect(self.key(fields: [("X-Tenant", "7")]) != self.key(fields: [("X-Tenant", "8")]))
        #expect(self.key(fields: [("X-Tenant", "7")]) != self.key(fields: []))
        #expect(self.key(fields: [("Via", "a"), ("Via", "b")]) != self.key(fields: [("Via", "b"), ("Via", "a")]))
        let trace = [HTTPField.Name("X-Trace")!]
        #expect(self.same(self.key(fields: [("X-Trace", "1")], ignored: trace), self.key(fields: [("X-Trace", "2")], ignored: trace)))
    }

    @Test
    func methodBodyAndPartitionEachMakeADifferentRequest() {
        #expect(self.key(method: .get) != self.key(method: .head))
        #expect(self.same(self.key(method: .post, body: Data("a".utf8)), self.key(method: .post, body: Data("a".utf8))))
        #expect(self.key(method: .post, body: Data("a".utf8)) != self.key(method: .post, body: Data("b".utf8)))
        #expect(self.key(partition: "alice") != self.key(partition: "bob"))
        var planned = self.key()
        planned?.cachePlan = "if-none-match:\"v1\""
        #expect(planned != self.key())
    }
}
