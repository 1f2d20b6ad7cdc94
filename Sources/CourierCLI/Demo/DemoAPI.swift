import Courier
import Foundation

/// The models of the demo API.
struct NewsItem: Codable, Sendable {
    var id: Int
    var title: String
}

struct NewsPage: Codable, Sendable {
    var page: Int
    var items: [NewsItem]
    var next: Int?
}

struct Article: Codable, Sendable {
    var id: Int
    var title: String
    var body: String
    var author: String
}

/// News endpoints, grouped by business area as static factories.
enum NewsAPI {
    static func list(page: Int) -> Endpoint<NewsPage> {
        Endpoint(name: "news.list", path: "/news", query: ["page": "\(page)"])
    }

    static func article(id: Int) -> Endpoint<Article> {
        Endpoint(name: "news.article", path: "/news/\(id)")
    }
}

/// Media endpoints.
enum MediaAPI {
    static func image(id: Int) -> Endpoint<Data> {
        Endpoint(name: "media.image", path: "/images/\(id)", decoding: .data)
    }
}

/// A live feed of server-sent events.
enum LiveAPI {
    static func scores() -> Endpoint<Data> {
        Endpoint(name: "live.scores", path: "/events", headers: [.accept: "text/event-stream"], decoding: .data)
    }
}

/// Endpoints that show how slow and failing calls look.
enum StatusAPI {
    static func slow(timeout: Duration? = nil) -> Endpoint<String> {
        Endpoint(name: "status.slow", path: "/slow", timeout: timeout, decoding: .string)
    }

    static func failing() -> Endpoint<Void> {
        Endpoint(name: "status.failing", method: .post, path: "/fail", decoding: .none)
    }
}
