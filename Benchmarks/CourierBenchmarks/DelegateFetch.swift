import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Raw AsyncHTTPClient through its delegate API: the head and each body part handed to an async
/// reader, with the request's `HTTPClient.Task` as a cancellation handle (an experiment: what the
/// delegate API costs against the async one, in the same run).
final class StreamingDelegate: HTTPClientResponseDelegate, Sendable {
    typealias Response = Void

    private struct State {
        var head: Result<HTTPResponseHead, any Error>?
        var headWaiter: CheckedContinuation<HTTPResponseHead, any Error>?
        var parts: [ByteBuffer] = []
        var finished = false
        var failure: (any Error)?
        var reader: CheckedContinuation<ByteBuffer?, any Error>?
        var demand: EventLoopPromise<Void>?
    }
    private let state = NIOLockedValueBox(State())

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        let waiter = self.state.withLockedValue { state -> CheckedContinuation<HTTPResponseHead, any Error>? in
            if let waiter = state.headWaiter {
                state.headWaiter = nil
                return waiter
            }
            state.head = .success(head)
            return nil
        }
        waiter?.resume(returning: head)
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let (reader, promise) = self.state.withLockedValue {
            state -> (CheckedContinuation<ByteBuffer?, any Error>?, EventLoopPromise<Void>?) in
            if let reader = state.reader {
                state.reader = nil
                return (reader, nil)
            }
            state.parts.append(buffer)
            let promise = task.eventLoop.makePromise(of: Void.self)
            state.demand = promise
            return (nil, promise)
        }
        if let reader {
            reader.resume(returning: buffer)
            return task.eventLoop.makeSucceededVoidFuture()
        }
        return promise!.futureResult
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        let (head, reader, demand) = self.state.withLockedValue { state in
            state.failure = error
            defer {
                state.headWaiter = nil
                state.reader = nil
                state.demand = nil
            }
            if state.head == nil, state.headWaiter == nil { state.head = .failure(error) }
            return (state.headWaiter, state.reader, state.demand)
        }
        head?.resume(throwing: error)
        reader?.resume(throwing: error)
        demand?.fail(error)
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        let reader = self.state.withLockedValue { state in
            state.finished = true
            defer { state.reader = nil }
            return state.reader
        }
        reader?.resume(returning: nil)
    }

    func head() async throws -> HTTPResponseHead {
        try await withCheckedThrowingContinuation { continuation in
            let ready = self.state.withLockedValue { state -> Result<HTTPResponseHead, any Error>? in
                if let head = state.head { return head }
                if let failure = state.failure { return .failure(failure) }
                state.headWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    func next() async throws -> ByteBuffer? {
        try await withCheckedThrowingContinuation { continuation in
            enum Ready {
                case part(ByteBuffer, EventLoopPromise<Void>?)
                case end
                case failed(any Error)
                case wait
            }
            let ready = self.state.withLockedValue { state -> Ready in
                if !state.parts.isEmpty {
                    let part = state.parts.removeFirst()
                    defer { state.demand = nil }
                    return .part(part, state.parts.isEmpty ? state.demand : nil)
                }
                if let failure = state.failure { return .failed(failure) }
                if state.finished { return .end }
                state.reader = continuation
                return .wait
            }
            switch ready {
            case .part(let part, let demand):
                demand?.succeed(())
                continuation.resume(returning: part)
            case .end: continuation.resume(returning: nil)
            case .failed(let error): continuation.resume(throwing: error)
            case .wait: break
            }
        }
    }
}

extension PipelineSides {
    /// One GET of the item through AsyncHTTPClient's delegate API, collected and decoded.
    static func fetchByDelegate(with raw: HTTPClient, url: String) -> @Sendable () async throws -> Void {
        {
            let request = try HTTPClient.Request(url: "\(url)?n=\(RequestNumbers.take())")
            let delegate = StreamingDelegate()
            let task = raw.execute(request: request, delegate: delegate, deadline: .now() + .seconds(30))
            let head = try await withTaskCancellationHandler {
                try await delegate.head()
            } onCancel: {
                task.cancel()
            }
            precondition(head.status == .ok)
            var body = ByteBuffer()
            while let part = try await delegate.next() {
                body.writeImmutableBuffer(part)
                precondition(body.readableBytes <= 1 << 20)
            }
            let item = try JSONDecoder().decode(BenchmarkItem.self, from: body)
            precondition(item.id == 42)
        }
    }
}
