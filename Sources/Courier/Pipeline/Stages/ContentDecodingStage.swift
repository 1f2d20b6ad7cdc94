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
        let endpoint = exchange.endpoint
        let isHead = exchange.request.head.method == .head
        let readsBody = exchange.readsBody
        return try self.finished(try await next(exchange), mode: mode, endpoint: endpoint, isHead: isHead, readsBody: readsBody)
    }

    /// The outcome with its body's content coding removed (apart from `run`, so that the decoded
    /// response, which few exchanges need, stays out of the async frame every request allocates).
    ///
    /// A response that has no content (to HEAD, 1xx, 204, 304: RFC 9110 §6.4.1) keeps its fields
    /// as they came: its `Content-Encoding` and `Content-Length` describe the representation
    /// it did not send, which is what a HEAD caller asks for. A response whose status the
    /// endpoint does not accept keeps a body in a coding this client cannot remove, so that the
    /// status check reports the status, not the coding.
    @inline(never)
    private func finished(
        _ outcome: consuming Outcome, mode: ExchangeMode, endpoint: EndpointDescription, isHead: Bool, readsBody: Bool
    ) throws -> Outcome {
        guard mode != .download, self.limits != nil, outcome.response.head.headerFields.contains(.contentEncoding) else { return outcome }
        let status = outcome.response.statusCode
        if status < 200 || status == 204 || status == 304 || isHead { return outcome }
        let accepted = endpoint.acceptedStatuses.contains(status)
        // A body nobody reads (`decoding: .none` and an accepted status: the body stage discards
        // it) may be in any coding: one this client cannot remove fails no request that never
        // looks at it.
        let strict = accepted && (readsBody || mode != .collect)
        do {
            outcome.response = try self.decoded(outcome.response, maxSize: mode.isStream ? nil : self.maxResponseSize, strict: strict)
        } catch {
            // A coding this client cannot remove: the server answered all the same. Nobody reads
            // the body now; it is ended here (URLSession went on downloading it, into memory and
            // then a spill file, with its scheduler slot already free).
            outcome.response.body.cancel()
            throw CollectBodyStage.withHead(error, of: outcome.response)
        }
        return outcome
    }

    /// The response with its content coding removed (lazily, as the body is read). A coding this
    /// client cannot remove fails with kind `decoding` when `strict`, and leaves the response as
    /// it came otherwise.
    func decoded(_ raw: RawResponse, maxSize: Int?, strict: Bool = true) throws -> RawResponse {
        guard let limits = self.limits, let value = raw.head.headerFields.combinedValue(.contentEncoding) else { return raw }
        let known: ContentCoding?
        do {
            known = try ContentCoding.of(value)
        } catch  where !strict {
            return raw
        }
        guard let coding = known else { return raw }
        var decoded = raw
        var bounded = limits
        if let maxSize { bounded.maxSize = min(maxSize, limits.maxSize ?? .max) }
        decoded.body = raw.body.decoded(coding, limits: bounded)
        decoded.head.headerFields[.contentEncoding] = nil
        decoded.head.headerFields[.contentLength] = nil
        return decoded
    }
}
