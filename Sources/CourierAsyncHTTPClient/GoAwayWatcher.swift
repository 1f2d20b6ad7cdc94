import NIOCore
import NIOHTTP2

/// On an HTTP/2 connection: streams that the server's GOAWAY left unprocessed are closed as
/// refused (REFUSED_STREAM), so that the retry stage may send them again, even a POST.
///
/// RFC 9113 §6.8: streams above a GOAWAY's last stream ID were not processed, and may be sent
/// again on a new connection whatever their method (§8.7 says the same of REFUSED_STREAM).
/// swift-nio-http2 closes them with the error code CANCEL, the same as a stream the server
/// cancelled after acting on it. Its connection handler passes the GOAWAY frame on first and then
/// one `StreamClosedEvent` for each stream it drops; this handler, between it and the stream
/// multiplexer, remembers the lowest last stream ID and gives those events the code
/// REFUSED_STREAM instead, so each such stream fails as refused. One handler per connection, on
/// its event loop; nothing per stream (each handler added to a stream's pipeline would cost
/// every request its insertion and a hop per event), and nothing per event until a GOAWAY came.
///
/// It also refuses a response whose `:status` is not three digits (RFC 9110 §15), a malformed
/// response (RFC 9113 §8.1.1: a stream error of type PROTOCOL_ERROR): the HEADERS frame goes no
/// further and the stream is reset, so the request fails as a transport error. swift-nio-http2
/// does not check the value, and AsyncHTTPClient takes `99` for an informational head and then
/// traps on the body that follows (`2000` reaches HTTPTypes, which traps outside 0...999): a
/// hostile server could stop the whole process with one response. A `:status` of 101 is refused
/// the same way: HTTP/2 has no Switching Protocols (RFC 9113 §8.6), and AsyncHTTPClient takes it
/// for the final head, then traps on the real head that follows on the stream. An interim status
/// (1xx) on a HEADERS frame that ends the stream is refused too (RFC 9113 §8.1): swift-nio-http2
/// ignores END_STREAM on an informational head, and the request would wait for a final head
/// that cannot come.
final class GoAwayWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame

    /// Read and written on the connection's event loop only.
    private var lastStreamID: HTTP2StreamID?
    /// Streams whose HEADERS this watcher refused, until they close: one that ended with that
    /// frame (END_STREAM) closes cleanly in swift-nio-http2, and its request would fail as if its
    /// connection had closed — a stale connection, whose request is sent again.
    private var refused: Set<HTTP2StreamID> = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.payload {
        case .goAway(let last, _, _):
            self.lastStreamID = min(self.lastStreamID ?? last, last)
        case .headers(let headers):
            if let status = headers.headers.first(name: ":status"),
                !Self.isStatusCode(status) || status == "101" || (headers.endStream && status.utf8.first == UInt8(ascii: "1"))
            {
                self.refused.insert(frame.streamID)
                context.writeAndFlush(NIOAny(HTTP2Frame(streamID: frame.streamID, payload: .rstStream(.protocolError))), promise: nil)
                return
            }
        default:
            break
        }
        context.fireChannelRead(data)
    }

    /// Whether a `:status` value is a status code: three ASCII digits, 100 to 999.
    static func isStatusCode(_ value: String) -> Bool {
        let digits = value.utf8
        guard digits.count == 3, let first = digits.first, first >= UInt8(ascii: "1"), first <= UInt8(ascii: "9") else { return false }
        return digits.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !self.refused.isEmpty, let closed = event as? StreamClosedEvent, self.refused.remove(closed.streamID) != nil {
            // A malformed response is a stream error of type PROTOCOL_ERROR (RFC 9113 §8.1.1),
            // however the stream closed.
            context.fireUserInboundEventTriggered(StreamClosedEvent(streamID: closed.streamID, reason: .protocolError))
            return
        }
        guard let last = self.lastStreamID, let closed = event as? StreamClosedEvent,
            closed.reason == .cancel, closed.streamID > last
        else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        context.fireUserInboundEventTriggered(StreamClosedEvent(streamID: closed.streamID, reason: .refusedStream))
    }

    /// Installs a watcher before the connection's stream multiplexer; on the channel's event loop.
    static func install(on channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.submit {
            let sync = channel.pipeline.syncOperations
            let multiplexer = try sync.handler(type: HTTP2StreamMultiplexer.self)
            try sync.addHandler(GoAwayWatcher(), position: .before(multiplexer))
        }
    }
}
