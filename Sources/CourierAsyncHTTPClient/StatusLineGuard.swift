import NIOCore
import NIOHTTP1

/// Closes an HTTP/1.1 connection whose response head carries a status below 100, failing its
/// request with a parser error (kind `transport`).
///
/// NIO's parser passes `HTTP/1.1 099 X` on as a response, and AsyncHTTPClient, which takes any
/// status below 200 for an informational one, then traps on the body that follows: one hostile
/// status line stopped the process. Status codes are three digits from 100 to 999 (RFC 9110
/// §15); this handler sits right after the parser, so nothing above it sees such a head. (The
/// HTTP/2 counterpart is in ``GoAwayWatcher``.)
final class StatusLineGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    private var refused = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if self.refused { return }
        if case .head(let head) = self.unwrapInboundIn(data), head.status.code < 100 {
            self.refused = true
            context.fireErrorCaught(HTTPParserError.invalidStatus)
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
    }

    /// Installs a guard right after the connection's response parser; on the channel's event loop.
    static func install(on channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.submit {
            let sync = channel.pipeline.syncOperations
            let parser = try sync.handler(type: ByteToMessageHandler<HTTPResponseDecoder>.self)
            try sync.addHandler(StatusLineGuard(), position: .after(parser))
        }
    }
}
