import Foundation
import HTTPTypes

extension Client {
    /// Sends the endpoint's request and returns when the response head arrives, with the body
    /// still streaming: for callers that process a body as it comes (lines, server-sent events,
    /// large payloads).
    ///
    /// It goes through the same stages as ``send(_:)``; the body is neither cached nor shared nor
    /// unboxed, and bypasses the size limit; gzip and deflate are decoded within the client's
    /// ``DecompressionLimits``. The timeout covers the wait for the head; a body that brings no byte
    /// for ``Configuration/bodyIdleTimeout`` fails with kind `timeout`. The scheduler slot is held until the body has been
    /// read to the end, cancelled or dropped. A status outside the endpoint's accepted statuses
    /// throws kind `httpStatus`, as ``send(_:)`` does.
    public func stream<Value>(_ endpoint: Endpoint<Value>) async throws -> StreamingResponse {
        let outcome = try await self.run(endpoint.erased(decoding: .streamed), mode: .stream)
        let raw = outcome.response
        return StreamingResponse(status: raw.status, headers: raw.head.headerFields, version: raw.version, expectedLength: raw.body.expectedLength, body: raw.body.byteStream)
    }

    /// Sends the endpoint's request with upload progress: use it for a file or multipart body.
    ///
    /// Progress counts the body bytes the transport has taken; when the request is retried or
    /// redirected with a replayable body, it starts again from zero.
    public func upload<Value: Sendable>(_ endpoint: Endpoint<Value>) -> TransferTask<Response<Value>> {
        let reporter = ProgressReporter()
        let task = Task { () async throws -> Response<Value> in
            defer { reporter.finish() }
            return try await self.response(endpoint, control: nil, uploadReporter: reporter)
        }
        return TransferTask(progress: reporter.stream, task: task)
    }

    /// Downloads the endpoint's response body to a file, streamed to disk, never held in memory.
    ///
    /// The bytes go to a hidden partial file beside the destination, which is renamed into place
    /// only when the body is complete, so a partial file never sits at the final path. When a
    /// download fails or is cancelled, the partial file and the response's validator (a strong
    /// `ETag`, else `Last-Modified`) are kept; the next `download` of the same URL to the same
    /// destination with `resume` asks for the rest with `Range` and `If-Range`. A server that
    /// ignores the range, or whose resource changed, answers with the whole body, and the
    /// download restarts cleanly from zero. It goes through the same stages as ``send(_:)``
    /// (constrained mode, scheduling, middleware, retries, redirects), without cache or sharing.
    public func download<Value>(_ endpoint: Endpoint<Value>, to destination: DownloadDestination, resume: Bool = true) -> TransferTask<DownloadResult> {
        let reporter = ProgressReporter()
        let task = Task { () async throws -> DownloadResult in
            defer { reporter.finish() }
            do {
                return try await self.performDownload(endpoint, to: destination, resume: resume, reporter: reporter)
            } catch {
                throw ClassifyStage(classifier: self.configuration.errorClassifier, onEvent: nil).classified(error)
            }
        }
        return TransferTask(progress: reporter.stream, task: task)
    }

    private func performDownload<Value>(_ endpoint: Endpoint<Value>, to destination: DownloadDestination, resume: Bool, reporter: ProgressReporter) async throws -> DownloadResult {
        let target = try destination.validated()
        let directory = target.deletingLastPathComponent()
        let partial = directory.appendingPathComponent(".courier-\(destination.fileName).partial")
        let record = directory.appendingPathComponent(".courier-\(destination.fileName).partial.json")
        let description = endpoint.erased(decoding: .streamed, acceptedStatuses: 200..<300)
        let urlString = try RequestBuilder.build(description, parts: self.parts).urlString
        var offset: Int64 = 0
        var validator: String?
        if resume, let state = PartialDownload.load(record), state.url == urlString,
           let size = (try? FileManager.default.attributesOfItem(atPath: partial.path))?[.size] as? NSNumber, size.int64Value > 0 {
            offset = size.int64Value
            validator = state.validator
        } else {
            try? FileManager.default.removeItem(at: partial)
            try? FileManager.default.removeItem(at: record)
        }
        let start = ContinuousClock.now
        for _ in 0..<2 {
            let rangeStart = offset
            let ifRange = validator
            let outcome: Outcome
            do {
                outcome = try await self.run(description, mode: .download) { request in
                    // Ranges count bytes of the representation as sent: never content-coded here.
                    request.head.headerFields[.acceptEncoding] = "identity"
                    if rangeStart > 0, let ifRange {
                        request.head.headerFields[.range] = "bytes=\(rangeStart)-"
                        request.head.headerFields[.ifRange] = ifRange
                    }
                }
            } catch let error as CourierError where error.status?.code == 416 && rangeStart > 0 {
                // The range is not satisfiable (the partial file is complete, or the resource
                // shrank): start again from zero rather than failing the same way forever.
                offset = 0
                validator = nil
                try? FileManager.default.removeItem(at: partial)
                try? FileManager.default.removeItem(at: record)
                continue
            }
            let raw = outcome.response
            var total: Int64?
            if raw.status.code == 206 {
                guard offset > 0, let range = ContentRangeHeader.parse(raw.head.headerFields[.contentRange] ?? ""), Int64(range.range.lowerBound) == offset else {
                    // A range we did not ask for: start again from zero without one.
                    raw.body.byteStream.cancel()
                    offset = 0
                    validator = nil
                    try? FileManager.default.removeItem(at: partial)
                    continue
                }
                total = range.completeLength.map(Int64.init)
            } else {
                // The whole body: the server ignored the range or the resource changed.
                offset = 0
                total = raw.body.expectedLength.map(Int64.init)
            }
            if let validator = PartialDownload.validator(of: raw.head.headerFields) {
                try? PartialDownload(url: urlString, validator: validator).save(to: record)
            } else {
                try? FileManager.default.removeItem(at: record)
            }
            let written: Int64
            do {
                written = try await Self.write(raw.body, to: partial, at: offset, reporter: reporter, expected: total)
                if let total, written != total {
                    throw CourierError(.transport, "the download ended after \(written) of \(total) bytes; it can be resumed")
                }
                try Self.moveIntoPlace(partial, to: target, overwrite: destination.overwrite)
            } catch {
                let failure = CourierError.wrap(error)
                outcome.request.map { self.parts.events.failed($0, failure: failure, start: start, record: outcome.record ?? ExchangeRecord()) }
                throw failure
            }
            try? FileManager.default.removeItem(at: record)
            if let request = outcome.request, self.parts.events.isActive {
                let result = EventHub.result(
                    response: raw.head, body: nil, bodySize: Int(written - offset), version: raw.version, source: .network, age: nil,
                    start: start, url: outcome.urlString, record: outcome.record ?? ExchangeRecord(), delivery: .downloaded(resumedAt: offset)
                )
                self.parts.events.emit(request) { $0.requestFinished($1, result: result) }
            }
            return DownloadResult(url: target, byteCount: written, resumedFrom: offset, status: raw.status, headers: raw.head.headerFields)
        }
        throw CourierError(.transport, "the server answered the range request with a range that was not asked for")
    }

    /// Streams a body into the partial file from `offset` (truncating anything after it); returns the file's size.
    private static func write(_ body: ResponseBody, to file: URL, at offset: Int64, reporter: ProgressReporter, expected: Int64?) async throws -> Int64 {
        if offset == 0 || !FileManager.default.fileExists(atPath: file.path) {
            guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
                throw CourierError.invalidRequest("cannot create \(file.path)")
            }
        }
        let handle = try FileHandle(forWritingTo: file)
        defer { try? handle.close() }
        // Only a resumed download truncates: on ext4, a file truncated to zero and rewritten is
        // flushed to disk on close (the "replace by truncate" heuristic), which halves throughput.
        if offset > 0 {
            try handle.truncate(atOffset: UInt64(offset))
            try handle.seek(toOffset: UInt64(offset))
        }
        reporter.start(completed: offset, expected: expected)
        var written = offset
        for try await chunk in body {
            try Task.checkCancellation()
            try handle.write(contentsOf: chunk)
            written += Int64(chunk.count)
            reporter.add(chunk.count)
        }
        try Task.checkCancellation()
        return written
    }

    /// Renames the complete file into place: atomically replacing, or only when nothing is there.
    private static func moveIntoPlace(_ partial: URL, to target: URL, overwrite: Bool) throws {
        if overwrite {
            guard rename(partial.path, target.path) == 0 else {
                throw CourierError.invalidRequest("cannot move the download to \(target.path): \(String(cString: strerror(errno)))")
            }
        } else {
            // link(2) fails if the target exists, so a file created meanwhile is never replaced.
            guard link(partial.path, target.path) == 0 else {
                throw CourierError.invalidRequest("cannot move the download to \(target.path): \(String(cString: strerror(errno)))")
            }
            unlink(partial.path)
        }
    }
}

/// What is remembered about an unfinished download, to resume it.
struct PartialDownload: Codable {
    var url: String
    var validator: String

    static func load(_ file: URL) -> PartialDownload? {
        guard let data = try? Data(contentsOf: file) else { return nil }
        return try? JSONDecoder().decode(PartialDownload.self, from: data)
    }

    func save(to file: URL) throws {
        try OwnerOnlyFile.write(try JSONEncoder().encode(self), to: file)
    }

    /// The validator `If-Range` may carry: a strong ETag, else Last-Modified (RFC 9110 §13.1.5).
    static func validator(of headers: HTTPFields) -> String? {
        if let etag = headers[.eTag], !etag.hasPrefix("W/") { return etag }
        return headers[.lastModified]
    }
}
