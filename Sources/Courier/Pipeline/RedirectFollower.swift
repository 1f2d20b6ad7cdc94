import Foundation
import HTTPTypes

/// Follows redirects between the middleware chain and the transport.
struct RedirectFollower: Sendable {
    let policy: RedirectPolicy
    let transport: any Transport

    static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    func send(_ original: Request) async throws -> RawResponse {
        var request = original
        var visited: Set<String> = []
        var hops = 0
        while true {
            var response = try await self.transport.send(request)
            guard self.policy.maxRedirects > 0,
                  Self.redirectStatuses.contains(response.status.code),
                  let location = response.head.headerFields[.location],
                  let current = request.url
            else {
                if hops > 0, response.url == nil { response.url = request.url }
                return response
            }
            if hops == 0 { visited.insert("\(request.head.method.rawValue) \(current.absoluteString)") }

            guard let target = URL(string: location, relativeTo: current)?.absoluteURL,
                  let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https"
            else {
                throw CourierError(.redirect, "the redirect target '\(location)' is not an http(s) URL")
            }
            if hops >= self.policy.maxRedirects {
                await response.body.discard()
                throw CourierError(.redirect, "stopped after \(self.policy.maxRedirects) redirects")
            }
            if current.scheme?.lowercased() == "https", scheme == "http", !self.policy.allowsInsecureDowngrade {
                await response.body.discard()
                throw CourierError(.redirect, "refused a redirect from https to http (\(Redactor.standard.redact(url: target)))")
            }
            var next = request
            let status = response.status.code
            if status == 303 || ((status == 301 || status == 302) && request.head.method != .get && request.head.method != .head) {
                if request.head.method != .head { next.head.method = .get }
                next.body = nil
                next.head.headerFields[.contentType] = nil
                next.head.headerFields[.contentLength] = nil
            } else if let body = request.body, !body.isReplayable {
                // 307/308 must resend the body; a one-shot body cannot be, so hand back the 3xx.
                if response.url == nil { response.url = current }
                return response
            }
            if !Self.sameOrigin(current, target) {
                for name in self.policy.sensitiveFields { next.head.headerFields[name] = nil }
            }
            next.head.scheme = scheme
            next.head.authority = target.port.map { "\(target.host ?? ""):\($0)" } ?? target.host
            next.head.path = Self.pathAndQuery(of: target)
            let key = "\(next.head.method.rawValue) \(target.absoluteString)"
            if visited.contains(key) {
                await response.body.discard()
                throw CourierError(.redirect, "redirect loop detected at \(Redactor.standard.redact(url: target))")
            }
            await response.body.discard()
            hops += 1
            request = next
        }
    }

    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        a.scheme?.lowercased() == b.scheme?.lowercased()
            && a.host?.lowercased() == b.host?.lowercased()
            && effectivePort(a) == effectivePort(b)
    }

    static func effectivePort(_ url: URL) -> Int? {
        url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil)
    }

    static func pathAndQuery(of url: URL) -> String {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return "/" }
        var path = components.percentEncodedPath
        if path.isEmpty { path = "/" }
        if let query = components.percentEncodedQuery { path += "?\(query)" }
        return path
    }
}
