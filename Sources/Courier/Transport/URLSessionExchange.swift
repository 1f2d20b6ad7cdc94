import Foundation
import HTTPTypes

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Security)
import Security
#endif

/// The state of one data task: the head continuation and the body chunks.
final class URLSessionExchange: Sendable {
    /// The task, once ``start(_:)`` has made it on the control queue.
    private let madeTask = Locked<URLSessionDataTask?>(nil)
    /// Whether ``cancel()`` was called: a task not made by then is never made.
    private let cancelled = Locked(false)
    /// Whether the platform has reported the task's end.
    private let hasCompleted = Locked(false)
    /// Whether the task's cancel has been sent (in the control's turn, see
    /// ``URLSessionControl/takingTurns(_:)``): a redirect it asks about is then not answered.
    private let cancelSent = Locked(false)
    /// The body chunks delivered and not yet read: in memory up to the transport's limit, the
    /// rest in a temporary file (FoundationNetworking cannot suspend a running task).
    let chunks: SpillBuffer
    /// Runs once the task has completed (removes a spooled upload).
    private let onComplete: @Sendable () -> Void
    /// The spooled request body, read again from its start when the platform resends the
    /// request.
    let bodyFile: URL?
    /// Where the task is cancelled, off the caller's thread.
    private let control: URLSessionControl
    /// The transport's count of bodies that could not be buffered (no file to spill to, or a
    /// reader that fell more than the unread limit behind).
    private let bufferFailures: Locked<Int>
    private let head = Locked<HeadState>(.waiting(nil))
    /// Pauses a transfer for a slow reader (Apple platforms): at 8 MiB unread, or half the unread
    /// limit when that is less, so a small limit pauses the reader before it fails.
    private let pause: PauseGate
    /// The `401` of an authentication challenge answered without a credential (Linux).
    private let challengeResponse = Locked<HTTPURLResponse?>(nil)
    /// Why the server's trust was refused by the pins (Apple platforms), when it was.
    private let trustRejection = Locked<CourierError?>(nil)

    enum HeadState {
        case waiting(CheckedContinuation<HTTPURLResponse, any Error>?)
        /// The task ended (or answered) before anyone waited: kept for the waiter to come.
        case ended(Result<HTTPURLResponse, any Error>)
        case done
    }

    init(
        memoryLimit: Int, unreadLimit: Int, scratchDirectory: URL, bufferFailures: Locked<Int>, control: URLSessionControl,
        bodyFile: URL? = nil,
        onComplete: @escaping @Sendable () -> Void
    ) {
        self.control = control
        self.bodyFile = bodyFile
        self.chunks = SpillBuffer(memoryLimit: memoryLimit, unreadLimit: unreadLimit, directory: scratchDirectory)
        self.pause = PauseGate(highWater: min(8 << 20, unreadLimit / 2), lowWater: min(2 << 20, unreadLimit / 8))
        self.bufferFailures = bufferFailures
        self.onComplete = onComplete
    }

    func awaitHead(_ continuation: CheckedContinuation<HTTPURLResponse, any Error>) {
        let ended: Result<HTTPURLResponse, any Error>? = self.head.withLock { state in
            if case .ended(let result) = state {
                state = .done
                return result
            }
            state = .waiting(continuation)
            return nil
        }
        if let ended { continuation.resume(with: ended) }
    }

    /// A head from the platform: an interim one (100, 102, 103, RFC 9110 §15.2) is passed over,
    /// since a client reads any number of them before the final answer; FoundationNetworking
    /// hands each one to the delegate before the final head (measured over HTTP/2). A 101 is
    /// kept: no request of Courier's asks to switch protocols, so it is the final answer, which
    /// the transport stage turns into kind `transport`, as on AsyncHTTPClient.
    func received(response: HTTPURLResponse) {
        let status = response.statusCode
        guard !(100..<200).contains(status) || status == 101 else { return }
        self.resumeHead(.success(response))
    }

    func received(data: Data) {
        do {
            try self.chunks.push(data)
        } catch {
            // The disk is full, the directory cannot be written, or the reader fell too far
            // behind: the reader gets the error after what was buffered.
            self.bufferFailures.withLock { $0 += 1 }
            self.control.run { self.cancelTask() }
        }
        #if canImport(Darwin)
        // A reader slower than the network: above the high-water mark the task is suspended
        // (the platform stops reading from the socket) until the reader has caught up.
        self.pause.delivered(unread: { self.chunks.unread }, suspend: { self.madeTask.withLock { $0 }?.suspend() })
        #endif
        // FoundationNetworking traps when a running data task is suspended (measured: a fatal
        // error in NativeProtocol), so on Linux what the reader has not read goes to the buffer
        // (and its file) only.
    }

    /// The reader took a chunk: below the low-water mark a suspended task goes on.
    func consumed() {
        #if canImport(Darwin)
        self.pause.consumed(unread: { self.chunks.unread }, resume: { self.madeTask.withLock { $0 }?.resume() })
        #endif
    }

    /// Makes the task with `make` and resumes it, on the control queue, unless the exchange has
    /// been cancelled by then; a task that cannot be made fails the head with `make`'s error.
    /// (On Linux making and resuming a task wait for FoundationNetworking's work queue, which a
    /// cancelled name lookup can hold for as long as the lookup lasts.)
    func start(_ make: @escaping @Sendable () throws -> URLSessionDataTask) {
        self.control.run {
            guard !self.cancelled.withLock({ $0 }) else {
                self.onComplete()
                return
            }
            let task: URLSessionDataTask
            do {
                task = try make()
            } catch {
                self.onComplete()
                self.resumeHead(.failure(error))
                self.chunks.finish(throwing: error)
                return
            }
            self.madeTask.withLock { $0 = task }
            // Cancelled while it was being made (which can wait long, above): it never goes
            // out; the platform completes it as cancelled, which removes a spooled file.
            if self.cancelled.withLock({ $0 }) {
                task.cancel()
                return
            }
            task.resume()
        }
    }

    /// Ends the exchange for its reader at once with kind `cancelled` (the head, or the body
    /// being read) and has the control queue cancel the task (or never make it).
    func cancel() {
        self.cancelled.withLock { $0 = true }
        self.resumeHead(.failure(CourierError.cancelled()))
        self.chunks.discard(throwing: CourierError.cancelled())
        self.control.run { self.cancelTask() }
    }

    /// Cancels the task, if made and not completed, unless its session has been invalidated; on
    /// the control queue. (A completed task's cancel does nothing, but still waits for the work
    /// queue that a name lookup may hold.)
    private func cancelTask() {
        guard !self.control.isInvalidated, !self.hasCompleted.withLock({ $0 }), let task = self.madeTask.withLock({ $0 }) else { return }
        self.control.takingTurns {
            self.cancelSent.withLock { $0 = true }
            task.cancel()
        }
    }

    /// Whether the task's cancel has been sent (read in the control's turn).
    var isCancelSent: Bool { self.cancelSent.withLock { $0 } }

    /// The platform asked for a credential, and none is given: the task ends, and `response`
    /// (the 401 that asked) is the answer.
    func challenged(by response: HTTPURLResponse?) {
        self.challengeResponse.withLock { $0 = response }
    }

    /// The pins refused the server's certificate: the task is cancelled, and this is its error.
    func rejectedTrust(_ error: CourierError) {
        self.trustRejection.withLock { $0 = error }
    }

    /// The task ended, with `error` or without; `platformHead` is the head the task holds, which
    /// the platform may not have handed to the delegate (see below).
    func completed(error: (any Error)?, platformHead: HTTPURLResponse? = nil) {
        self.hasCompleted.withLock { $0 = true }
        // The task holds its request, and with it the stream of a spooled body, open on the
        // file `onComplete` removes: let go of it, so the file's space is freed now.
        self.madeTask.withLock { $0 = nil }
        self.onComplete()
        if error != nil, let rejection = self.trustRejection.withLock({ $0 }) {
            self.resumeHead(.failure(rejection))
            self.chunks.finish(throwing: rejection)
            return
        }
        if let error, (error as NSError).domain == NSURLErrorDomain, (error as NSError).code == NSURLErrorCancelled,
            let challenge = self.challengeResponse.withLock({ $0 })
        {
            // The cancellation was ours, answering the challenge: the 401 is the response.
            self.resumeHead(.success(challenge))
            self.chunks.finish()
            return
        }
        if let error, (error as NSError).domain == NSURLErrorDomain, (error as NSError).code == NSURLErrorCancelled,
            !self.cancelled.withLock({ $0 }), self.control.isInvalidated
        {
            // Nobody cancelled this exchange: the transport's shutdown did, under it.
            let shutDown = CourierError.transportShutDown(underlying: error)
            self.resumeHead(.failure(shutDown))
            self.chunks.finish(throwing: shutDown)
            return
        }
        if let error {
            let mapped = URLSessionTransport.mapError(error)
            self.resumeHead(.failure(mapped))
            // The body is read only after the head came: the connection was made, so what cut
            // it short is no failure to connect.
            var bodyFailure = mapped
            bodyFailure.couldNotConnect = false
            self.chunks.finish(throwing: bodyFailure)
        } else {
            // FoundationNetworking keeps the head (and body) of a 301–308 from the delegate until
            // it has asked about the redirect, and never asks when there is no `Location`: the
            // task ends with the head only in its `response`. That 3xx is the answer (RFC 9110
            // §10.2.2: there is nothing to follow), its body withheld by the platform.
            if let platformHead { self.received(response: platformHead) }
            self.resumeHead(.failure(CourierError.transport("the response ended without a head")))
            self.chunks.finish()
        }
    }

    private func resumeHead(_ result: Result<HTTPURLResponse, any Error>) {
        let continuation: CheckedContinuation<HTTPURLResponse, any Error>? = self.head.withLock { state in
            switch state {
            case .waiting(let continuation?):
                state = .done
                return continuation
            case .waiting(nil):
                state = .ended(result)
                return nil
            case .ended, .done:
                return nil
            }
        }
        continuation?.resume(with: result)
    }
}

/// Routes the session's callbacks to the exchange of each task.
final class SessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    private let exchanges = Locked<[Int: URLSessionExchange]>([:])
    private let pinning: PinningPolicy
    /// Where an answer that cancels the task runs (on Linux the cancel waits for the work queue).
    private let control: URLSessionControl

    init(pinning: PinningPolicy, control: URLSessionControl) {
        self.pinning = pinning
        self.control = control
    }

    func register(_ exchange: URLSessionExchange, for task: URLSessionTask) {
        self.exchanges.withLock { $0[task.taskIdentifier] = exchange }
    }

    private func exchange(for task: URLSessionTask) -> URLSessionExchange? {
        self.exchanges.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        if let http = response as? HTTPURLResponse {
            self.exchange(for: dataTask)?.received(response: http)
            completionHandler(.allow)
        } else {
            completionHandler(.cancel)
        }
    }

    /// The platform resends the request (on Linux, libcurl on a fresh connection when a pooled
    /// one closed before any byte of an answer): a spooled body is read again from its start
    /// (without a new stream the resend went out empty). A body in memory gets none: for it
    /// FoundationNetworking traps on a new stream (measured), and without one the resend waits
    /// for bytes that never come, until the deadline.
    func urlSession(
        _ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void
    ) {
        completionHandler(self.exchange(for: task)?.bodyFile.flatMap { InputStream(url: $0) })
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        self.exchange(for: dataTask)?.received(data: data)
    }

    /// A redirect is Courier's to follow: the answer is the 3xx itself. FoundationNetworking
    /// traps when the task is cancelled after it asked and before the answer reaches its work
    /// queue (it finds the task no longer waiting for one), so the answer and every cancel of the
    /// session's tasks take turns: a task whose cancel went first gets no answer (the cancel ends
    /// it), and a cancel after the answer reaches the work queue behind it.
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        let exchange = self.exchange(for: task)
        if let exchange, let asked = self.redirectAsked.withLock({ $0 }) { asked(exchange) }
        self.control.takingTurns {
            guard !self.control.isInvalidated, exchange?.isCancelSent != true else { return }
            completionHandler(nil)
        }
    }

    /// Called with a task's exchange when the platform asks about a redirect, before it is
    /// answered (tests: to cancel at that moment).
    let redirectAsked = Locked<(@Sendable (URLSessionExchange) -> Void)?>(nil)

    /// Challenges: the server's trust is the platform's to judge (default handling); any other
    /// (Basic, Digest, NTLM, a client certificate) is answered without a credential, so the
    /// `401` (or the handshake's failure) reaches the pipeline instead of the task waiting forever.
    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        #if canImport(Darwin)
        // Apple platforms (not compiled here): the system judges the server's trust, and a
        // pinned host's pins are checked on top; any other protection space is rejected, so no
        // system credential (Negotiate, NTLM) is offered and the 401 is delivered.
        let space = challenge.protectionSpace
        if space.authenticationMethod == NSURLAuthenticationMethodServerTrust {
            guard !self.pinning.isEmpty else {
                completionHandler(.performDefaultHandling, nil)
                return
            }
            guard let trust = space.serverTrust else {
                self.exchange(for: task)?.rejectedTrust(
                    ServerTrustPinning.anchorMismatch(host: space.host, detail: "the platform gave no server trust to evaluate"))
                completionHandler(.cancelAuthenticationChallenge, nil)
                return
            }
            switch ApplePinning.check(trust, host: space.host, port: space.port, policy: self.pinning) {
            case .unpinned:
                completionHandler(.performDefaultHandling, nil)
            case .passed:
                completionHandler(.useCredential, URLCredential(trust: trust))
            case .refused(let refusal):
                self.exchange(for: task)?.rejectedTrust(refusal)
                completionHandler(.cancelAuthenticationChallenge, nil)
            }
        } else {
            completionHandler(.rejectProtectionSpace, nil)
        }
        #else
        // FoundationNetworking waits forever on default handling without a stored credential and
        // has no "continue without credential": the task is cancelled, and its exchange answers
        // with the 401 the challenge carries (its body, as far as it had arrived). The answer
        // cancels the task, which waits for the work queue: on the control queue, so that the
        // session's delegate queue is not held meanwhile.
        self.exchange(for: task)?.challenged(by: challenge.failureResponse as? HTTPURLResponse)
        self.control.run { completionHandler(.cancelAuthenticationChallenge, nil) }
        #endif
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let exchange = self.exchanges.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        exchange?.completed(error: error, platformHead: task.response as? HTTPURLResponse)
    }
}

/// Where a transport's tasks are made, resumed and cancelled and its session invalidated, off the
/// callers' threads, in the order asked: one serial queue for every transport in the process.
///
/// On Linux each of these waits for FoundationNetworking's work queue, which waits for any name lookup a
/// cancelled task still runs (libcurl joins its resolver thread): measured, 12 s with a resolver
/// that never answers. Neither a caller, nor a deadline's or `cancelAll`'s thread, nor one of
/// Swift concurrency's few threads may wait for that. The work queue is one for the whole process,
/// so one queue here loses nothing, and it holds one thread however many transports wait: with a
/// queue per transport, each waiting transport held a thread of its own, and with some 250 of them
/// the platform had no thread left to run the work queue itself (every request in the process
/// hung; measured with a resolver that never answers). One queue keeps the order too: a task is
/// never cancelled once its session has been invalidated (FoundationNetworking traps on a cancel
/// that finds its task gone from the session).
final class URLSessionControl: Sendable {
    /// The queue of every transport's control.
    private static let queue = DispatchQueue(label: "courier.urlsession.control")
    /// Whether the session has been invalidated: written on the queue in a turn (see
    /// ``takingTurns(_:)``), so a read on the queue or in a turn finds it settled.
    private let invalidated = Locked(false)
    /// Held while tasks are cancelled and while a redirect is answered (see `SessionDelegate`).
    private let turns = NSLock()

    /// Runs `work` on the queue, after everything asked before.
    func run(_ work: @escaping @Sendable () -> Void) {
        Self.queue.async(execute: work)
    }

    /// Whether the session has been invalidated (read on the queue: then it is settled).
    var isInvalidated: Bool { self.invalidated.withLock { $0 } }

    /// Invalidates `session` on the queue, cancelling its tasks, once every cancel asked before has run.
    func invalidate(_ session: URLSession) {
        Self.queue.async {
            self.takingTurns {
                self.invalidated.withLock { $0 = true }
                session.invalidateAndCancel()
            }
        }
    }

    /// Runs `work` while no task of the session is being cancelled and no redirect answered
    /// (nothing in `work` may wait for the session's delegate queue).
    func takingTurns<Result>(_ work: () -> Result) -> Result {
        self.turns.lock()
        defer { self.turns.unlock() }
        return work()
    }
}

/// Whether a transfer is paused for a reader slower than the network: above the high-water mark
/// of unread bytes it is suspended, below the low-water mark it goes on.
///
/// Each decision and its action happen under one lock, with the unread count read inside it.
/// (So `suspend()` and `resume()` of the platform's task are called under the lock. That
/// assumes they never wait for the session's delegate queue, which may itself be waiting for
/// this lock in ``delivered(unread:suspend:)``; not verified here: that code is not compiled on
/// Linux.) When
/// the count was read before the lock and the action taken after it, a reader that drained
/// everything in between found the transfer not yet paused (nothing to resume), and the
/// delivering side then suspended it: suspended for good, with nobody left to wake it.
final class PauseGate: Sendable {
    private let paused = Locked(false)
    private let highWater: Int
    private let lowWater: Int

    init(highWater: Int, lowWater: Int) {
        self.highWater = highWater
        self.lowWater = min(lowWater, highWater)
    }

    var isPaused: Bool { self.paused.current }

    /// After bytes were delivered: suspends when `unread()` is above the high-water mark.
    func delivered(unread: () -> Int, suspend: () -> Void) {
        self.paused.withLock { paused in
            guard !paused, unread() > self.highWater else { return }
            paused = true
            suspend()
        }
    }

    /// After the reader took bytes: resumes when paused and `unread()` is below the low-water mark.
    func consumed(unread: () -> Int, resume: () -> Void) {
        self.paused.withLock { paused in
            guard paused, unread() < self.lowWater else { return }
            paused = false
            resume()
        }
    }
}
