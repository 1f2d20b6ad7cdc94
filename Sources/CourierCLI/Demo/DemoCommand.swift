import ArgumentParser
import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Logging

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Start an embedded demo API over HTTP/2 and TLS, and run a sample client against it."
    )

    @Flag(name: .long, help: "Use HTTP/1.1 instead of HTTP/2.")
    var http1 = false

    @Option(name: .long, help: "Record the demo's traffic to this HAR 1.2 file (secrets redacted; opens in a browser's developer tools).")
    var har: String?

    func run() async throws {
        let certificates = try TestCertificates.generate()
        let server = try await TestServer.start(.tls(certificates), handler: DemoServer.respond)
        print("Demo API listening on \(server.baseURL) (TLS, HTTP/2 and HTTP/1.1 by ALPN, certificate from a CA made just now)")

        var transportConfiguration = AsyncHTTPClientTransport.Configuration()
        try transportConfiguration.trust(pemCertificates: certificates.caPEMBytes)
        transportConfiguration.httpVersion = self.http1 ? .http1Only : .automatic
        let transport = AsyncHTTPClientTransport(configuration: transportConfiguration)
        let logger = Logger(label: "courier.demo") { _ in PlainLogHandler(stream: .standardOutput, prefix: "  ") }
        let recorder = self.har.map { HARRecorder(writingTo: URL(fileURLWithPath: $0)) }
        let client = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.eventMonitors = recorder.map { [$0] } ?? []
                $0.logger = logger
                $0.defaultHeaders[.accept] = "application/json"
                $0.defaultHeaders[.userAgent] = "courier-demo/1.0"
                $0.cache.store = MemoryCacheStore()
            })

        var tally = Tally()
        do {
            try await self.runSample(client: client, tally: &tally)
        } catch {
            try? await transport.shutdown()
            try? await server.stop()
            throw error
        }
        try await transport.shutdown()
        let connections = server.connectionCount
        try await server.stop()
        print("")
        if let recorder, let path = self.har {
            try recorder.write(to: URL(fileURLWithPath: path))
            print("HAR: \(recorder.count) entries written to \(path)")
        }
        print(
            "Summary: \(tally.requests) requests, \(tally.failures) expected failures, \(tally.bytes) body bytes, versions \(tally.versions.sorted().joined(separator: ", ")), \(connections) TCP connection\(connections == 1 ? "" : "s") used"
        )
    }

    struct Tally {
        var requests = 0
        var failures = 0
        var bytes = 0
        var versions: Set<String> = []

        mutating func add<Value>(_ response: Response<Value>) {
            self.requests += 1
            self.bytes += response.byteCount
            self.versions.insert(response.version.description)
        }
    }

    private func runSample(client: Client, tally: inout Tally) async throws {
        print("\n1. The first page of news")
        let first = try await client.response(NewsAPI.list(page: 1))
        tally.add(first)
        for item in first.value.items { print("   #\(item.id) \(item.title)") }

        print("\n2. The remaining pages and every article, concurrently over one connection")
        var pages = [first.value]
        var next = first.value.next
        while let page = next {
            let response = try await client.response(NewsAPI.list(page: page))
            tally.add(response)
            pages.append(response.value)
            next = response.value.next
        }
        let ids = pages.flatMap(\.items).map(\.id)
        let articles = try await withThrowingTaskGroup(of: Response<Article>.self) { group in
            for id in ids { group.addTask { try await client.response(NewsAPI.article(id: id)) } }
            return try await group.reduce(into: [Response<Article>]()) { $0.append($1) }
        }
        for article in articles { tally.add(article) }
        print("   fetched \(articles.count) articles")

        print("\n3. Image bytes")
        let image = try await client.response(MediaAPI.image(id: 7))
        tally.add(image)
        print("   \(image.value.count) bytes, PNG signature: \(image.value.prefix(4).map { String(format: "%02X", $0) }.joined())")

        print("\n4. A slow endpoint, within its timeout")
        let slow = try await client.response(StatusAPI.slow(timeout: .seconds(5)))
        tally.add(slow)
        print("   \"\(slow.value)\" after \(slow.duration)")

        print("\n5. The same slow endpoint with a 100 ms timeout")
        do {
            _ = try await client.send(StatusAPI.slow(timeout: .milliseconds(100)))
        } catch let error as CourierError {
            tally.requests += 1
            tally.failures += 1
            print("   failed as expected: \(error)")
        }

        print("\n6. An endpoint that fails")
        do {
            try await client.send(StatusAPI.failing())
        } catch let error as CourierError {
            tally.requests += 1
            tally.failures += 1
            print("   failed as expected: kind \(error.kind), status \(error.status?.code ?? 0)")
            print("   context: \(error.context?.description ?? "-")")
            print("   \(error)")
        }

        print("\n7. The request of step 1 as cURL (secrets would be redacted)")
        print("   " + (try client.makeRequest(for: NewsAPI.list(page: 1))).cURLDescription())

        print("\n8. The first page again: fresh in the cache (max-age=60), so no request is sent")
        let cached = try await client.response(NewsAPI.list(page: 1))
        print("   source: \(cached.source), age \(cached.age ?? .zero), \(cached.value.items.count) items")

        print("\n9. The image downloaded to a file, with progress")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let download = client.download(MediaAPI.image(id: 7), to: DownloadDestination(directory: folder, fileName: "image.png"))
        var updates = 0
        for await _ in download.progress { updates += 1 }
        let file = try await download.value
        tally.requests += 1
        tally.bytes += Int(file.byteCount)
        print("   \(file.byteCount) bytes saved to \(file.url.lastPathComponent) (\(updates) progress updates)")

        print("\n10. Live scores as server-sent events, processed as they arrive")
        let live = try await client.stream(LiveAPI.scores())
        tally.requests += 1
        for try await event in live.events() {
            print("   \(event.event): \(event.data)")
        }
    }
}
