import Crypto
import Foundation
import HTTPTypes

extension Client {
    /// Sends the endpoint's request and returns when the response head arrives, with the body
    /// still streaming: for callers that process a body as it comes (lines, server-sent events,
    /// large payloads).
    ///
    /// It goes through the same stages as `send(_:)`; the body is neither cached nor shared nor
    /// unboxed, and bypasses the size limit; gzip and deflate are decoded within the client's
    /// ``DecompressionLimits``. The timeout covers the wait for the head; a body that brings no byte
    /// for ``Configuration/bodyIdleTimeout`` fails with kind `timeout`. The scheduler slot is held until the body has been
    /// read to the end, cancelled or dropped. A status outside the endpoint's accepted statuses
    /// throws kind `httpStatus`, as `send(_:)` does.
    public func stream<Value>(_ endpoint: Endpoint<Value>) async throws -> StreamingResponse {
        let outcome = try await self.run(endpoint.erased(decoding: .streamed), mode: .stream)
        let raw = outcome.response
        return StreamingResponse(
            status: raw.status, headers: raw.head.headerFields, version: raw.version, expectedLength: raw.body.expectedLength,
            body: raw.body.byteStream)
    }

    /// Sends the endpoint's request with upload progress: use it for a file or multipart body.
    ///
    /// Progress counts the body bytes the transport has taken; when the request is retried or
    /// redirected with a replayable body, it starts again from zero. `AsyncHTTPClientTransport`
    /// takes them as it writes them to the connection. `URLSessionTransport` takes the whole body
    /// before the platform sends a byte (it collects a body up to 1 MiB, and copies a longer one
    /// to a temporary file), so there progress shows that local read: it is complete before the
    /// upload begins, and stays complete when the upload then fails.
    public func upload<Value: Sendable>(_ endpoint: Endpoint<Value>) -> TransferTask<Response<Value>> {
        let reporter = ProgressReporter()
        // Numbered and holding its lifecycle ticket from now, as a started request does.
        // Its task is the request's own, as a started request's is.
        let lifecycle = self.parts.lifecycle
        let (task, control) = self.inOwnTask(priority: endpoint.priority) { control in
            // The ticket ends before the progress does, as the request's task returning ends it.
            defer {
                control.endTicket(in: lifecycle)
                reporter.finish()
            }
            return try await self.response(endpoint, control: control, uploadReporter: reporter)
        }
        return TransferTask(progress: reporter.stream, task: task, control: control)
    }

    /// Downloads the endpoint's response body to a file, streamed to disk, never held in memory.
    ///
    /// The bytes go to a hidden partial file beside the destination, which is renamed into place
    /// only when the body is complete, so a partial file never sits at the final path. When a
    /// download fails or is cancelled after bytes of the file came, the partial file and the
    /// response's validator (a strong
    /// `ETag`, else a `Last-Modified` at least 60 seconds older than the response's `Date`) are
    /// kept; the next `download` of the same URL to the same destination with `resume` asks for
    /// the rest with `Range` and `If-Range`. A server that ignores the range, answers with
    /// another range, or whose resource changed, answers with the whole body or a range that
    /// does not fit, and the download restarts cleanly from zero; an answer that is not the file
    /// (a `2xx` other than 200, 203 and 206) fails with kind `httpStatus` and leaves the partial
    /// file as it was; a partial file that already holds the whole body (the server answers 416
    /// with the partial file's length) is completed without another request. The partial file is locked for the whole download: a second
    /// download to the same destination, in this process or another, fails at once with kind
    /// `invalidRequest` instead of writing into it. It goes through the same stages as
    /// `send(_:)` (constrained mode, scheduling, middleware, retries, redirects), without cache
    /// or sharing. Event monitors see one request, started once and ended once under one id,
    /// however many exchanges the body takes; its end counts the attempts and the time queued of
    /// them all.
    public func download<Value>(
        _ endpoint: Endpoint<Value>, to destination: DownloadDestination, resume: Bool = true
    ) -> TransferTask<DownloadResult> {
        let reporter = ProgressReporter()
        // Numbered and holding its lifecycle ticket from now, as a started request does: the
        // first round uses the ticket (and its place in line), and a `cancelAll` before that
        // round fails the download with the reason, with nothing sent.
        let control = self.startedControl(priority: endpoint.priority)
        let lifecycle = self.parts.lifecycle
        let task = Task { () async throws -> DownloadResult in
            defer {
                control.endTicket(in: lifecycle)
                reporter.finish()
            }
            do {
                return try await self.performDownload(endpoint, to: destination, resume: resume, control: control, reporter: reporter)
            } catch {
                throw ClassifyStage(classifier: self.configuration.errorClassifier, onEvent: nil, redactor: self.configuration.redactor)
                    .classified(error)
            }
        }
        return TransferTask(progress: reporter.stream, task: task)
    }

    private func performDownload<Value>(
        _ endpoint: Endpoint<Value>, to destination: DownloadDestination, resume: Bool, control: RequestControl, reporter: ProgressReporter
    ) async throws -> DownloadResult {
        // RFC 9110 §9.3.2: the answer to a HEAD has no content; it is never the file (an empty
        // one would be moved into place, over a real file when overwriting).
        guard endpoint.method != .head else { throw CourierError.invalidRequest("a HEAD request has no body to download") }
        let target = try destination.validated()
        let directory = target.deletingLastPathComponent()
        let partialURL = directory.appendingPathComponent(destination.hiddenName(".partial"))
        let record = directory.appendingPathComponent(destination.hiddenName(".partial.json"))
        let description = endpoint.erased(decoding: .streamed, acceptedStatuses: 200..<300)
        // The download as its monitors see it: one request, started once and ended once, whatever
        // rounds it takes (each round is an exchange of its own, with this request's id).
        let endpointWithDefaults = self.configuration.withServiceDefaults(description)
        var announced = try RequestBuilder.build(endpointWithDefaults, parts: self.parts)
        if self.parts.keepsLogicalRequests {
            let wire = RequestBuilder.wireIdentity(of: endpointWithDefaults, configuration: self.configuration)
            announced.logical = LogicalRequest(announced, wire: wire)
        }
        let urlString = announced.urlString
        // Held until this function returns: no other download writes into this partial file.
        let partial = try await PartialFile.lock(partialURL, destination: target)
        defer { partial.close() }
        var offset: Int64 = 0
        var validator: String?
        var length: Int64?
        let size = try partial.size()
        if resume, size > 0, let state = PartialDownload.load(record), state.names(urlString) {
            offset = size
            validator = state.validator
            length = state.length
        } else {
            try? FileManager.default.removeItem(at: record)
        }
        let start = ContinuousClock.now
        let events = self.parts.events
        events.emit(announced) { $0.requestStarted($1) }
        // The rounds' records, for the end event (whose request is always `announced`: the
        // logical request, as at the start, without the rounds' ranges).
        var rounds: [ExchangeRecord] = []
        do {
            return try await self.downloadRounds(
                description, announced: announced, partial: partial, partialURL: partialURL, record: record, target: target,
                destination: destination, offset: offset, validator: validator, length: length, start: start, control: control,
                reporter: reporter, records: &rounds)
        } catch {
            // Nothing of the file came (a 404, a refused connection, a reset before the first
            // byte): the empty partial file could resume nothing (a record of it neither: resuming
            // needs bytes), and both go. The file goes while still locked, and only if it is
            // still the one at the path: a download waiting for it finds the path gone and makes
            // its own.
            if (try? partial.size()) == 0 {
                try? FileManager.default.removeItem(at: record)
                partial.unlinkIfStill(at: partialURL)
            }
            events.failed(announced, failure: ObserveStage.failure(error), start: start, record: .summary(of: rounds))
            throw error
        }
    }

    /// The rounds of a download until its file is in place: each asks for the rest of the body
    /// (or all of it again), and the last reports the download's end to the monitors (with the
    /// attempts and the time queued of every round). `records` holds the rounds' records.
    /// `length` is the complete length the partial file's parts were sent with, when known.
    private func downloadRounds(
        _ description: EndpointDescription, announced: Request, partial: PartialFile, partialURL: URL, record: URL, target: URL,
        destination: DownloadDestination, offset: Int64, validator: String?, length: Int64?, start: ContinuousClock.Instant,
        control: RequestControl, reporter: ProgressReporter, records: inout [ExchangeRecord]
    ) async throws -> DownloadResult {
        let urlString = announced.urlString
        var offset = offset
        var validator = validator
        // The complete length (RFC 9110 §14.4) the bytes so far belong to: every part of one
        // representation states the same one (§15.3.7.3), so a part that states another is of
        // another version, even from a server that ignores If-Range and sends no validator.
        var knownLength = length
        // Two rounds at most that start again from zero; a round that brought the next part of
        // the body (a server that answers a range with less than the rest) does not count.
        var rounds = 0
        // Where this call's bytes began (a later part of the same body keeps it).
        var resumedFrom: Int64 = 0
        var continuing = false
        // The first round uses the download's control (its ticket, its place in line); a later
        // round queues as a new request would, numbered when it does.
        var roundControl: RequestControl? = control
        while rounds < 2 {
            rounds += 1
            let rangeStart = offset
            let ifRange = validator
            let outcome: Outcome
            let round = ExchangeRecord()
            // A server that sends the body in many small parts (one byte each, say) makes many
            // rounds: their records are folded into one summary as they go, so memory stays flat.
            if records.count >= 8 { records = [.summary(of: records)] }
            records.append(round)
            do {
                defer { roundControl = nil }
                outcome = try await self.run(description, mode: .download, control: roundControl, id: announced.id, record: round) {
                    request in
                    // Ranges count bytes of the representation as sent: never content-coded here.
                    request.head.headerFields[.acceptEncoding] = "identity"
                    if rangeStart > 0, let ifRange {
                        request.head.headerFields[.range] = "bytes=\(rangeStart)-"
                        request.head.headerFields[.ifRange] = ifRange
                    }
                }
            } catch let error as CourierError
                where error.kind == .httpStatus && error.status?.code == 416 && rangeStart > 0 && ifRange != nil
            {
                // A server evaluates If-Range before Range (RFC 9110 §13.2.2), so a 416 means the
                // validator still matched; when its unsatisfied range states exactly the partial
                // file's length (§14.4), the file already holds the whole body.
                // A 416 that names another version (a server that ignored If-Range) proves nothing.
                let sameVersion = !Self.namesAnotherVersion(error.headers ?? HTTPFields(), than: ifRange)
                if sameVersion, let length = error.headers?[.contentRange].flatMap(ContentRangeHeader.unsatisfiedLength),
                    Int64(length) == rangeStart, knownLength.map({ $0 == rangeStart }) ?? true
                {
                    reporter.start(completed: rangeStart, expected: rangeStart)
                    try Self.moveIntoPlace(partialURL, to: target, overwrite: destination.overwrite)
                    try? FileManager.default.removeItem(at: record)
                    if self.parts.events.isActive {
                        let result = EventHub.result(
                            response: HTTPResponse(status: .init(code: 416), headerFields: error.headers ?? HTTPFields()), body: nil,
                            bodySize: 0, version: round.version, source: .network, age: nil, start: start, url: announced.urlString,
                            record: .summary(of: records), delivery: .downloaded(resumedAt: continuing ? resumedFrom : rangeStart))
                        self.parts.events.emit(announced) { $0.requestFinished($1, result: result) }
                    }
                    return DownloadResult(
                        url: target, byteCount: rangeStart, resumedFrom: continuing ? resumedFrom : rangeStart,
                        status: .rangeNotSatisfiable, headers: error.headers ?? HTTPFields())
                }
                // Not satisfiable otherwise (the resource shrank): start again from zero rather
                // than failing the same way forever.
                offset = 0
                validator = nil
                knownLength = nil
                continuing = false
                try? FileManager.default.removeItem(at: record)
                continue
            }
            let raw = outcome.response
            // Only these carry the file: 200 and 203 the whole representation (RFC 9110 §15.3.1,
            // §15.3.4), 206 a part of it (§15.3.7). Another 2xx — 202, processing not finished
            // (§15.3.3); 204, no content (§15.3.5) — is no file: it fails, and the partial file
            // and its record stay as they were.
            guard raw.status.code == 200 || raw.status.code == 203 || raw.status.code == 206 else {
                let body = try? await raw.body.collect(upTo: Self.unexpectedBodyLimit)
                throw CourierError.httpStatus(raw.head, body: body)
            }
            // The size of the whole file (when known), and where this answer's bytes end.
            var total: Int64?
            var end: Int64?
            if raw.decodedByPlatform, raw.status.code == 206 {
                // A part decoded on its way here (a server that compressed it although the
                // download asked for `identity`): its bytes are no range of the file. Start again
                // from zero, without a range.
                raw.body.byteStream.cancel()
                offset = 0
                validator = nil
                knownLength = nil
                continuing = false
                continue
            }
            if raw.status.code == 206 {
                // Parts combine only when they share the strong validator asked with (RFC 9110
                // §15.3.7.3): a 206 that names another version — another ETag for an ETag, another
                // Last-Modified for a date (a server that ignored If-Range) — is refused.
                let otherVersion = Self.namesAnotherVersion(raw.head.headerFields, than: validator)
                // Only bytes at the offset asked for join the file. At offset 0 no range was
                // asked, and a part from the first byte (a careless server's) is the file's start.
                // A single range is never answered with `multipart/byteranges` (RFC 9110 §14.6
                // MUST NOT): such a body holds boundaries and part headers, no bytes of the file.
                let multipart =
                    raw.head.headerFields[.contentType].map {
                        FieldText.token(FieldText.split($0, at: ";", maxSplits: 1)[0]) == "multipart/byteranges"
                    } ?? false
                guard let range = ContentRangeHeader.parse(raw.head.headerFields[.contentRange] ?? ""),
                    Int64(range.range.lowerBound) == offset,
                    !otherVersion,
                    !multipart,
                    range.completeLength.map({ complete in knownLength.map { $0 == Int64(complete) } ?? true }) ?? true,
                    // A part of unknown complete length (`*`) still ends inside the length known:
                    // every part of one representation has one (RFC 9110 §14.4).
                    knownLength.map({ Int64(range.range.upperBound) < $0 }) ?? true,
                    // A body announced longer than its range is not this range (§14.4: the
                    // Content-Range is what the body holds): a proxy that sends the whole file
                    // under the part's header fields.
                    raw.body.expectedLength.map({ Int64($0) <= Int64(range.range.count) }) ?? true
                else {
                    // A range we did not ask for, of another version, or not what the body holds:
                    // start again from zero without one.
                    raw.body.byteStream.cancel()
                    offset = 0
                    validator = nil
                    knownLength = nil
                    continuing = false
                    continue
                }
                // This part ends where its range ends; the file at the complete length (RFC 9110
                // §14.4). A server that sent `*` (length unknown) is asked for the rest once the
                // part is in: the file is whole when it answers 416 or states the length.
                end = Int64(range.range.upperBound) + 1
                total = range.completeLength.map(Int64.init) ?? knownLength
                knownLength = total
            } else {
                // The whole body: the server ignored the range or the resource changed. This
                // call's bytes now begin at zero, whatever parts came before.
                offset = 0
                continuing = false
                total = raw.body.expectedLength.map(Int64.init)
                knownLength = total
                end = total
            }
            // The record of the old validator goes before the file is cut back, and the new one is
            // written only after: a crash in between never pairs old bytes with a new validator.
            // A 206 need not repeat the validators when it honoured If-Range (RFC 9110 §15.3.7):
            // the one the range was asked with then still stands.
            // A body the platform decoded (a server that compressed it although the download
            // asked for `identity`) is kept, but its bytes count no range of the representation:
            // no validator is kept with it, so a cut is not resumed.
            let newValidator =
                raw.decodedByPlatform
                ? nil : PartialDownload.validator(of: raw.head.headerFields) ?? (raw.status.code == 206 ? validator : nil)
            if offset == 0 || newValidator == nil {
                try? FileManager.default.removeItem(at: record)
            }
            let written: Int64
            if !continuing { resumedFrom = offset }
            do {
                try partial.prepare(from: offset)
                if let newValidator {
                    try? PartialDownload(url: PartialDownload.digest(of: urlString), validator: newValidator, length: knownLength)
                        .save(to: record)
                }
                written = try await partial.write(raw.body, from: offset, reporter: reporter, expected: total, end: end)
                if let end, written != end {
                    throw CourierError(.transport, "the download ended after \(written) of \(end) bytes; it can be resumed")
                }
                let short = total.map { written < $0 } ?? (raw.status.code == 206)
                if short, let newValidator {
                    // A part that stops before the end (a server that caps its ranges), or whose
                    // complete length is unknown: the rest is asked for next, with the same validator.
                    offset = written
                    validator = newValidator
                    continuing = true
                    rounds -= 1
                    continue
                }
                if let total, written != total {
                    throw CourierError(
                        .transport,
                        "the server sent the file up to byte \(written) of \(total) without a validator to ask for the rest with")
                }
                if total == nil, raw.status.code == 206 {
                    // A part whose complete length is unknown (`*`), and no validator to ask for
                    // the rest with: it may not be the whole file, so it is not put in place as one.
                    throw CourierError(
                        .transport,
                        "the server sent a part up to byte \(written) of a file of unknown length without a validator to ask for the rest with"
                    )
                }
                try Self.moveIntoPlace(partialURL, to: target, overwrite: destination.overwrite)
            } catch {
                throw CourierError.wrap(error)
            }
            try? FileManager.default.removeItem(at: record)
            if self.parts.events.isActive {
                let result = EventHub.result(
                    response: raw.head, body: nil, bodySize: Int(written - resumedFrom), version: raw.version, source: .network, age: nil,
                    start: start, url: outcome.urlString, record: .summary(of: records), delivery: .downloaded(resumedAt: resumedFrom)
                )
                self.parts.events.emit(announced) { $0.requestFinished($1, result: result) }
            }
            return DownloadResult(
                url: target, byteCount: written, resumedFrom: resumedFrom, status: raw.status, headers: raw.head.headerFields)
        }
        throw CourierError(.transport, "the server answered the range request with a range that was not asked for")
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

extension Client {
    /// Whether a 206's fields name another version than `validator`: another ETag when it is an
    /// ETag, another `Last-Modified` when it is a date. Fields that name none tell nothing.
    /// Compared byte for byte (RFC 9110 §8.8.3.2's strong comparison), not as Unicode text.
    static func namesAnotherVersion(_ fields: HTTPFields, than validator: String?) -> Bool {
        guard let validator, !validator.hasPrefix("W/") else { return false }
        if validator.contains("\"") { return fields[.eTag].map { !$0.utf8.elementsEqual(validator.utf8) } ?? false }
        return fields[.lastModified].map { !$0.utf8.elementsEqual(validator.utf8) } ?? false
    }

    /// The most bytes kept of the body of a download's answer that is no file (a 202, a 204).
    static let unexpectedBodyLimit = 64 * 1024
}

/// What is remembered about an unfinished download, to resume it.
struct PartialDownload: Codable {
    /// The URL's ``digest(of:)``: a pre-signed URL's signature and token stay out of the file.
    /// (Records written before hold the URL itself.)
    var url: String
    var validator: String
    /// The complete length the bytes so far were sent with, when known (absent from records
    /// written before it was kept).
    var length: Int64?

    /// The largest record read: a URL and a validator take far less.
    static let sizeLimit = 64 * 1024

    /// How a record names a download's URL: `sha256:` and the hex SHA-256 of its text.
    static func digest(of url: String) -> String {
        "sha256:" + SHA256.hash(data: Data(url.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Whether the record is of `url` (by its digest, or, written before, by the URL itself).
    func names(_ url: String) -> Bool {
        self.url == Self.digest(of: url) || self.url == url
    }

    /// The record in `file`, when it is a plain file of this user's, not larger than
    /// ``sizeLimit``; `nil` otherwise. Opened without following links and without waiting:
    /// a link or a FIFO planted at its name is neither followed nor waited on.
    static func load(_ file: URL) -> PartialDownload? {
        let descriptor = open(file.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, status.st_uid == geteuid(),
            status.st_size <= Self.sizeLimit, let data = try? handle.read(upToCount: Self.sizeLimit)
        else { return nil }
        return try? JSONDecoder().decode(PartialDownload.self, from: data)
    }

    func save(to file: URL) throws {
        try OwnerOnlyFile.write(try JSONEncoder().encode(self), to: file)
    }

    /// The validator `If-Range` may carry: a strong ETag, else a Last-Modified date that is
    /// strong, which for a client means at least 60 seconds before the response's `Date`
    /// (RFC 9110 §13.1.5: a client MUST NOT send a weak validator or a date that is not strong
    /// in If-Range; §8.8.2.2); `nil` when there is none, and the download cannot resume.
    /// An ETag that is not a well-formed strong entity tag (`"…"`, §8.8.3) is none either:
    /// with an entity tag at hand, a client may not fall back on the date.
    static func validator(of headers: HTTPFields) -> String? {
        if let etag = headers[.eTag] { return Validators.strongETag(etag) }
        guard let text = headers[.lastModified], let modified = HTTPDate.parse(text),
            let sentText = headers[.date], let sent = HTTPDate.parse(sentText), sent.timeIntervalSince(modified) >= 60
        else { return nil }
        return text
    }
}

/// The partial file of a download, open and locked (`flock`) while the download runs, so that
/// two downloads to one destination, in one process or two, never write into the same file.
package final class PartialFile {
    private let handle: FileHandle
    /// The path this process's downloads know the file by, while this download holds it.
    private var registered: String?

    /// The partial files this process's downloads hold: a second download here fails at once,
    /// without asking the file system.
    private static let held = Locked<Set<String>>([])
    /// How long a lock held outside this process's downloads is waited for before the download
    /// fails: long enough for a child process to let go of it (see ``lock(_:destination:)``).
    static let contendedWait: Duration = .seconds(2)
    /// Called, by the partial file's path, each time a download finds its lock held elsewhere
    /// and waits (for tests).
    package static let whenWaiting = Locked<[String: @Sendable () -> Void]>([:])

    private init(handle: FileHandle) {
        self.handle = handle
    }

    /// Opens (creating) and locks the partial file at `url`; throws kind `invalidRequest` when
    /// another download holds it.
    ///
    /// A download of this process holding it fails the call at once. A lock held elsewhere is
    /// waited for up to ``contendedWait``: besides another process's download, a child process
    /// this one starts holds every lock this process holds from its fork until its exec closes
    /// the descriptors it inherited, and a download must not fail for that.
    static func lock(_ url: URL, destination: URL) async throws -> PartialFile {
        let path = url.path
        guard Self.held.withLock({ $0.insert(path).inserted }) else {
            throw CourierError.invalidRequest("another download to \(destination.path) is in progress")
        }
        do {
            let file = try await Self.openAndLock(url, destination: destination)
            file.registered = path
            return file
        } catch {
            Self.held.withLock { _ = $0.remove(path) }
            throw error
        }
    }

    private static func openAndLock(_ url: URL, destination: URL) async throws -> PartialFile {
        let deadline = ContinuousClock.now + Self.contendedWait
        var replaced = 0
        while true {
            // O_NOFOLLOW: a link planted at the partial file's name is never written through.
            let descriptor = open(url.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard descriptor >= 0 else {
                throw CourierError.invalidRequest("cannot create \(url.path): \(String(cString: strerror(errno)))")
            }
            let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
            if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
                let code = errno
                // A file system without locks (some network and FUSE mounts): download unlocked,
                // as before locking existed, rather than not at all.
                if code != ENOLCK && code != EOPNOTSUPP && code != ENOTSUP {
                    try? handle.close()
                    guard code == EWOULDBLOCK else {
                        throw CourierError.invalidRequest("cannot lock \(url.path): \(String(cString: strerror(code)))")
                    }
                    guard ContinuousClock.now < deadline else {
                        throw CourierError.invalidRequest("another download to \(destination.path) is in progress")
                    }
                    Self.whenWaiting.withLock { $0[url.path] }?()
                    try await Task.sleep(for: .milliseconds(20))
                    continue
                }
            }
            // Between open and flock the file may have been renamed into place by the download
            // that held it: keep the lock only if it is still the file at the path.
            var opened = stat()
            var current = stat()
            if fstat(descriptor, &opened) == 0, lstat(url.path, &current) == 0, opened.st_dev == current.st_dev,
                opened.st_ino == current.st_ino
            {
                // Only a plain file of this user's with no other name: never a device, a FIFO,
                // a hard link to a file elsewhere, or a file another user planted (its bytes
                // would start the download, renamed into place still theirs).
                guard (opened.st_mode & S_IFMT) == S_IFREG, opened.st_nlink == 1, opened.st_uid == geteuid() else {
                    try? handle.close()
                    throw CourierError.invalidRequest("\(url.path) is not a plain file of this user's own; remove it to download")
                }
                return PartialFile(handle: handle)
            }
            try? handle.close()
            replaced += 1
            if replaced == 3 {
                throw CourierError.invalidRequest("another download to \(destination.path) is in progress")
            }
        }
    }

    /// Removes the file's name at `url` if the name is still this open file's (the same device
    /// and inode): never another download's file that took the name meanwhile.
    func unlinkIfStill(at url: URL) {
        var opened = stat()
        var current = stat()
        guard fstat(self.handle.fileDescriptor, &opened) == 0, lstat(url.path, &current) == 0, opened.st_dev == current.st_dev,
            opened.st_ino == current.st_ino
        else { return }
        unlink(url.path)
    }

    /// The file's size in bytes.
    func size() throws -> Int64 {
        Int64(try self.handle.seekToEnd())
    }

    /// Drops anything after `offset` and moves there, ready for ``write(_:from:reporter:expected:)``.
    func prepare(from offset: Int64) throws {
        // Truncated only when something is there to drop: on ext4, a file truncated to zero and
        // rewritten is flushed to disk on close (the "replace by truncate" heuristic), which
        // costs throughput (measured: Benchmarks/README.md, "Performance choices in the code").
        if try self.size() != offset {
            try self.handle.truncate(atOffset: UInt64(offset))
        }
        try self.handle.seek(toOffset: UInt64(offset))
    }

    /// Streams a body into the file at `offset` (where ``prepare(from:)`` left it); returns the
    /// file's size. Never writes past `end`: a body longer than the server announced (a 206
    /// longer than its range) is no part the file can trust, so the file is cut back to `offset`
    /// (what came before stays resumable) and the download fails.
    func write(_ body: ResponseBody, from offset: Int64, reporter: ProgressReporter, expected: Int64?, end: Int64?) async throws -> Int64 {
        reporter.start(completed: offset, expected: expected)
        var written = offset
        let stream = body.byteStream
        for try await chunk in stream {
            try Task.checkCancellation()
            if let end, Int64(chunk.count) > end - written {
                stream.cancel()
                try self.handle.truncate(atOffset: UInt64(offset))
                throw CourierError(
                    .transport,
                    "the server sent more than the \(end - offset) bytes it announced; none of them is kept and the download can be resumed"
                )
            }
            try self.handle.write(contentsOf: chunk)
            written += Int64(chunk.count)
            reporter.add(chunk.count)
        }
        try Task.checkCancellation()
        return written
    }

    /// Releases the lock and closes the file.
    func close() {
        try? self.handle.close()
        if let path = self.registered {
            self.registered = nil
            Self.held.withLock { _ = $0.remove(path) }
        }
    }
}
