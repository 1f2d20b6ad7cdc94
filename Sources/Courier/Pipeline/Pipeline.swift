import Foundation
import HTTPTypes

/// The request pipeline: every stage a request goes through, in order, written down once — in
/// ``init(client:)``.
///
/// Going down (app → wire), each stage does its work and calls the next; coming back up
/// (wire → app), the response passes the same stages in reverse order. `send`, `response`,
/// `start`, `updates`, `upload`, `stream` and `download` all run this one list; a stage that does
/// nothing for a kind of exchange (a streamed body is neither cached nor shared) says so in its
/// own documentation. Each stage is one type in one file of `Pipeline/Stages/`, named after it.
///
/// The order is read from the chain itself (``stageNames``): the table of the DocC article "The
/// request pipeline" is checked against it by a test, so adding a stage is one file, one line
/// below and one row there.
///
/// A stage whose feature the client's configuration leaves off (no cache store, deduplication
/// off, no client middleware, no cookie jar) stays in ``stageNames`` but is not linked
/// (``PipelineStage/isLinked``): it could do nothing for any request of this client. The stages
/// are fused at compile time into two segments (``Fused``), from `classify` to `constrained` and
/// from `schedule` to `transport`, so a stage costs no async call and no frame of its own (the
/// chain machinery, `Chain.swift`, says how); `RoomForFrames` below the schedule stage reserves
/// one slab for the frames of the stages under it, once the request holds a slot. The cache and deduplication stages between the
/// segments are links of their own, present only when their feature is on.
///
/// Every error leaving a stage is a ``CourierError`` carrying an ``ErrorContext``: endpoint name,
/// request id, redacted URL, attempt and the stage that failed (for a middleware, its type name).
final class Pipeline: Sendable {
    private let entry: PipelineStageNext

    init(client: ClientParts) {
        let configuration = client.configuration
        let middleware = configuration.middleware
        let events = client.events
        // The order, outermost first. (Laid out by hand: one stage per line, each nested in the
        // one above it.)
        // swift-format-ignore
        self.entry = .segment(
            Fused(ClassifyStage(classifier: configuration.errorClassifier, onEvent: configuration.onEvent,
                                redactor: configuration.redactor),
            Fused(BuildStage(parts: client),
            Fused(ObserveStage(events: events, redactor: configuration.redactor),
            Fused(LifecycleStage(lifecycle: client.lifecycle),
            Fused(DeadlineStage(bodyIdleTimeout: configuration.bodyIdleTimeout, deduplication: configuration.deduplication,
                                lifecycle: client.lifecycle),
            Fused(DecodeStage(decoder: configuration.decoder, values: client.decodedValues, events: events),
            Fused(ConstrainedStage(gate: client.constrained, policy: configuration.constrainedPolicy),
            PipelineStageNext.link(CacheLookupStage(cache: client.cache, events: events, lifecycle: client.lifecycle), above:
            .link(DeduplicationStage(deduplicator: client.deduplicator, configuration: configuration.deduplication, events: events,
                                     lifecycle: client.lifecycle), above:
            .link(CacheStoreStage(cache: client.cache, events: events), above:
            .segment(
                Fused(ScheduleStage(scheduler: client.scheduler, events: events), RoomForFrames(
                Fused(WireStage(configuration: configuration, callIDs: client.callIDs),
                Fused(StatusCheckStage(maxResponseSize: configuration.maxResponseSize),
                Fused(CollectBodyStage(maxResponseSize: configuration.maxResponseSize),
                Fused(ContentDecodingStage(limits: configuration.decompression, maxResponseSize: configuration.maxResponseSize),
                Fused(MiddlewareStage(scope: .client, clientMiddleware: middleware, events: events),
                Fused(MiddlewareStage(scope: .endpoint, clientMiddleware: [], events: events),
                Fused(RetryStage(defaultPolicy: configuration.retry, budget: client.retryBudget, events: events,
                                 clientMiddleware: middleware),
                Fused(RedirectStage(policy: configuration.redirects, clientMiddleware: middleware, events: events,
                                    scheduler: client.scheduler, redactor: configuration.redactor,
                                    hasCookieJar: configuration.cookies != nil),
                Fused(CookieStage(jar: configuration.cookies),
                Fused(TransportStage(transport: configuration.transport, events: events),
                PipelineStageNext.end))))))))))))
            ))))))))))))
    }

    /// Runs an exchange through every stage.
    func run(_ exchange: RequestExchange) async throws -> Outcome {
        try await self.entry(exchange)
    }

    /// The names of every stage, outermost first, whether or not its feature is on for this client.
    var stageNames: [String] { self.entry.allStageNames }

    /// The names of the stages that can act for this client, in the order the chain calls them
    /// (a fused stage whose feature is off is called, passes the exchange on, and is not named).
    var linkedStageNames: [String] { self.entry.stageNames }
}
