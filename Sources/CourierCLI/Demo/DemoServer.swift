import CourierTestServer
import Foundation

/// The embedded demo API: news, articles, image bytes, a slow endpoint and one that fails.
enum DemoServer {
    static let titles = [
        "HTTP/2 multiplexing in practice", "Why your network layer needs a pipeline", "Caching that respects RFC 9111",
        "Deduplicating requests", "Priorities on a 2-core phone", "TLS pinning without tears",
        "OAuth2 refresh races explained", "Streaming a gigabyte", "Typed endpoints", "Logs without secrets",
    ]

    static func respond(_ request: RecordedRequest) async -> ScriptedResponse {
        let parts = request.path.split(separator: "/").map(String.init)
        switch (request.method, parts.first, parts.count) {
        case ("GET", "news", 1):
            // Any page number from the query, however large or negative, lands in 1...last+1.
            let lastPage = (Self.titles.count + 2) / 3
            let page = min(max(Int(request.query["page"] ?? "1") ?? 1, 1), lastPage + 1)
            let start = min((page - 1) * 3, Self.titles.count)
            let items = (start..<min(start + 3, Self.titles.count)).map { NewsItem(id: $0 + 1, title: Self.titles[$0]) }
            var response = ScriptedResponse.json(
                encoding: NewsPage(page: page, items: items, next: start + 3 < Self.titles.count ? page + 1 : nil))
            response.headers += [("Cache-Control", "max-age=60"), ("ETag", "\"news-\(page)\"")]
            return response
        case ("GET", "news", 2):
            guard let id = Int(parts[1]), (1...Self.titles.count).contains(id) else {
                return .json(#"{"error":"no such article"}"#, status: 404)
            }
            let body = String(repeating: "Courier keeps the network layer honest. ", count: 20)
            return .json(encoding: Article(id: id, title: Self.titles[id - 1], body: body, author: "Courier Demo"))
        case ("GET", "images", 2):
            let id = Int(parts[1]) ?? 0
            var bytes = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            bytes.append(Data((0..<16_384).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ id) }))
            return ScriptedResponse(status: 200, headers: [("Content-Type", "image/png")], body: bytes)
        case ("GET", "events", 1):
            let events =
                "event: score\ndata: {\"home\":1,\"away\":0}\n\nevent: score\ndata: {\"home\":1,\"away\":1}\n\n: keep-alive\n\nevent: final\ndata: full time\n\n"
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "text/event-stream")], body: Data(events.utf8),
                behaviour: .chunked(chunkSize: 16, delay: .milliseconds(5)))
        case ("GET", "slow", 1):
            return .text("worth the wait").with(.stall(.milliseconds(300)))
        case (_, "fail", 1):
            return .json(#"{"error":"the demo backend is having a bad day"}"#, status: 503)
        default:
            return .json(#"{"error":"not found"}"#, status: 404)
        }
    }
}
