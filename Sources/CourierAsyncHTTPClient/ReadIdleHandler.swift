import NIOCore

/// Closes a connection on which nothing has been read or written for `timeout` while a read was
/// asked for, failing its requests with ``ReadIdleTimeoutError``.
///
/// Only time with a read asked for counts: a response body whose reader pauses makes
/// AsyncHTTPClient stop asking for reads (back-pressure over HTTP/1.1), and the server's silence
/// then is the client's doing, not the server's.
///
/// AsyncHTTPClient's own read timeout re-arms a timer on every read, which costs measurably per
/// request; this handler only records the time of each read and write, and checks it from one
/// timer per connection that fires a few times per timeout. A connection idle in the pool is
/// closed the same way, which only shortens its idle life to `timeout`.
final class ReadIdleHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private let timeout: TimeAmount
    private var lastActivity = NIODeadline.now()
    private var check: Scheduled<Void>?
    /// Whether a read has been asked for and nothing has come of it yet. Taken as asked until a
    /// read completes: the first read may have passed before this handler was added.
    private var readPending = true
    /// Whether this handler closed the connection for the read timeout (read on its event loop,
    /// by ``ReadIdleStreamNotice``).
    private(set) var timedOut = false

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.lastActivity = .now()
        if context.channel.isActive { self.schedule(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.lastActivity = .now()
        self.schedule(context: context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.check?.cancel()
        self.check = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.check?.cancel()
        self.check = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.lastActivity = .now()
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // A read is asked for again (with auto-read on) as the completion passes up, unless the
        // handler of the response holds it back.
        self.readPending = false
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if !self.readPending {
            // The wait for bytes starts now: a pause of the reader before is not the server's.
            self.readPending = true
            self.lastActivity = .now()
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        self.lastActivity = .now()
        context.write(data, promise: promise)
    }

    private func schedule(context: ChannelHandlerContext) {
        guard self.check == nil else { return }
        let interval = TimeAmount.nanoseconds(max(self.timeout.nanoseconds / 4, 1_000_000))
        self.check = context.eventLoop.assumeIsolated().scheduleTask(in: interval) {
            self.check = nil
            guard context.channel.isActive else { return }
            if self.readPending, NIODeadline.now() - self.lastActivity >= self.timeout {
                self.timedOut = true
                context.fireErrorCaught(ReadIdleTimeoutError())
                context.close(promise: nil)
            } else {
                self.schedule(context: context)
            }
        }
    }
}

/// Fails an HTTP/2 stream's request with ``ReadIdleTimeoutError`` when its connection closes
/// for the read timeout.
///
/// The connection's error does not reach its streams (the HTTP/2 multiplexer passes on only
/// errors of a stream), which just end: their requests would fail as if the connection had closed
/// under them — a stale connection, whose idempotent request is sent again, and then a connection
/// that could not be made. The stream's request handler hears the timeout first, instead.
final class ReadIdleStreamNotice: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    func channelInactive(context: ChannelHandlerContext) {
        // A stream shares its connection's event loop, so the connection's handlers can be read here.
        if let connection = context.channel.parent, connection.eventLoop.inEventLoop,
            let idle = try? connection.pipeline.syncOperations.handler(type: ReadIdleHandler.self), idle.timedOut
        {
            context.fireErrorCaught(ReadIdleTimeoutError())
        }
        context.fireChannelInactive()
    }
}

/// Nothing arrived on a connection for longer than the transport's read timeout.
struct ReadIdleTimeoutError: Error, CustomStringConvertible {
    var description: String { "nothing was received within the read timeout" }
}
