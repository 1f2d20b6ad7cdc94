import Foundation

/// Splits bytes into lines ending in LF, CRLF or CR, as they arrive.
///
/// A pure value: feed it chunks, take complete lines. A CR at the end of a chunk is held until the
/// next byte shows whether an LF follows, so a CRLF split across chunks is one line ending.
package struct LineSplitter: Sendable {
    private var pending: [UInt8] = []
    private var lastWasCR = false
    /// The longest line accepted, in bytes.
    package let maxLineLength: Int

    package init(maxLineLength: Int) { self.maxLineLength = maxLineLength }

    /// Adds bytes and returns the lines they complete, without their endings; throws kind
    /// `responseTooLarge` for a line longer than the limit (losing the lines completed before it
    /// in the same chunk: ``feedKeeping(_:)`` keeps them).
    package mutating func feed(_ chunk: Data) throws -> [String] {
        let (lines, failure) = self.feedKeeping(chunk)
        if let failure { throw failure }
        return lines
    }

    /// Adds bytes and returns the lines they complete, without their endings, and the failure
    /// (kind `responseTooLarge`) of a line longer than the limit, if one came: the lines before it
    /// come first, as a reader would have had them in smaller chunks.
    package mutating func feedKeeping(_ chunk: Data) -> (lines: [String], failure: CourierError?) {
        var lines: [String] = []
        for byte in chunk {
            if self.lastWasCR {
                self.lastWasCR = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\n"):
                lines.append(self.take())
            case UInt8(ascii: "\r"):
                lines.append(self.take())
                self.lastWasCR = true
            default:
                self.pending.append(byte)
                if self.pending.count > self.maxLineLength {
                    return (lines, CourierError(.responseTooLarge, "a line of the response is longer than \(self.maxLineLength) bytes"))
                }
            }
        }
        return (lines, nil)
    }

    /// The last line, when the stream ended without a line ending.
    package mutating func finish() -> String? {
        self.pending.isEmpty ? nil : self.take()
    }

    private mutating func take() -> String {
        defer { self.pending.removeAll(keepingCapacity: true) }
        return String(decoding: self.pending, as: UTF8.self)
    }
}

/// The lines of a streamed body, without their endings (LF, CRLF or CR), as they arrive.
public struct LineSequence: AsyncSequence, Sendable {
    /// A line of text.
    public typealias Element = String
    let base: ByteStream
    let maxLineLength: Int

    /// The iterator of a ``LineSequence``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        /// The body, told to stop when reading gives up on it (see ``ByteStream/cancel()``).
        let base: ByteStream
        var chunks: ByteStream.AsyncIterator
        var splitter: LineSplitter
        var ready: [String] = []
        var index = 0
        var ended = false
        /// A failure that comes after the lines in `ready`.
        var failure: CourierError?

        /// Ends the lines here: no more are read, and the body's producer is told to stop.
        mutating func end() {
            self.ready = []
            self.index = 0
            self.failure = nil
            self.ended = true
            self.base.cancel()
        }

        /// The next line, or `nil` at the end of the body.
        public mutating func next() async throws -> String? {
            while true {
                if self.index < self.ready.count {
                    defer { self.index += 1 }
                    return self.ready[self.index]
                }
                if let failure = self.failure {
                    self.failure = nil
                    self.ended = true
                    throw failure
                }
                if self.ended { return nil }
                self.ready = []
                self.index = 0
                let chunk: Data?
                do {
                    chunk = try await self.chunks.next()
                } catch {
                    // Reading gave up on the body: its producer may stop (unless this was a second
                    // reader, refused: the first still owns it).
                    self.ended = true
                    if !ByteStream.isReadAgain(error) { self.base.cancel() }
                    throw error
                }
                if let chunk {
                    let (lines, failure) = self.splitter.feedKeeping(chunk)
                    self.ready = lines
                    if let failure {
                        self.failure = failure
                        self.base.cancel()
                    }
                } else {
                    self.ended = true
                    if let last = self.splitter.finish() { self.ready = [last] }
                }
            }
        }
    }

    /// Makes an iterator over the lines.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: self.base, chunks: self.base.makeAsyncIterator(), splitter: LineSplitter(maxLineLength: self.maxLineLength))
    }
}

/// One server-sent event (the `text/event-stream` format of the HTML standard).
public struct ServerSentEvent: Sendable, Hashable {
    /// The event type (`message` when the stream does not name one).
    public var event: String
    /// The data lines, joined with LF.
    public var data: String
    /// The last event ID the stream set, if any.
    public var id: String?
    /// The reconnection time the stream asked for, in milliseconds, if any.
    public var retry: Int?

    /// Creates an event.
    public init(event: String = "message", data: String, id: String? = nil, retry: Int? = nil) {
        self.event = event
        self.data = data
        self.id = id
        self.retry = retry
    }
}

/// Turns lines into server-sent events: a pure value, fed one line at a time.
///
/// An event's data may hold at most `maxEventSize` bytes (each data line counts its bytes and
/// the line feed that joins it): a stream of data lines that never ends an event fails with
/// kind `responseTooLarge` instead of growing memory.
package struct ServerSentEventParser: Sendable {
    package let maxEventSize: Int
    /// The data lines so far, joined by line feeds as they come (one buffer: as many lines of
    /// strings took 16 bytes each for a line that is empty, past the limit's bytes many times over).
    private var data = ""
    /// Whether a `data` line came (an empty one included).
    private var hasData = false
    private var dataBytes = 0
    private var event = ""
    private var lastID: String?
    private var retry: Int?
    private var sawFirstLine = false

    package init(maxEventSize: Int = 1 << 20) {
        self.maxEventSize = maxEventSize
    }

    /// Takes one line; returns the event a blank line completes.
    package mutating func feed(_ line: String) throws -> ServerSentEvent? {
        // Code points, not characters (WHATWG HTML §9.2.6 works on code points): a colon or a
        // space followed by a combining mark is one Swift character, and would hide the colon.
        var line = Substring(line).unicodeScalars
        if !self.sawFirstLine {
            self.sawFirstLine = true
            if line.first == "\u{FEFF}" { line = line.dropFirst() }
        }
        if line.isEmpty {
            defer {
                self.data = ""
                self.hasData = false
                self.dataBytes = 0
                self.event = ""
            }
            guard self.hasData else { return nil }
            return ServerSentEvent(event: self.event.isEmpty ? "message" : self.event, data: self.data, id: self.lastID, retry: self.retry)
        }
        if line.first == ":" { return nil }
        let field: Substring
        var value: Substring
        if let colon = line.firstIndex(of: ":") {
            field = Substring(line[..<colon])
            var rest = line[line.index(after: colon)...]
            if rest.first == " " { rest = rest.dropFirst() }
            value = Substring(rest)
        } else {
            field = Substring(line)
            value = ""
        }
        switch field {
        case "data":
            self.dataBytes += value.utf8.count + 1
            // Compared as `dataBytes - 1` (the first line has no joining line feed), so a limit
            // of `Int.max` cannot overflow.
            guard self.dataBytes - 1 <= self.maxEventSize else {
                var error = CourierError(.responseTooLarge, "a server-sent event's data is longer than \(self.maxEventSize) bytes")
                error.limit = self.maxEventSize
                throw error
            }
            if self.hasData { self.data.append("\n") }
            self.data.append(contentsOf: value)
            self.hasData = true
        case "event": self.event = String(value)
        case "id" where !value.contains("\0"): self.lastID = String(value)
        // Only ASCII digits set the reconnection time (a sign, a space or nothing is ignored);
        // a value too large for `Int` is `Int.max`.
        case "retry": if let milliseconds = UntrustedNumber.digits(value) { self.retry = milliseconds }
        default: break
        }
        return nil
    }
}

/// The server-sent events of a streamed `text/event-stream` body, as they arrive.
public struct ServerSentEventSequence: AsyncSequence, Sendable {
    /// An event.
    public typealias Element = ServerSentEvent
    let lines: LineSequence
    let maxEventSize: Int

    /// The iterator of a ``ServerSentEventSequence``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var lines: LineSequence.AsyncIterator
        var parser: ServerSentEventParser
        var failed = false

        /// The next complete event, or `nil` at the end of the stream (an unfinished event is dropped).
        /// After an event too large, the stream is over: the rest of that event would have come
        /// as an event of its own, cut short.
        public mutating func next() async throws -> ServerSentEvent? {
            if self.failed { return nil }
            while let line = try await self.lines.next() {
                do {
                    if let event = try self.parser.feed(line) { return event }
                } catch {
                    self.failed = true
                    self.lines.end()
                    throw error
                }
            }
            return nil
        }
    }

    /// Makes an iterator over the events.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(lines: self.lines.makeAsyncIterator(), parser: ServerSentEventParser(maxEventSize: self.maxEventSize))
    }
}
