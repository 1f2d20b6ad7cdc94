import Foundation
import HTTPTypes

/// Redirects are followed here, for every transport alike, under the client's
/// ``RedirectPolicy``: at most `maxRedirects`, loops detected, 303 (and 301/302 after a POST) become
/// GET, https → http refused, `Authorization`, `Cookie`, `Proxy-Authorization` and the
/// signature fields dropped when the origin changes. A hop to the same origin as the request
/// passes the per-hop middleware again (it is signed again); a hop to another origin does not,
/// nor does any hop after one did (where it comes back to is the other server's choice). A hop
/// refused unprocessed (REFUSED_STREAM) does not make the request that got the redirect one.
/// A one-shot body is never resent: a 307/308 for one is handed back as it is. A hop to another
/// host gives the first host's scheduler slot back and takes one of the new host's, so per-host
/// limits hold for the host the request is talking to; a request sent again from the top after
/// that (a retry, a middleware's) takes its first host's slot back, unless another attempt is
/// still in this stage (one sent beside it, hedging): then it shares the slot where that one has
/// it (``ExchangeRecord/attemptStarts()``). (A client suspended meanwhile
/// hands out no slot: the hop waits for `resume()`, as a new request would.)
struct RedirectStage: PipelineStage {
    let policy: RedirectPolicy
    let clientMiddleware: [any Middleware]
    let events: EventHub
    /// Whose slot a hop to another host takes (``ScheduleStage/moveSlot(_:to:scheduler:events:spokeHTTP2:)``).
    let scheduler: RequestScheduler
    /// The client's redactor: what a location shows in events and errors.
    var redactor: Redactor = .standard
    /// Whether the client keeps cookies: only then can a hop's `Set-Cookie` change the next request.
    var hasCookieJar = false
    var name: String { "redirect" }

    /// Whether a status is a redirect this stage follows: 301, 302, 303, 307, 308 (a switch, not
    /// a set: it is asked of every response).
    static func isRedirect(_ status: Int) -> Bool {
        switch status {
        case 301, 302, 303, 307, 308: true
        default: false
        }
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        // The first hop (hop 0, as the exchange arrives) in a small frame; a redirect is followed
        // apart, in a frame of its own that only requests with a redirect allocate.
        let takesSlotBack = exchange.record.attemptStarts()
        defer { exchange.record.attemptEnded() }
        if takesSlotBack { try await self.slotBack(exchange) }
        let response = try await next(exchange).response
        if self.policy.maxRedirects > 0, Self.isRedirect(response.statusCode) {
            exchange.record.followed(redirect: response.statusCode)
            return try await self.follow(exchange, from: response, next: next)
        }
        return Outcome(response: response)
    }

    /// Takes the slot of the exchange's own host back, for an exchange sent again after a
    /// redirect moved its slot elsewhere. (No HTTP/2 credit for the host given back: what the
    /// last attempt spoke may have been another host's.)
    @inline(never)
    private func slotBack(_ exchange: RequestExchange) async throws {
        try await ScheduleStage.moveSlot(
            exchange, to: LogicalKey.hostKey(of: exchange.request.head), scheduler: self.scheduler, events: self.events,
            spokeHTTP2: false)
    }

    /// Follows the redirect `first` answered with, hop by hop, while the policy allows.
    @inline(never)
    private func follow<Next: PipelineNext>(_ exchange: RequestExchange, from first: RawResponse, next: Next) async throws -> Outcome {
        var request = exchange.request
        var visited: Set<String> = []
        var hops = 0
        var response = first
        // The request of the hop that answered with the redirect being followed.
        var left = exchange.request.head
        // Whether a hop went to another origin (and so without the credentials).
        var leftOrigin = false
        // The redirects followed, as the cache reads them.
        var chain: [HTTPResponse] = []
        while true {
            if hops > 0 {
                var hopExchange = exchange
                hopExchange.request = request
                hopExchange.hop = hops
                let hop = hopExchange
                // Only a hop to another host moves the slot (compared request to request, both as
                // the middleware left them).
                let host = LogicalKey.hostKey(of: request.head)
                if host != LogicalKey.hostKey(of: left) {
                    try await ScheduleStage.moveSlot(
                        hop, to: host, scheduler: self.scheduler, events: self.events, spokeHTTP2: response.version.major >= 2)
                }
                // URLs are parsed only once a redirect happens: most requests have none. Once a hop
                // has left the origin, the way back is the other server's choice: not signed again.
                do {
                    if !leftOrigin, let origin = exchange.request.url, let url = request.url, Self.sameOrigin(origin, url) {
                        response = try await MiddlewareChain.sendAgain(hop, clientMiddleware: self.clientMiddleware, next: next)
                    } else {
                        response = try await next.outOfLine(hop).response
                    }
                } catch var failure as CourierError where failure.wasNotProcessed {
                    // A hop the server refused unprocessed (REFUSED_STREAM) says nothing of the
                    // request that got the redirect, which was answered, so acted on: the retry
                    // stage, which sends that one again, must not take it for unprocessed (a POST
                    // answered 303 whose GET was refused was sent twice).
                    failure.wasNotProcessed = false
                    throw failure
                }
            }
            guard self.policy.maxRedirects > 0,
                Self.isRedirect(response.statusCode),
                let locationField = response.head.headerFields[.location],
                let current = request.url
            else {
                if hops > 0, response.url == nil { response.url = request.url }
                response.leftOrigin = leftOrigin
                exchange.record.answered(throughRedirects: chain)
                return Outcome(response: response)
            }
            if hops == 0 { visited.insert("\(request.head.method.rawValue) \(current.absoluteString)") }
            // `Location` is a singleton field (RFC 9110 §10.2.2): sent more than once it arrives
            // joined with ", " (by both transports), which no URI reference holds (RFC 3986 §2
            // has no space). The same target each time is that target; different ones are
            // refused, not guessed between (a response-splitting attack's second `Location`).
            let targets = Set(locationField.components(separatedBy: ", ").map { FieldText.trimmed($0) })
            guard targets.count == 1, let location = targets.first else {
                await response.body.discard()
                throw CourierError(.redirect, "the redirect has \(targets.count) different Location targets")
            }

            // RFC 9110 §4.2.1, §4.2.2: an http(s) URI with an empty host is invalid (`http:next`
            // resolves to no host, and its path is no host to go to either).
            guard let target = URL(string: location, relativeTo: current)?.absoluteURL,
                let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https",
                Self.authority(of: target) != nil
            else {
                await response.body.discard()
                let shown = self.redactor.redactFreeText(self.redactor.redact(urlString: location))
                throw CourierError(.redirect, "the redirect target '\(shown)' is not an http(s) URL")
            }
            // RFC 9110 §4.2.4: userinfo in a URI from elsewhere is to be treated as an error
            // (`https://bank.test@evil.test/` goes to evil.test).
            if target.user != nil || target.password != nil {
                await response.body.discard()
                throw CourierError(.redirect, "refused a redirect target with userinfo (\(self.redactor.redact(url: target)))")
            }
            if hops >= self.policy.maxRedirects {
                await response.body.discard()
                throw CourierError(.redirect, "stopped after \(self.policy.maxRedirects) redirects")
            }
            if current.scheme?.lowercased() == "https", scheme == "http", !self.policy.allowsInsecureDowngrade {
                await response.body.discard()
                throw CourierError(.redirect, "refused a redirect from https to http (\(self.redactor.redact(url: target)))")
            }
            var following = request
            let status = response.statusCode
            // RFC 9110 §15.4.2 and §15.4.3: after a 301 or 302 only a POST may become a GET; PUT,
            // PATCH, DELETE and the rest are sent again as they were. §15.4.4: after a 303 every
            // method but HEAD becomes GET.
            if status == 303 || ((status == 301 || status == 302) && request.head.method == .post) {
                if request.head.method != .head { following.head.method = .get }
                following.body = nil
                // RFC 9110 §15.4: the request that no longer has content loses the fields that
                // described it (a compressed POST's Content-Encoding included).
                for name in Self.contentFields { following.head.headerFields[name] = nil }
            } else if let body = request.body, !body.isReplayable {
                // 307/308 must resend the body; a one-shot body cannot be, so hand back the 3xx.
                if response.url == nil { response.url = current }
                response.leftOrigin = leftOrigin
                exchange.record.answered(throughRedirects: chain)
                return Outcome(response: response)
            }
            if !Self.sameOrigin(current, target) {
                if exchange.endpoint.staysOnOrigin {
                    // A grant's body is for the authorization server alone (RFC 6749 §10.4): a
                    // 307 or 308 would send it on to whoever the Location names.
                    await response.body.discard()
                    throw CourierError(
                        .redirect,
                        "refused a redirect to another origin (\(self.redactor.redact(url: target))) for a request whose body is for its own"
                    )
                }
                following.head.headerFields = self.policy.withoutSecrets(following.head.headerFields, redactor: self.redactor)
                leftOrigin = true
            }
            following.head.scheme = scheme
            following.head.authority = Self.authority(of: target)
            following.head.path = Self.pathAndQuery(of: target)
            let key = "\(following.head.method.rawValue) \(target.absoluteString)"
            // With a cookie jar, a hop that sets a cookie changes what the next request of a
            // visited URL sends (a sign-in that sends back to the page it came from): no loop
            // yet; `maxRedirects` still bounds the chain. Without one, nothing changes.
            if self.hasCookieJar, response.head.headerFields[.setCookie] != nil { visited.removeAll() }
            if visited.contains(key) {
                await response.body.discard()
                throw CourierError(.redirect, "redirect loop detected at \(self.redactor.redact(url: target))")
            }
            visited.insert(key)
            await response.body.discard()
            if self.events.isActive {
                let location = self.redactor.redact(url: target)
                self.events.emit(exchange.request) { $0.redirected($1, status: status, location: location) }
            }
            // With the target it sent the request on to, resolved (the cache invalidates each hop
            // an unsafe request reached, RFC 9111 §4.4).
            var kept = ExchangeRecord.reuseFields(of: response.head)
            kept.headerFields[.location] = target.absoluteString
            chain.append(kept)
            hops += 1
            left = request.head
            request = following
        }
    }

    /// The fields that describe a request's content (RFC 9110 §15.4).
    static let contentFields: [HTTPField.Name] = [
        .contentType, .contentLength, .contentEncoding, .contentLanguage, .contentLocation, .lastModified,
        HTTPField.Name("Digest")!, HTTPField.Name("Content-Digest")!, HTTPField.Name("Repr-Digest")!,
    ]

    /// `host[:port]` of a URL, an IPv6 literal in brackets (RFC 3986 §3.2.2: `URL.host` gives
    /// it without them, and `::1:8080` is no authority).
    /// `nil` too when the host, its percent-escapes decoded (as `URL.host` gives it), holds a
    /// byte no host name or address holds: `pinned.test%23` is `pinned.test#`, which the
    /// transport would parse again as `pinned.test` while the pins, cookies and slots looked up
    /// the other name.
    static func authority(of url: URL) -> String? {
        guard var host = url.host, Self.isPlainHost(host) else { return nil }
        if host.utf8.contains(UInt8(ascii: ":")), !host.hasPrefix("[") { host = "[\(host)]" }
        return url.port.map { "\(host):\($0)" } ?? host
    }

    /// Whether a decoded host is a name or an address and nothing else: not empty, no delimiter
    /// of a URI (`/ ? # @ \`, a bracket but around an IPv6 literal), no `%`, no space or
    /// control character (RFC 3986 §3.2.2).
    static func isPlainHost(_ host: String) -> Bool {
        var bytes = Substring(host).utf8
        if bytes.first == UInt8(ascii: "["), bytes.last == UInt8(ascii: "]") { bytes = bytes.dropFirst().dropLast() }
        return !bytes.isEmpty
            && !bytes.contains { byte in
                switch byte {
                case 0...0x20, 0x7F, UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "@"),
                    UInt8(ascii: "\\"), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "%"):
                    true
                default: false
                }
            }
    }

    /// Whether two URLs have the same origin (``Authority``); never for a URL without a host.
    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        guard let first = Authority(a) else { return false }
        return first == Authority(b)
    }

    static func pathAndQuery(of url: URL) -> String {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return "/" }
        var path = components.percentEncodedPath
        if path.isEmpty { path = "/" }
        if let query = components.percentEncodedQuery { path += "?\(query)" }
        return path
    }
}
