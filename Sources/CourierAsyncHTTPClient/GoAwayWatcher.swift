import NIOCore
import NIOHTTP2

/// On an HTTP/2 connection: the lowest last-stream ID of the GOAWAY frames the server sent.
///
/// RFC 9113 §6.8: streams above it were not processed, and may be sent again on a new
/// connection whatever their method. swift-nio-http2 closes them with the error code CANCEL,
/// the same as a stream the server cancelled after acting on it; this handler lets
/// ``UnprocessedStreamMarker`` tell the two apart. Sits before the stream multiplexer, on the
/// connection's event loop.
final class GoAwayWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame

    /// Read and written on the connection's event loop only.
    private(set) var lastStreamID: HTTP2StreamID?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .goAway(let last, _, _) = self.unwrapInboundIn(data).payload {
            self.lastStreamID = min(self.lastStreamID ?? last, last)
        }
        context.fireChannelRead(data)
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

/// On an HTTP/2 stream: a stream that its connection's GOAWAY left unprocessed fails with
/// ``UnprocessedStreamError`` instead of the CANCEL it is closed with, so the retry stage may
/// send it again (even a POST). Early in the stream's pipeline (after the DATA frame coalescer),
/// so the request handler sees the error it passes on.
final class UnprocessedStreamMarker: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.fireErrorCaught(Self.marked(error, context: context))
    }

    /// `error`, or ``UnprocessedStreamError`` when it closed a stream above the last stream ID of
    /// the connection's GOAWAY. Also used by ``DataFrameCoalescer``, which does this marking
    /// itself when it is installed (one handler per stream instead of two).
    static func marked(_ error: any Error, context: ChannelHandlerContext) -> any Error {
        if let closed = error as? NIOHTTP2Errors.StreamClosed, closed.errorCode == .cancel,
           let parent = context.channel.parent, parent.eventLoop.inEventLoop,
           let watcher = try? parent.pipeline.syncOperations.handler(type: GoAwayWatcher.self),
           let last = watcher.lastStreamID, closed.streamID > last {
            return UnprocessedStreamError(streamID: closed.streamID, lastStreamID: last)
        }
        return error
    }
}

/// A stream above the last stream ID of the server's GOAWAY: the server did not process it.
struct UnprocessedStreamError: Error, CustomStringConvertible {
    let streamID: HTTP2StreamID
    let lastStreamID: HTTP2StreamID

    var description: String {
        "the server's GOAWAY left HTTP/2 stream \(self.streamID) unprocessed (last stream processed: \(self.lastStreamID))"
    }
}
