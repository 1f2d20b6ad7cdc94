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
/// writing to disk) makes the next burst larger: a large download over HTTP/2 ran far below
/// its HTTP/1.1 speed (measured: Benchmarks/README.md, "Performance choices in the code").
/// Joined here, a burst is a few parts of up to ``limit`` bytes each, at the cost of one copy
/// of the bytes. Frame order, the end of the stream and flow control (window
/// updates follow delivery to this channel, which happens before this handler) are unchanged.
///
/// First in the stream's pipeline (before the HTTP/1 codec); runs on the stream's event loop.
/// Installed only when coalescing is on: each handler added to a stream's pipeline costs every
/// request its insertion and a hop per event (measured: Benchmarks/README.md, "Performance
/// choices in the code").
final class DataFrameCoalescer: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload

    /// The most bytes joined into one part.
    let limit: Int
    /// The first DATA frame held since the last part passed on (as it came, passed on unchanged
    /// when nothing joined it, and its bytes), and the bytes of any after it (most bursts of a
    /// small response are one frame: no array then); all on the event loop.
    private var first: (frame: NIOAny, bytes: ByteBuffer)?
    private var more: [ByteBuffer] = []
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
        if self.first == nil {
            if frame.endStream {
                context.fireChannelRead(data)
                return
            }
            self.first = (data, bytes)
        } else if bytes.readableBytes == 0 {
            // An empty frame (usually the END_STREAM after a small body): what is held goes on as
            // it came, then this frame, with no copy and no new frame.
            self.passOn(context: context, endStream: false)
            context.fireChannelRead(data)
            return
        } else {
            self.more.append(bytes)
        }
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
        // Nothing is held here: bytes are held only within one delivery of reads, which ends with
        // channelReadComplete (or errorCaught and channelInactive when the stream closes during
        // it). Passing bytes on during teardown would hand AsyncHTTPClient a body part after its
        // request had ended, which it treats as a broken invariant.
        self.first = nil
        self.more.removeAll()
        self.heldBytes = 0
    }

    /// Passes the held bytes on as one DATA payload: the first frame itself when nothing joined it.
    private func passOn(context: ChannelHandlerContext, endStream: Bool) {
        guard let first = self.first else { return }
        let heldBytes = self.heldBytes
        self.first = nil
        self.heldBytes = 0
        if self.more.isEmpty, !endStream {
            context.fireChannelRead(first.frame)
            return
        }
        var joined = context.channel.allocator.buffer(capacity: heldBytes)
        joined.writeImmutableBuffer(first.bytes)
        for part in self.more {
            joined.writeImmutableBuffer(part)
        }
        self.more.removeAll(keepingCapacity: true)
        context.fireChannelRead(self.wrapInboundOut(.data(.init(data: .byteBuffer(joined), endStream: endStream))))
    }
}
