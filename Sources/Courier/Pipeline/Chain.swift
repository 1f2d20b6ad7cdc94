import Foundation
import HTTPTypes

/// What runs the stages below a stage: a link of the chain (``PipelineStageNext``), or the
/// stages below fused into the caller at compile time (``Fused``).
protocol PipelineNext: Sendable {
    /// Runs the exchange through the stages below.
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome
    /// The names of the stages below that can act for this client, in order, down to the end
    /// of the chain.
    var stageNames: [String] { get }
    /// The names of every stage below, in order, whether or not its feature is on.
    var allStageNames: [String] { get }
}

/// A stage with the stages below it fused in at compile time: its `run` gets them as a concrete
/// `next`, so the compiler inlines them into the function that calls `next` (one frame for the
/// lot instead of one per stage; measured: Benchmarks/README.md, "Performance choices in the
/// code"). Errors leaving the stage get its name, as a link's do.
struct Fused<Stage: PipelineStage, Below: PipelineNext>: PipelineNext {
    let stage: Stage
    let below: Below

    init(_ stage: Stage, _ below: Below) {
        self.stage = stage
        self.below = below
    }

    @inline(__always)
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome {
        do {
            return try await self.stage.run(exchange, next: self.below)
        } catch {
            throw StageErrors.attach(error, stage: self.stage, exchange: exchange)
        }
    }

    /// A stage whose feature is off runs (and passes the exchange on) but is not named: it is
    /// not linked in the sense of ``PipelineStage/isLinked``.
    var stageNames: [String] { self.stage.isLinked ? [self.stage.name] + self.below.stageNames : self.below.stageNames }
    var allStageNames: [String] { [self.stage.name] + self.below.allStageNames }
}

/// The stages below with room for their frames reserved first (``TaskFrames``): put below the
/// stage after which a request's frames are worth a slab of their own — in the order, the
/// schedule stage, once the request holds a slot (a queued request holds no such room).
struct RoomForFrames<Below: PipelineNext>: PipelineNext {
    let below: Below

    init(_ below: Below) { self.below = below }

    @inline(__always)
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome {
        await TaskFrames.reserve()
        return try await self.below(exchange)
    }

    var stageNames: [String] { self.below.stageNames }
    var allStageNames: [String] { self.below.allStageNames }
}

extension PipelineNext {
    /// Runs the exchange through the stages below, in a function of its own: for the paths a
    /// stage rarely takes (a retry, a redirect, a wire protocol's boxing, middleware). A fused
    /// segment inlines the stages below at every place a stage calls them; calling them from
    /// the rare paths through this one specialised function keeps the segment's code from
    /// doubling at each stage that has such a path.
    @inline(never)
    func outOfLine(_ exchange: RequestExchange) async throws -> Outcome {
        try await self(exchange)
    }
}

/// Puts a stage's name and the exchange's context on an error leaving the stage.
private enum StageErrors {
    /// The error with the stage's name and the exchange's context (apart from the callers, so
    /// that its values stay out of their async frames).
    @inline(never)
    static func attach<Stage: PipelineStage>(_ error: any Error, stage: Stage, exchange: RequestExchange) -> any Error {
        ErrorContext.attach(error, stage: stage.name, exchange: exchange)
    }
}

/// The rest of the pipeline below a stage: call it with the exchange to run every stage below.
///
/// A reference to the next link, whose `run` is a closure made where the stage types are known
/// (so it is specialised for them).
struct PipelineStageNext: PipelineNext {
    fileprivate let link: PipelineLink
    /// Every stage from here down, the ones left out of the chain (their feature off) included.
    let allStageNames: [String]

    fileprivate init(_ link: PipelineLink, allStageNames: [String]) {
        self.link = link
        self.allStageNames = allStageNames
    }

    /// Runs the exchange through the stages below.
    ///
    /// The stages that have nothing to do for this exchange (``PipelineStage/bypasses(_:)``)
    /// are stepped over here, before the one async call: a stage that would only pass the
    /// exchange on costs no call and no frame (measured: Benchmarks/README.md, "Performance
    /// choices in the code").
    /// Inlined into the stage that calls it, so a link costs one async call, not two.
    @inline(__always)
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome {
        var link = self.link
        while let bypasses = link.bypasses, let below = link.below, bypasses(exchange) {
            link = below
        }
        return try await link.run(exchange)
    }

    var stageNames: [String] { self.link.stageNames }
}

extension PipelineStageNext {
    /// The end of the chain, after the last stage.
    static var end: PipelineStageNext { PipelineStageNext(PipelineLink.end, allStageNames: []) }

    /// `stage` as a link of its own above `next`, or `next` alone when the stage is not linked
    /// for this client.
    static func link<Stage: PipelineStage>(_ stage: Stage, above next: PipelineStageNext) -> PipelineStageNext {
        guard stage.isLinked else { return PipelineStageNext(next.link, allStageNames: [stage.name] + next.allStageNames) }
        let bypasses: (@Sendable (RequestExchange) -> Bool)? = Stage.mayBypass ? { @Sendable exchange in stage.bypasses(exchange) } : nil
        return PipelineStageNext(
            PipelineLink(below: next.link, bypasses: bypasses, names: [stage.name] + next.stageNames) { exchange in
                do {
                    return try await stage.run(exchange, next: next)
                } catch {
                    throw StageErrors.attach(error, stage: stage, exchange: exchange)
                }
            }, allStageNames: [stage.name] + next.allStageNames)
    }

    /// A segment of fused stages as one link. (A closure made here, where the chain's type is
    /// known, so the compiler specialises the whole segment; a generic class's methods would not
    /// be: its vtable holds the unspecialised ones.)
    static func segment<Chain: PipelineNext>(_ chain: Chain) -> PipelineStageNext {
        PipelineStageNext(
            PipelineLink(below: nil, bypasses: nil, names: chain.stageNames) { exchange in
                try await chain(exchange)
            }, allStageNames: chain.allStageNames)
    }
}

/// One link of the chain: one stage, or a segment of fused stages (``Fused``), with the rest of
/// the chain below it. Made only in generic functions called with the concrete stage types, so
/// each link's `run` is specialised for its stages.
private final class PipelineLink: Sendable {
    /// For a stage that can have nothing to do for some exchanges: whether it has nothing to do
    /// for this one (then the chain goes straight to ``below``).
    let bypasses: (@Sendable (RequestExchange) -> Bool)?
    /// The link below (for a single stage; a segment has none, its last stage calls it).
    let below: PipelineLink?
    let run: @Sendable (RequestExchange) async throws -> Outcome
    /// The names of this link's stages and of all below it.
    let stageNames: [String]

    init(
        below: PipelineLink?, bypasses: (@Sendable (RequestExchange) -> Bool)?, names: [String],
        run: @escaping @Sendable (RequestExchange) async throws -> Outcome
    ) {
        self.below = below
        self.bypasses = bypasses
        self.stageNames = names
        self.run = run
    }

    /// The end of the chain, after the last stage: reached only if the list had no transport stage.
    static let end = PipelineLink(below: nil, bypasses: nil, names: []) { _ in
        throw CourierError(.invalidRequest, "the pipeline ended without a transport")
    }
}

/// One step of the pipeline, with one job.
protocol PipelineStage: Sendable {
    /// The stage's name in errors (``ErrorContext/stage``).
    var name: String { get }
    /// Whether the stage can do anything for this client: `false` when its feature is switched
    /// off in the configuration (no cookie jar, no cache, no client middleware, deduplication
    /// off), and then it stays in ``Pipeline/stages`` but is not linked into the chain (a stage
    /// fused into a segment is still called, and passes every exchange on).
    var isLinked: Bool { get }
    /// Whether the stage may have nothing to do for some exchanges (``bypasses(_:)``). Asked only
    /// of the stages that are links of their own (cache lookup, deduplication, cache store); a
    /// fused stage costs no call to step over, and its `run` checks for itself.
    static var mayBypass: Bool { get }
    /// Whether the stage has nothing to do for `exchange`, which then goes straight to the stage
    /// below: a quick synchronous check (`run` must still pass such an exchange on unchanged).
    func bypasses(_ exchange: RequestExchange) -> Bool
    /// Does the stage's work on the way down, calls `next`, and its work on the way up.
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome
}

extension PipelineStage {
    var isLinked: Bool { true }
    static var mayBypass: Bool { false }
    func bypasses(_ exchange: RequestExchange) -> Bool { false }
}

/// Room for the async frames of a request's own task, taken from the task's allocator at once.
///
/// A task's allocator starts with one slab of about 1 KB inside the task and takes every further
/// slab from `malloc` as its frames outgrow the last, and frees them all when the task ends. The
/// stages below the deadline stage and the transport run in a task of their own per request;
/// before the stages were fused into segments their frames took many slabs per request.
/// One call with a 16 KiB frame makes the allocator take one slab that size; the slab stays with
/// the task when the frame is freed, and the frames that follow (the transport's) fill it: fewer
/// instructions per request, before the fusing and after it, and more saved than with an 8 KiB
/// frame (measured: Benchmarks/README.md, "Performance choices in the code"). Frames
/// beyond it take slabs as before. The reservation is chain machinery (``RoomForFrames``), put
/// below the schedule stage in the order: it runs once the request holds a slot, so a queued
/// request holds only the frames it has so far: its fused segment's but not the
/// 16 KiB (10,000 queued requests would otherwise hold 160 MB; the peak memory per request of
/// `CourierBenchmarks many` is in the same section).
///
/// The frame's size comes from a local `InlineArray` of 16 KiB of bytes that is declared
/// initialised without being written (setting 16 KiB would cost more than the `malloc`s saved):
/// no byte of it is ever read, and bytes are a trivial type. Other ways tried made the frame
/// larger (an enum with a 16 KiB case got a copy in each frame) or call runtime
/// entry points directly (a compiler warning). `InlineArray` needs macOS, iOS, tvOS, watchOS and
/// visionOS 26; on older Apple systems nothing is reserved (only the saving is lost).
enum TaskFrames {
    /// Makes the current task's allocator hold one slab of about 16 KiB for the frames that follow.
    static func reserve() async {
        // `InlineArray` takes an integer generic argument, which a compiler before Swift 6.2
        // (Xcode 16) cannot parse, whatever the availability check says.
        #if compiler(>=6.2)
        if #available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *) {
            await self.reserveRoom()
        }
        #endif
    }

    #if compiler(>=6.2)

    @available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *)
    @inline(never)
    private static func reserveRoom() async {
        var room = InlineArray<16_384, UInt8> { (output: inout OutputSpan<UInt8>) in
            output.withUnsafeMutableBufferPointer { buffer, initialized in initialized = buffer.count }
        }
        await self.hold(&room)
    }

    /// Keeps `room` alive across an async call, so that it is part of the caller's async frame.
    @available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *)
    @inline(never)
    private static func hold(_ room: inout InlineArray<16_384, UInt8>) async {
        room[room.count - 1] = 0
    }
    #endif
}
