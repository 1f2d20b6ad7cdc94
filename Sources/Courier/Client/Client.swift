import Foundation
import HTTPTypes
import Logging

/// The central object an app sends its requests through.
///
/// Create one per backend configuration and pass it to the code that needs it; there is no
/// shared instance. A client owns one transport, so connections are pooled and reused. Every
/// request — `send`, `response`, `start`, `updates`, `upload`, `stream`, `download` — goes
/// through the same list of stages, written down once in `Pipeline/Pipeline.swift` and listed,
/// in that order, in the "The request pipeline" article.
public final class Client: Sendable {
    /// The configuration the client was created with.
    public let configuration: Configuration
    let parts: ClientParts
    let pipeline: Pipeline

    /// Creates a client.
    public init(configuration: Configuration) {
        self.configuration = configuration
        let scheduler = RequestScheduler(configuration: configuration.scheduling)
        let events = EventHub(Self.monitors(of: configuration))
        self.parts = ClientParts(
            configuration: configuration,
            events: events,
            keepsLogicalRequests: configuration.transport is any ReadsLogicalRequests
                || events.monitors.contains { $0 is any RecordsLogicalRequests },
            lifecycle: Lifecycle(scheduler: scheduler),
            base: configuration.baseURL.flatMap(BaseURL.init),
            scheduler: scheduler,
            deduplicator: Deduplicator(
                makeTicket: { scheduler.makeTicket() }, reprioritize: { scheduler.reprioritize(ticket: $0, to: $1) }),
            constrained: ConstrainedGate(),
            cache: configuration.cache.store.map {
                ResponseCache(
                    store: $0, configuration: configuration.cache, maxBodySize: max(0, configuration.maxResponseSize),
                    fieldsSetBelow: ResponseCache.fieldsSetBelow(
                        hasCookieJar: configuration.cookies != nil, hasMiddleware: !configuration.middleware.isEmpty))
            },
            decodedValues: DecodedValues(),
            retryBudget: RetryBudget(),
            callIDs: Locked(0)
        )
        self.pipeline = Pipeline(client: self.parts)
    }

    /// Sends the endpoint's request and returns the decoded value.
    ///
    /// Cancelling the calling task cancels the request on the wire and throws kind `cancelled`.
    public func send<Value: Sendable>(_ endpoint: Endpoint<Value>) async throws -> Value {
        // Straight to the stage list, without making a `Response<Value>`: where `Value` is not
        // known at compile time, each generic call and type costs a lookup on every request.
        let outcome = try await self.run(EndpointDescription.erasing(endpoint), mode: .collect)
        return try ResponseDelivery.value(outcome, as: Value.self)
    }

    /// Sends the endpoint's request and returns the decoded value with status, headers, version and timing.
    ///
    /// The timeout (the endpoint's, or the client's) is one deadline for the whole exchange:
    /// queueing, middleware, retries, redirects, the response head and the whole body.
    public func response<Value: Sendable>(_ endpoint: Endpoint<Value>) async throws -> Response<Value> {
        try await self.response(endpoint, control: nil)
    }

    /// Starts the endpoint's request in a new task and returns a handle to await, cancel or re-prioritise it.
    public func start<Value: Sendable>(_ endpoint: Endpoint<Value>, priority: RequestPriority? = nil) -> RequestHandle<Value> {
        // Numbered now, in the caller: requests started one after the other that queue do so in
        // that order, whichever of their tasks reaches the scheduler first. (A free slot goes to
        // the first task to ask for it.)
        // Its lifecycle ticket is taken now too: `cancelAll` right after `start` reaches it,
        // although its task may not have run yet.
        // Its task is the request's own: the deadline stage runs the stages below it there and
        // cancels it at the deadline or on `cancelAll`, without a second task.
        let (task, control) = self.inOwnTask(priority: priority ?? endpoint.priority) { control in
            try await self.response(endpoint, control: control)
        }
        return RequestHandle(task: task, control: control)
    }

    /// Starts one exchange in a task made for it, whose control is numbered and holds its
    /// lifecycle ticket from this call (``startedControl(priority:runsInOwnTask:)``) and knows the
    /// task (``RequestControl/runsInOwnTask``): the deadline stage runs the stages below it in
    /// that task and cancels it at the deadline or on `cancelAll`. The ticket is ended when
    /// `work` returns (the lifecycle stage ends it first; a request that fails before it, an
    /// endpoint that cannot be built, must not leave it behind).
    func inOwnTask<Result: Sendable>(
        priority: RequestPriority, _ work: @escaping @Sendable (RequestControl) async throws -> Result
    ) -> (task: Task<Result, any Error>, control: RequestControl) {
        let control = self.startedControl(priority: priority, runsInOwnTask: true)
        let lifecycle = self.parts.lifecycle
        let task = Task { () async throws -> Result in
            defer { control.endTicket(in: lifecycle) }
            return try await work(control)
        }
        control.adoptTask { task.cancel() }
        return (task, control)
    }

    /// The control of a request the caller starts now and whose task runs later (``start(_:priority:)``,
    /// an upload, a download, ``updates(_:)``): numbered and holding its lifecycle ticket from
    /// this call, so its place in line and ``cancelAll(reason:)`` reach it before its task has
    /// run. Its task ends the ticket with ``RequestControl/endTicket(in:)`` when it returns.
    func startedControl(priority: RequestPriority, runsInOwnTask: Bool = false) -> RequestControl {
        RequestControl(
            priority: priority, order: self.parts.scheduler.makeOrder(), lifecycleTicket: try? self.parts.lifecycle.begin(),
            runsInOwnTask: runsInOwnTask)
    }

    /// Whether the client is constrained (Low Data Mode): prefetch endpoints are then refused or
    /// deferred (see ``Configuration/constrainedPolicy``); other requests go through.
    public var isConstrained: Bool {
        get { self.parts.constrained.isOn }
        set { self.parts.constrained.set(newValue) }
    }

    /// What the scheduler is doing now: queued requests by priority, requests in flight by host.
    public var traffic: TrafficSnapshot { self.parts.scheduler.snapshot }

    /// How many calls shared another's network request, and how many started one, since creation.
    public var deduplicationCounts: (coalesced: Int, started: Int) { self.parts.deduplicator.counts }

    /// Removes every cached response.
    public func clearCache() {
        self.parts.cache?.store.removeEntries(in: .all)
    }

    /// Removes the cached responses of one partition (call it when that account signs out).
    public func clearCache(partition: String) {
        self.parts.cache?.store.removeEntries(in: .partition(partition))
    }

    /// Builds the logical request an endpoint describes (before wire boxing and middleware), without sending it.
    public func makeRequest<Value>(for endpoint: Endpoint<Value>) throws -> Request {
        try RequestBuilder.build(self.configuration.withServiceDefaults(endpoint.erased(decoding: .streamed)), parts: self.parts)
    }

    func response<Value: Sendable>(
        _ endpoint: Endpoint<Value>, control: RequestControl?, policyOverride: CachePolicy? = nil, uploadReporter: ProgressReporter? = nil
    ) async throws -> Response<Value> {
        let outcome = try await self.run(
            EndpointDescription.erasing(endpoint), mode: .collect, control: control, policyOverride: policyOverride,
            uploadReporter: uploadReporter)
        return try ResponseDelivery.response(outcome, as: Value.self)
    }

    /// The head an exchange carries until the build stage makes its request (made once: building
    /// an `HTTPRequest` validates and stores its fields).
    private static let placeholderHead = HTTPRequest(method: .get, scheme: nil, authority: nil, path: nil)

    /// Runs one exchange through the stage list. A download's rounds pass the download's request
    /// `id`, and a `record` of their own to read after a round fails.
    func run(
        _ endpoint: EndpointDescription, mode: ExchangeMode, control: RequestControl? = nil, policyOverride: CachePolicy? = nil,
        uploadReporter: ProgressReporter? = nil, id: RequestID? = nil, record: ExchangeRecord? = nil,
        adjust: (@Sendable (inout Request) -> Void)? = nil
    ) async throws -> Outcome {
        let endpoint = self.configuration.withServiceDefaults(endpoint)
        let request = Request(head: Self.placeholderHead, name: endpoint.name, id: id ?? RequestID())
        let exchange = RequestExchange(
            endpoint: endpoint, mode: mode, request: request,
            cachePolicy: policyOverride ?? endpoint.cachePolicy ?? self.configuration.cache.policy,
            call: WireCall(operation: endpoint.operation ?? endpoint.name, isNotification: endpoint.isNotification, id: 0),
            control: control, readsBody: endpoint.decoding.readsBody, uploadReporter: uploadReporter, adjust: adjust,
            record: record ?? ExchangeRecord(), start: .now
        )
        return try await self.pipeline.run(exchange)
    }
}
