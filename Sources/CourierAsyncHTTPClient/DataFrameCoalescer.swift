import NIOCore
import NIOHTTP2

/// On an HTTP/2 stream: joins the DATA frames of one read burst into fewer, larger ones before
/// AsyncHTTPClient's request handler sees them.
///
/// A server chooses its DATA frame size (nginx sends 8 KiB frames whatever the client's
/// SETTINGS_MAX_FRAME_SIZE), and the stream channel hands the request handler everything that
/// arrived since the last read at once — up to the stream's 8 MiB receive window, a thousand
/// frames. AsyncHTTPClient (1.37) buffers those parts with a copy of its whole buffer per part,
/// so a burst costs time quadratic in its frame count, and a consumer that pauses (a download
/// writing to disk) makes the next burst larger: a 1 GiB download over HTTP/2 ran at a third of
/// its HTTP/1.1 speed. Joined here, a burst is a few parts of up to ``limit`` bytes each, at the
/// cost of one copy of the bytes. Frame order, the end of the stream and flow control (window
/// updates follow delivery to this channel, which happens before this handler) are unchanged.
///
/// First in the stream's pipeline (before the HTTP/1 codec); runs on the stream's event loop.
final class DataFrameCoalescer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload

    /// The most bytes joined into one part.
    let limit: Int
    /// DATA payloads held since the last part passed on; all on the event loop.
    private var held: [ByteBuffer] = []
    private var heldBytes = 0

    init(limit: Int) {
        self.limit = max(limit, 1)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let payload = self.unwrapInboundIn(data)
        guard case .data(let frame) = payload, case .byteBuffer(let bytes) = frame.data else {
            // HEADERS (trailers), RST_STREAM, anything else: what came before goes first.
            self.passOn(context: context, endStream: false)
            context.fireChannelRead(data)
            return
        }
        if frame.endStream && self.held.isEmpty {
            context.fireChannelRead(data)
            return
        }
        self.held.append(bytes)
        self.heldBytes += bytes.readableBytes
        if frame.endStream || self.heldBytes >= self.limit {
            self.passOn(context: context, endStream: frame.endStream)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.passOn(context: context, endStream: false)
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.passOn(context: context, endStream: false)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.passOn(context: context, endStream: false)
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        self.passOn(context: context, endStream: false)
        context.fireUserInboundEventTriggered(event)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.passOn(context: context, endStream: false)
    }

    /// Passes the held bytes on as one DATA payload (as they came, when there is one).
    private func passOn(context: ChannelHandlerContext, endStream: Bool) {
        guard !self.held.isEmpty else { return }
        let joined: ByteBuffer
        if self.held.count == 1 {
            joined = self.held[0]
        } else {
            var buffer = context.channel.allocator.buffer(capacity: self.heldBytes)
            for part in self.held {
                buffer.writeImmutableBuffer(part)
            }
            joined = buffer
        }
        self.held.removeAll(keepingCapacity: true)
        self.heldBytes = 0
        context.fireChannelRead(self.wrapInboundOut(.data(.init(data: .byteBuffer(joined), endStream: endStream))))
    }

    /// Installs a coalescer first in a stream channel's pipeline; on the channel's event loop.
    static func install(on channel: any Channel, limit: Int) -> EventLoopFuture<Void> {
        channel.eventLoop.submit {
            try channel.pipeline.syncOperations.addHandler(DataFrameCoalescer(limit: limit), position: .first)
        }
    }
}
