import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHPACK
import NIOHTTP1
import NIOHTTP2

/// Answers the requests of one HTTP/1.1 connection or one HTTP/2 stream.
///
/// In raw mode (HTTP/1.1) the handler writes bytes itself, so it can send malformed or truncated
/// responses; in codec mode (an HTTP/2 stream) it writes `HTTPServerResponsePart`s.
final class ExchangeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let state: ServerState
    private let connectionID: Int
    private let raw: Bool
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()
    private var bodyLength = 0
    private var responding = false
    private var active = true
    /// The filler bytes still to send for a `.generated` response, and whether to keep the connection.
    private var generating: (remaining: Int, keepAlive: Bool)?
    /// The filler sent in slices, made on this handler's event loop for each generated response.
    /// Not one buffer for the whole process: a `static let` is made on whichever loop asks first
    /// and read from the others, and on Linux ThreadSanitizer does not see the ordering a lazy
    /// static's initialisation gives (the runtime's check is not instrumented), so another
    /// loop's read of its bytes can be reported as a race.
    private var filler: ByteBuffer?

    init(state: ServerState, connectionID: Int, raw: Bool) {
        self.state = state
        self.connectionID = connectionID
        self.raw = raw
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            self.body.clear()
            self.bodyLength = 0
        case .body(var buffer):
            self.bodyLength += buffer.readableBytes
            if self.state.keepsRequestBodies { self.body.writeBuffer(&buffer) }
        case .end:
            guard let head = self.head else { return }
            self.head = nil
            let version = head.version.major >= 2 ? "HTTP/2" : "HTTP/\(head.version.major).\(head.version.minor)"
            let request = RecordedRequest(
                method: head.method.rawValue,
                uri: head.uri,
                headers: head.headers.map { ($0.name, $0.value) },
                body: Data(buffer: self.body),
                bodyLength: self.bodyLength,
                httpVersion: version,
                connectionID: self.connectionID
            )
            if self.state.recordsRequests { self.state.locked.withLockedValue { $0.requests.append(request) } }
            self.responding = true
            let handler = self.state.handler
            let keepAlive = head.isKeepAlive
            context.eventLoop.makeFutureWithTask {
                await handler(request)
            }.assumeIsolated().whenSuccess { response in
                self.perform(response, keepAlive: keepAlive, head: head, context: context)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.active = false
        if self.responding {
            self.responding = false
            self.state.locked.withLockedValue { $0.abandoned += 1 }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    // MARK: - Sending

    private func perform(_ response: ScriptedResponse, keepAlive: Bool, head: HTTPRequestHead, context: ChannelHandlerContext) {
        guard self.active else { return }
        let loop = context.eventLoop.assumeIsolated()
        let bodyAllowed = head.method != .HEAD
        switch response.behaviour {
        case .normal:
            self.writeHead(response, chunked: false, context: context)
            if bodyAllowed { self.writeBody(response.body[...], context: context) }
            self.finish(keepAlive: keepAlive, context: context)
        case .closeBeforeResponding:
            self.responding = false
            context.close(promise: nil)
        case .resetStream(let code):
            self.responding = false
            // Written below the HTTP/1 codec, straight to the stream: a RST_STREAM frame.
            if let codec = try? context.pipeline.syncOperations.context(handlerType: HTTP2FramePayloadToHTTP1ServerCodec.self) {
                codec.writeAndFlush(NIOAny(HTTP2Frame.FramePayload.rstStream(HTTP2ErrorCode(networkCode: Int(code)))), promise: nil)
            } else {
                context.close(promise: nil)
            }
        case .goAway:
            self.responding = false
            guard let connection = context.channel.parent,
                let streamID = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
            else {
                context.close(promise: nil)
                return
            }
            let last = HTTP2StreamID(max(0, Int(Int32(streamID)) - 2))
            connection.writeAndFlush(
                HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil)), promise: nil)
        case .pingFlood(let count):
            // Only on an HTTP/2 stream (for HTTP/1.1 the parent is the listening socket).
            if let connection = context.channel.parent,
                (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) != nil
            {
                for index in 0..<max(0, count) {
                    connection.write(
                        HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: UInt64(index)), ack: false)),
                        promise: nil)
                }
                connection.flush()
            }
            self.perform(response.with(.normal), keepAlive: keepAlive, head: head, context: context)
        case .headOnlyEndingStream(let status):
            // Written below the HTTP/1 codec, straight to the stream: a HEADERS frame with
            // END_STREAM, which ends the response.
            guard let codec = try? context.pipeline.syncOperations.context(handlerType: HTTP2FramePayloadToHTTP1ServerCodec.self) else {
                self.perform(response.with(.normal), keepAlive: keepAlive, head: head, context: context)
                return
            }
            self.responding = false
            let headers = HPACKHeaders([(":status", String(status))])
            codec.writeAndFlush(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: true))), promise: nil)
        case .interimHead(let status):
            // Written below the HTTP/1 codec, straight to the stream (which checks nothing of
            // the value): a HEADERS frame without END_STREAM.
            if let codec = try? context.pipeline.syncOperations.context(handlerType: HTTP2FramePayloadToHTTP1ServerCodec.self) {
                let headers = HPACKHeaders([(":status", String(status))])
                codec.write(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: false))), promise: nil)
            }
            self.perform(response.with(.normal), keepAlive: keepAlive, head: head, context: context)
        case .resetMidBody(let bytes):
            self.responding = false
            self.writeHead(response, chunked: false, context: context)
            self.writeBody(response.body.prefix(bytes), context: context)
            // The TCP connection: the channel itself for HTTP/1.1, the stream's parent for HTTP/2.
            let socket = context.channel is any SocketOptionProvider ? context.channel : (context.channel.parent ?? context.channel)
            context.writeAndFlush(self.wrapRaw(ByteBuffer())).assumeIsolated().whenComplete { _ in
                // A zero linger time makes close send RST instead of FIN.
                guard let provider = socket as? any SocketOptionProvider else {
                    socket.close(promise: nil)
                    return
                }
                provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in
                    socket.close(promise: nil)
                }
            }
        case .slowHead(let interval):
            guard self.raw else {
                loop.scheduleTask(in: .seconds(60)) {
                    self.perform(response.with(.normal), keepAlive: keepAlive, head: head, context: context)
                }
                return
            }
            self.dripHead(
                Array(self.headText(response, chunked: false).utf8)[...], interval: interval, response: response, keepAlive: keepAlive,
                context: context)
        case .closeMidBody(let bytes):
            self.responding = false
            self.writeHead(response, chunked: false, context: context)
            self.writeBody(response.body.prefix(bytes), context: context)
            context.writeAndFlush(self.wrapRaw(ByteBuffer()), promise: nil)
            context.close(promise: nil)
        case .stall(let duration):
            loop.scheduleTask(in: Self.timeAmount(duration)) {
                self.perform(response.with(.normal), keepAlive: keepAlive, head: head, context: context)
            }
        case .stallMidBody(let bytes, let duration):
            self.writeHead(response, chunked: false, context: context)
            self.writeBody(response.body.prefix(bytes), context: context)
            context.flush()
            loop.scheduleTask(in: Self.timeAmount(duration)) {
                guard self.active else { return }
                self.writeBody(response.body.dropFirst(bytes), context: context)
                self.finish(keepAlive: keepAlive, context: context)
            }
        case .malformed:
            self.responding = false
            self.writeRaw("HTTP/1.1 2OO NOT-A-STATUS\r\nthis is not a header line\r\n\r\n", context: context)
            context.close(promise: nil)
        case .rawResponse(let text):
            self.responding = false
            self.writeRaw(text, context: context)
            context.flush()
            context.close(promise: nil)
        case .truncatedHead:
            self.responding = false
            self.writeRaw("HTTP/1.1 200 OK\r\nContent-Ty", context: context)
            context.close(promise: nil)
        case .bodyLargerThanAnnounced(let extra):
            self.writeHead(response, chunked: false, context: context)
            self.writeBody(response.body[...], context: context)
            if self.raw {
                var buffer = context.channel.allocator.buffer(capacity: extra.count)
                buffer.writeBytes(extra)
                context.write(NIOAny(buffer), promise: nil)
            }
            self.finish(keepAlive: keepAlive, context: context)
        case .pieces(let size):
            self.writeHead(response, chunked: false, context: context)
            if bodyAllowed { self.writePieces(response.body[...], size: size, context: context) }
            self.finish(keepAlive: keepAlive, context: context)
        case .piecesWithTrailers(let size, let trailers):
            self.writeHead(response, chunked: false, context: context)
            if bodyAllowed { self.writePieces(response.body[...], size: size, context: context) }
            self.finish(keepAlive: keepAlive, trailers: self.raw ? nil : HTTPHeaders(trailers), context: context)
        case .chunked(let size, let delay):
            self.writeHead(response, chunked: true, context: context)
            self.sendChunks(response.body[...], size: max(1, size), delay: delay, keepAlive: keepAlive, context: context)
        case .generated(let length):
            var announced = response
            announced.headers.removeAll { $0.0.lowercased() == "content-length" }
            announced.headers.append(("Content-Length", "\(length)"))
            self.writeHead(announced, chunked: false, context: context)
            self.generating = (bodyAllowed ? length : 0, keepAlive)
            self.pump(context: context)
        }
    }

    /// Writes filler while the channel accepts more, then waits for it to become writable again.
    private func pump(context: ChannelHandlerContext) {
        guard self.active, var generating = self.generating else { return }
        let filler = self.filler ?? ByteBuffer(repeating: UInt8(ascii: "a"), count: 256 * 1024)
        self.filler = filler
        while generating.remaining > 0, context.channel.isWritable {
            let count = min(generating.remaining, filler.readableBytes)
            let slice = filler.getSlice(at: filler.readerIndex, length: count)!
            context.write(self.wrapRaw(slice), promise: nil)
            generating.remaining -= count
        }
        context.flush()
        if generating.remaining == 0 {
            self.generating = nil
            self.filler = nil
            self.finish(keepAlive: generating.keepAlive, context: context)
        } else {
            self.generating = generating
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if self.generating != nil, context.channel.isWritable { self.pump(context: context) }
        context.fireChannelWritabilityChanged()
    }

    private func sendChunks(_ remaining: Data.SubSequence, size: Int, delay: Duration, keepAlive: Bool, context: ChannelHandlerContext) {
        guard self.active else { return }
        if remaining.isEmpty {
            if self.raw { self.writeRaw("0\r\n\r\n", context: context) }
            self.finish(keepAlive: keepAlive, context: context)
            return
        }
        let chunk = remaining.prefix(size)
        if self.raw {
            self.writeRaw(String(chunk.count, radix: 16) + "\r\n", context: context)
            self.writeBody(chunk, context: context)
            self.writeRaw("\r\n", context: context)
        } else {
            self.writeBody(chunk, context: context)
        }
        context.flush()
        let rest = remaining.dropFirst(size)
        context.eventLoop.assumeIsolated().scheduleTask(in: Self.timeAmount(delay)) {
            self.sendChunks(rest, size: size, delay: delay, keepAlive: keepAlive, context: context)
        }
    }

    /// Writes the head one byte at a time, `interval` apart, then the body.
    private func dripHead(
        _ remaining: ArraySlice<UInt8>, interval: Duration, response: ScriptedResponse, keepAlive: Bool, context: ChannelHandlerContext
    ) {
        guard self.active else { return }
        guard let byte = remaining.first else {
            self.writeBody(response.body[...], context: context)
            self.finish(keepAlive: keepAlive, context: context)
            return
        }
        var buffer = context.channel.allocator.buffer(capacity: 1)
        buffer.writeInteger(byte)
        context.writeAndFlush(NIOAny(buffer), promise: nil)
        context.eventLoop.assumeIsolated().scheduleTask(in: Self.timeAmount(interval)) {
            self.dripHead(remaining.dropFirst(), interval: interval, response: response, keepAlive: keepAlive, context: context)
        }
    }

    /// The HTTP/1.1 head of a response, as text.
    private func headText(_ response: ScriptedResponse, chunked: Bool) -> String {
        var headers = HTTPHeaders(response.headers)
        if chunked {
            headers.replaceOrAdd(name: "Transfer-Encoding", value: "chunked")
            headers.remove(name: "Content-Length")
        } else if !headers.contains(name: "Content-Length") {
            headers.add(name: "Content-Length", value: "\(response.body.count)")
        }
        let status = HTTPResponseStatus(statusCode: response.status)
        var text = "HTTP/1.1 \(response.status) \(status.reasonPhrase)\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        return text + "\r\n"
    }

    private func writeHead(_ response: ScriptedResponse, chunked: Bool, context: ChannelHandlerContext) {
        if self.raw {
            self.writeRaw(self.headText(response, chunked: chunked), context: context)
            return
        }
        var headers = HTTPHeaders(response.headers)
        if chunked {
            headers.remove(name: "Content-Length")
        } else if !headers.contains(name: "Content-Length") {
            headers.add(name: "Content-Length", value: "\(response.body.count)")
        }
        let head = HTTPResponseHead(version: .http2, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
        context.write(self.wrapOutboundOut(.head(head)), promise: nil)
    }

    /// Writes `bytes` in writes of `size` bytes (HTTP/2: one DATA frame each), without flushing.
    private func writePieces(_ bytes: Data.SubSequence, size: Int, context: ChannelHandlerContext) {
        var rest = bytes
        while !rest.isEmpty {
            self.writeBody(rest.prefix(max(1, size)), context: context)
            rest = rest.dropFirst(max(1, size))
        }
    }

    private func writeBody(_ bytes: Data.SubSequence, context: ChannelHandlerContext) {
        guard !bytes.isEmpty else { return }
        var buffer = context.channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        if self.raw {
            context.write(NIOAny(buffer), promise: nil)
        } else {
            context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        }
    }

    private func writeRaw(_ text: String, context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: text.utf8.count)
        buffer.writeString(text)
        context.write(NIOAny(buffer), promise: nil)
    }

    private func wrapRaw(_ buffer: ByteBuffer) -> NIOAny {
        self.raw ? NIOAny(buffer) : self.wrapOutboundOut(.body(.byteBuffer(buffer)))
    }

    /// Ends the response. It counts as delivered only once every byte has been written to the
    /// socket: a client that hangs up before that has abandoned it, even if the handler has
    /// queued the whole body.
    private func finish(keepAlive: Bool, trailers: HTTPHeaders? = nil, context: ChannelHandlerContext) {
        let written = context.eventLoop.makePromise(of: Void.self)
        if self.raw {
            context.writeAndFlush(NIOAny(context.channel.allocator.buffer(capacity: 0)), promise: written)
        } else {
            context.writeAndFlush(self.wrapOutboundOut(.end(trailers)), promise: written)
        }
        written.futureResult.assumeIsolated().whenSuccess {
            self.responding = false
            if self.raw && !keepAlive { context.close(promise: nil) }
        }
    }

    static func timeAmount(_ duration: Duration) -> TimeAmount {
        let (seconds, attoseconds) = duration.components
        return .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
