import Foundation
import HTTPTypes

/// Gzip, deflate, br and zstd content codings are removed as the body is read, within the
/// client's ``DecompressionLimits`` (the maximum response size for collected bodies, a ratio for
/// streams), so a decompression bomb fails with `responseTooLarge`. Downloads ask for and keep
/// the identity coding (their ranges count the bytes on disk).
struct ContentDecodingStage: PipelineStage {
    let limits: DecompressionLimits?
    let maxResponseSize: Int
    var name: String { "content-decoding" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let mode = exchange.mode
        return try self.finished(try await next(exchange), mode: mode)
    }

    /// The outcome with its body's content coding removed (apart from `run`, so that the decoded
    /// response, which few exchanges need, stays out of the async frame every request allocates).
    @inline(never)
    private func finished(_ outcome: consuming Outcome, mode: ExchangeMode) throws -> Outcome {
        guard mode != .download, self.limits != nil, outcome.response.head.headerFields.contains(.contentEncoding) else { return outcome }
        outcome.response = try self.decoded(outcome.response, maxSize: mode.isStream ? nil : self.maxResponseSize)
        return outcome
    }

    /// The response with its gzip or deflate content coding removed (lazily, as the body is read).
    func decoded(_ raw: RawResponse, maxSize: Int?) throws -> RawResponse {
        guard let limits = self.limits, let value = raw.head.headerFields.combinedValue(.contentEncoding) else { return raw }
        guard let coding = try ContentCoding.of(value) else { return raw }
        var decoded = raw
        var bounded = limits
        if let maxSize { bounded.maxSize = min(maxSize, limits.maxSize ?? .max) }
        decoded.body = raw.body.decoded(coding, limits: bounded)
        decoded.head.headerFields[.contentEncoding] = nil
        decoded.head.headerFields[.contentLength] = nil
        return decoded
    }
}
