import Foundation
import HTTPTypes
import Logging

extension Client {
    /// Everything a ``Client`` is built from: a value, so clients are easy to create side by side.
    ///
    /// ```swift
    /// let client = Client(configuration: .init(transport: URLSessionTransport(), baseURL: api) {
    ///     $0.defaultHeaders[.accept] = "application/json"
    ///     $0.logger = Logger(label: "api")
    /// })
    /// ```
    public struct Configuration: Sendable {
        /// What sends requests over the network. One transport (and its connection pool) per client.
        public var transport: any Transport
        /// The URL endpoint paths are resolved against.
        public var baseURL: URL?
        /// Header fields sent with every request; an endpoint's fields replace ones with the same name.
        ///
        /// A default `Content-Type` labels bodies that name no type and JSON bodies (so a vendor
        /// type such as `application/vnd.api+json` can refine them); a body with a type of its
        /// own (a multipart form, whose type carries its boundary, a URL-encoded form, data given
        /// a type) keeps it. `Content-Length` and `Transfer-Encoding` are never sent as written:
        /// the transport frames the body.
        ///
        /// The ones that carry credentials (``RedirectPolicy/sensitiveFields``: `Authorization`,
        /// `Cookie`, …, and those the ``redactor`` hides as secrets) are not sent to an endpoint whose path is an absolute URL of another origin
        /// than the base URL (or its service's), such as a presigned download URL an API handed out.
        public var defaultHeaders: HTTPFields
        /// Middleware for every request, in order, before the endpoint's own.
        public var middleware: [any Middleware]
        /// Where the start and end of each request are logged; `nil` logs nothing, unless the
        /// process's debug options set a log level (see ``debugOptions``).
        public var logger: Logger?
        /// Encodes JSON request bodies.
        public var encoder: JSONEncoder
        /// Decodes JSON responses.
        public var decoder: JSONDecoder
        /// The most bytes a response body may have before the request fails with `responseTooLarge`.
        public var maxResponseSize: Int
        /// How long a request may take when its endpoint does not say; `nil` for no limit.
        public var timeout: Duration?
        /// How redirects are followed.
        public var redirects: RedirectPolicy
        /// What is hidden in logs, cURL output and error descriptions.
        public var redactor: Redactor
        /// Whether and how identical in-flight requests share one network request.
        public var deduplication: DeduplicationConfiguration
        /// The limits on requests in flight, in total and per host.
        public var scheduling: SchedulerConfiguration
        /// What happens to prefetch endpoints while the client is constrained.
        public var constrainedPolicy: ConstrainedPolicy
        /// The services and environments endpoints with a ``Endpoint/service`` resolve against.
        public var servers: ServerDirectory?
        /// What every endpoint of a service gets: middleware, header fields, timeout, retry and
        /// cache policies (its own settings win).
        public var serviceDefaults: [ServiceID: ServiceDefaults]
        /// The wire protocol of each service, for endpoints that do not set their own.
        public var wireProtocols: [ServiceID: any WireProtocol]
        /// The wire protocol of endpoints that set none and whose service has none (REST by default).
        public var defaultWireProtocol: any WireProtocol
        /// Decides how each error should be presented (``CourierError/presentation``).
        public var errorClassifier: ErrorClassifier
        /// Limits for decoding the content codings the client asks for (`Accept-Encoding`) and
        /// decodes itself: gzip and deflate, on Linux also br and zstd; `nil` neither asks nor
        /// decodes.
        public var decompression: DecompressionLimits?
        /// The response cache: its store (none by default, so nothing is cached), default policy and partition.
        public var cache: CacheConfiguration
        /// The longest a streamed body (``Client/stream(_:)``, downloads) may go without a byte
        /// before it fails with kind `timeout`, enforced for each stream on its own whatever the
        /// transport and HTTP version; `nil` for no limit. Collected bodies are covered by the
        /// request's deadline instead.
        public var bodyIdleTimeout: Duration?
        /// How failed attempts are retried, for endpoints without a policy of their own.
        public var retry: RetryPolicy
        /// The client's cookies: stored from responses and sent with requests (RFC 6265); `nil`
        /// (the default) for none.
        public var cookies: CookieJar?
        /// Called with events raised by responses (such as a business code mapped to "session expired").
        public var onEvent: (@Sendable (CourierEvent) -> Void)?
        /// What watches every request go through the pipeline: metrics, tracing, HAR capture,
        /// your own (see ``EventMonitor``). The ``logger`` gets a ``LogMonitor`` of its own.
        public var eventMonitors: [any EventMonitor]
        /// Whether the log lines at `.trace` include request and response bodies (redacted, capped).
        public var logsBodies: Bool
        /// Debug options (log level, body logging, HAR capture) switched on without a rebuild;
        /// `nil` (the default) reads them from the process's environment and launch arguments
        /// once, when the client is created. ``DebugOptions/off`` ignores the environment.
        public var debugOptions: DebugOptions?

        /// Creates a configuration with the defaults.
        public init(transport: any Transport, baseURL: URL? = nil) {
            self.init(transport: transport, baseURL: baseURL) { _ in }
        }

        /// Creates a configuration; `configure` may change any default, and may throw (a
        /// transport's `trust(pemCertificates:)`, say), in which case so does this initialiser.
        public init(
            transport: any Transport,
            baseURL: URL? = nil,
            configure: (inout Configuration) throws -> Void
        ) rethrows {
            self.transport = transport
            self.baseURL = baseURL
            self.defaultHeaders = [:]
            self.middleware = []
            self.logger = nil
            self.encoder = JSONEncoder()
            self.decoder = JSONDecoder()
            self.maxResponseSize = 10 * 1024 * 1024
            self.timeout = .seconds(60)
            self.redirects = .default
            self.redactor = .standard
            self.deduplication = DeduplicationConfiguration()
            self.scheduling = .default
            self.constrainedPolicy = .refuse
            self.servers = nil
            self.wireProtocols = [:]
            self.defaultWireProtocol = RESTProtocol()
            self.errorClassifier = .standard
            self.onEvent = nil
            self.eventMonitors = []
            self.logsBodies = false
            self.debugOptions = nil
            self.cache = CacheConfiguration()
            self.decompression = DecompressionLimits()
            self.retry = .standard
            self.bodyIdleTimeout = .seconds(30)
            self.cookies = nil
            self.serviceDefaults = [:]
            try configure(&self)
        }
    }
}

/// What happens to prefetch endpoints while a client is constrained (Low Data Mode).
public enum ConstrainedPolicy: Sendable {
    /// They fail at once with ``CourierError`` of kind `constrained`.
    case refuse
    /// They wait until the client is no longer constrained (or their task is cancelled).
    case `defer`
}
