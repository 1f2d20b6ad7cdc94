import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

/// nginx (Debian's package) over TLS, HTTP/2 by ALPN, as a reverse proxy in front of the
/// in-process server: cancelling the only caller of an in-flight request reaches nginx, which
/// logs `499` (client closed request) and lets its upstream request go — at once on
/// AsyncHTTPClient; on URLSession (Linux) only when the connection next carries traffic. On URLSession this runs
/// where the test CA is in a private bundle (``TransportKind/overTLS``); `.ci/run` installs
/// nginx, and under `COURIER_CI=1` a missing nginx fails the test rather than skipping it.
@Suite(
    "Interop: cancelling an HTTP/2 request through nginx",
    .enabled(if: ExternalServer.nginxEnabled, "needs nginx (apt install nginx; .ci/run installs it)"))
struct NginxInteropTests {
    static let nginx = ExternalServer.nginx

    /// Starts nginx in a directory of its own (configuration, certificate, logs), proxying every
    /// path to `upstream` over HTTP/1.1. Its access log has one line per request: status, URI,
    /// protocol.
    static func start(upstream: Int) async throws -> (server: ExternalServer, directory: URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-nginx-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.path
        try Certificates.shared.leafPEM.write(toFile: "\(path)/cert.pem", atomically: true, encoding: .utf8)
        try Certificates.shared.leafKeyPEM.write(toFile: "\(path)/key.pem", atomically: true, encoding: .utf8)
        let server = try await ExternalServer.start(executable: Self.nginx) { port in
            let configuration = """
                daemon off;
                master_process off;
                pid \(path)/nginx.pid;
                error_log \(path)/error.log;
                events {}
                http {
                    log_format courier '$status $request_uri $server_protocol';
                    access_log \(path)/access.log courier;
                    client_body_temp_path \(path)/body;
                    proxy_temp_path \(path)/proxy;
                    fastcgi_temp_path \(path)/fastcgi;
                    uwsgi_temp_path \(path)/uwsgi;
                    scgi_temp_path \(path)/scgi;
                    server {
                        listen 127.0.0.1:\(port) ssl http2;
                        ssl_certificate \(path)/cert.pem;
                        ssl_certificate_key \(path)/key.pem;
                        location / {
                            proxy_pass http://127.0.0.1:\(upstream);
                            proxy_http_version 1.1;
                        }
                    }
                }
                """
            try configuration.write(toFile: "\(path)/nginx.conf", atomically: true, encoding: .utf8)
            return ["-p", path, "-c", "\(path)/nginx.conf", "-e", "\(path)/error.log"]
        }
        return (server, directory)
    }

    static func accessLog(_ directory: URL) -> [String] {
        let text = (try? String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    /// A transport of `kind` that trusts the shared test CA (URLSession: through the private bundle).
    static func transport(_ kind: TransportKind) throws -> (any Transport, @Sendable () async throws -> Void) {
        switch kind {
        case .asyncHTTPClient:
            let transport = AsyncHTTPClientTransport(
                configuration: try .init { try $0.trust(pemCertificates: Certificates.shared.caPEMBytes) })
            return (transport, { try await transport.shutdown() })
        case .urlSession:
            try PrivateTrust.trust(Certificates.shared)
            let transport = URLSessionTransport()
            return (transport, { transport.shutdown() })
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func cancellingAnHTTP2RequestReachesNginxAndItsUpstream(_ kind: TransportKind) async throws {
        let upstream = try await http1Server { request in
            request.path == "/stall" ? .json(#"{"id":1,"title":"late"}"#).with(.stall(.seconds(600))) : await Routes.standard(request)
        }
        let (nginx, directory) = try await Self.start(upstream: upstream.port)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (transport, shutdown) = try Self.transport(kind)
        let client = Client(configuration: .init(transport: transport, baseURL: URL(string: "https://localhost:\(nginx.port)")!))
        do {
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
            let stalled = client.start(Endpoint<Article>(path: "/stall").retry(.never))
            #expect(await eventually { upstream.requests.contains { $0.path == "/stall" } })
            stalled.cancel()
            let error = await expectCourierError { _ = try await stalled.value }
            #expect(error?.kind == .cancelled)
            if kind == .urlSession {
                // FoundationNetworking (libcurl 7.88) holds the stream's reset until the connection
                // next carries traffic: nginx, which sends nothing while it waits for its
                // upstream, sees no frame (its debug log shows none for 10 s). A reset that had
                // left would be logged within milliseconds, as on AsyncHTTPClient.
                let early = await eventually(seconds: 2) { Self.accessLog(directory).contains("499 /stall HTTP/2.0") }
                #expect(!early, "the reset now leaves at once: update the 'Platforms and transports' article")
                let next = try await client.send(Endpoint<Article>(path: "/json?n=2"))
                #expect(next.id == 1)
            }
            // The stream's reset reaches nginx: it logs 499 for it and closes its upstream request.
            #expect(await eventually { Self.accessLog(directory).contains("499 /stall HTTP/2.0") })
            #expect(await eventually { upstream.abandonedCount == 1 })
            #expect(Self.accessLog(directory).first == "200 /json HTTP/2.0")
            #expect(upstream.requests.filter { $0.path == "/stall" }.count == 1)
        } catch {
            try? await shutdown()
            await nginx.stop()
            try? await upstream.stop()
            throw error
        }
        try await shutdown()
        await nginx.stop()
        try await upstream.stop()
    }
}
