import ArgumentParser
import Courier
import CourierAsyncHTTPClient
import CourierOutbox
import Foundation
import HTTPTypes

/// `courier outbox`: inspect and drive an outbox file.
struct OutboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outbox",
        abstract: "Inspect and drive a durable outbox file (SQLite).",
        subcommands: [Enqueue.self, List.self, Run.self, Retry.self, Purge.self]
    )

    struct Options: ParsableArguments {
        @Option(name: .long, help: "The outbox database file.")
        var db: String

        @Option(name: .long, help: "A PEM file of CA certificates to trust instead of the system's.")
        var cacert: String?

        /// Opens the outbox with a client of its own; `body` runs, then the transport shuts down.
        ///
        /// Only a command that delivers (`delivers`) opens it as its deliverer: it prunes, and
        /// puts items found in flight back in line. Any other may be looking at the file of an app
        /// that is delivering from it, whose items in flight are its own (put back in line, they
        /// would be sent a second time, or marked dead on their last attempt).
        func withOutbox<T>(keepSeconds: Int? = nil, delivers: Bool = false, _ body: (Outbox) async throws -> T) async throws -> T {
            var configuration = AsyncHTTPClientTransport.Configuration()
            if let cacert { try configuration.trust(pemCertificates: Array(Data(contentsOf: URL(fileURLWithPath: cacert)))) }
            let transport = AsyncHTTPClientTransport(configuration: configuration)
            let client = Client(configuration: .init(transport: transport) { $0.defaultHeaders[.userAgent] = "courier/1.0" })
            do {
                var outboxConfiguration = Outbox.Configuration()
                outboxConfiguration.prunesOnOpen = delivers
                outboxConfiguration.recoversOnOpen = delivers
                if let keepSeconds {
                    outboxConfiguration.deliveredRetention = .seconds(keepSeconds)
                    outboxConfiguration.deadRetention = .seconds(keepSeconds)
                }
                let outbox = try Outbox(path: self.db, client: client, configuration: outboxConfiguration)
                let result = try await body(outbox)
                try await transport.shutdown()
                return result
            } catch {
                try? await transport.shutdown()
                throw error
            }
        }
    }

    struct Enqueue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Store a request durably; print its id.")

        @OptionGroup var options: Options

        @Argument(help: "The method (POST, PUT, PATCH, DELETE, GET).")
        var method: String

        @Argument(help: "The absolute URL.")
        var url: String

        @Option(name: .long, help: "A JSON body.")
        var json: String?

        @Option(name: .long, help: "The queue (items of one queue are delivered in order).")
        var queue = "default"

        @Option(name: .long, help: "The app's reference for the intent; an item with it already stored is not stored again.")
        var reference: String?

        @Option(name: .long, help: "Store this many items, with references PREFIX-0 … PREFIX-(N-1) when --reference is given as PREFIX.")
        var count = 1

        @Option(name: .long, help: "With --count: spread the items over this many queues, QUEUE-0 … QUEUE-(N-1).")
        var queues = 1

        @Option(name: .long, help: "With --count: wait this many milliseconds between items, as an app producing them over time.")
        var intervalMs = 0

        func validate() throws {
            // Checked before the outbox is opened: `--count 0` stored one item, silently.
            guard self.count >= 1 else { throw ValidationError("--count must be at least 1") }
            guard self.queues >= 1 else { throw ValidationError("--queues must be at least 1") }
            guard self.intervalMs >= 0 else { throw ValidationError("--interval-ms must not be negative") }
        }

        func run() async throws {
            guard let method = HTTPRequest.Method(self.method.uppercased()) else {
                throw ValidationError("'\(self.method)' is not a method")
            }
            try await self.options.withOutbox { outbox in
                for index in 0..<max(1, self.count) {
                    var json = self.json
                    if self.count > 1 { json = json ?? #"{"n":\#(index)}"# }
                    let endpoint = Endpoint<Data>(
                        name: "outbox.\(method.rawValue.lowercased())", method: method, path: self.url,
                        body: json.map { .data(Data($0.utf8), contentType: "application/json") }, decoding: .data
                    )
                    let reference = self.reference.map { self.count > 1 ? "\($0)-\(index)" : $0 }
                    let queue = self.queues > 1 ? "\(self.queue)-\(index % self.queues)" : self.queue
                    let id = try outbox.enqueue(endpoint, queue: queue, reference: reference)
                    if self.count == 1 { print(id) }
                    if self.intervalMs > 0 { try await Task.sleep(for: .milliseconds(self.intervalMs)) }
                }
                if self.count > 1 { print("\(self.count) items stored") }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the items: id, state, attempts, queue, method, URL, result or error.")

        @OptionGroup var options: Options

        @Option(name: .long, help: "Only items in this state: pending, inFlight, delivered, dead.")
        var state: String?

        func run() async throws {
            let state = try self.state.map { name -> OutboxItem.State in
                guard let state = OutboxItem.State(rawValue: name) else { throw ValidationError("unknown state '\(name)'") }
                return state
            }
            try await self.options.withOutbox { outbox in
                let items = try outbox.items(in: state)
                for item in items {
                    let outcome = item.result.map { "status \($0.status)" } ?? item.lastError ?? "-"
                    print(
                        "\(item.id)\t\(item.state.rawValue)\t\(item.attempts)/\(item.maxAttempts)\t\(item.queue)\t\(item.method.rawValue) \(Redactor.standard.redact(urlString: item.url))\t\(outcome)"
                    )
                }
                var counts: [String: Int] = [:]
                for item in items { counts[item.state.rawValue, default: 0] += 1 }
                print(
                    "total \(items.count): "
                        + OutboxItem.State.allCases.map { "\($0.rawValue) \(counts[$0.rawValue] ?? 0)" }.joined(separator: ", "))
            }
        }
    }

    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deliver until no item is pending (waiting out backoffs); print the counts.")

        @OptionGroup var options: Options

        func run() async throws {
            try await self.options.withOutbox(delivers: true) { outbox in
                await outbox.deliverAll()
                let items = try outbox.items()
                let delivered = items.filter { $0.state == .delivered }.count
                let dead = items.filter { $0.state == .dead }.count
                print("delivered \(delivered), dead \(dead), pending \(items.count - delivered - dead)")
            }
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send a dead item again from its first attempt.")

        @OptionGroup var options: Options

        @Argument(help: "The item's id.")
        var id: Int64

        func run() async throws {
            try await self.options.withOutbox { outbox in
                try outbox.retry(OutboxItemID(rawValue: self.id))
                print("item \(self.id) is pending again")
            }
        }
    }

    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete what the retention policy lets go (acknowledged deliveries, old dead items).")

        @OptionGroup var options: Options

        @Flag(name: .long, help: "Acknowledge every completed item first, so delivered ones past retention go too.")
        var acknowledgeAll = false

        @Option(name: .long, help: "Keep finished items this many seconds instead of the defaults (7 days delivered, 30 days dead).")
        var keepSeconds: Int?

        func run() async throws {
            try await self.options.withOutbox(keepSeconds: self.keepSeconds) { outbox in
                if self.acknowledgeAll {
                    for item in try outbox.items() where item.state == .delivered || item.state == .dead {
                        do {
                            try outbox.acknowledge(item.id)
                        } catch let error as OutboxError where error.kind == .notFound {
                            // Sent again (`retry`) or pruned by the app since it was listed.
                        }
                    }
                }
                print("\(try outbox.prune()) items deleted")
            }
        }
    }
}
