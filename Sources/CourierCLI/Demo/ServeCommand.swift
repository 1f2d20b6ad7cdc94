import ArgumentParser
import CourierTestServer
import Foundation

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the demo API until interrupted, to try `courier request` against."
    )

    @Option(name: .long, help: "The loopback port (0 picks a free one).")
    var port: Int = 8443

    @Flag(name: .long, help: "Serve HTTP/1.1 in clear text instead of TLS with HTTP/2.")
    var plain = false

    @Option(name: .long, help: "Where to write the CA certificate (PEM) that signed the server's certificate.")
    var caOut: String = "courier-demo-ca.pem"

    func validate() throws {
        guard (0...65535).contains(self.port) else {
            throw ValidationError("--port must be between 0 and 65535")
        }
    }

    func run() async throws {
        let server: TestServer
        if self.plain {
            server = try await TestServer.start(
                .http1, port: self.port, keepsRequestBodies: false, recordsRequests: false, handler: DemoServer.respond)
        } else {
            let certificates = try TestCertificates.generate()
            // Listening first: a port already taken (another `serve` running) fails before the
            // CA file that other server's clients trust is replaced. Written whole or not at all.
            server = try await TestServer.start(
                .tls(certificates), port: self.port, keepsRequestBodies: false, recordsRequests: false, handler: DemoServer.respond)
            try Data(certificates.caPEM.utf8).write(to: URL(fileURLWithPath: self.caOut), options: .atomic)
            say("CA certificate written to \(self.caOut) (use it with --cacert)")
        }
        say(
            "Demo API at \(server.baseURL) — try: swift run courier request -i '\(server.baseURL)/news?page=1'\(self.plain ? "" : " --cacert \(self.caOut)")"
        )
        while true {
            try await Task.sleep(for: .seconds(3600))
        }
    }
}

private func say(_ line: String) {
    _ = Output.standardOutput(Data((line + "\n").utf8))
}
