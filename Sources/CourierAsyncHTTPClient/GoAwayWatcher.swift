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
final class GoAwayWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame

    /// Read and written on the connection's event loop only.
    private var lastStreamID: HTTP2StreamID?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .goAway(let last, _, _) = self.unwrapInboundIn(data).payload {
            self.lastStreamID = min(self.lastStreamID ?? last, last)
        }
        context.fireChannelRead(data)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
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
