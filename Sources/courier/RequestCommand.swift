import ArgumentParser
import Courier
import CourierAsyncHTTPClient
import Foundation
import HTTPTypes
import Logging

struct RequestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request",
        abstract: "Send one request through the whole Courier pipeline, like curl.",
        discussion: """
        The response body goes to standard output. With -i the status line and header fields come \
        first; with -v the request's log lines go to standard error.

        Exit codes:
          0   success (2xx or 3xx)
          1   an unexpected error
          3   invalid request (bad URL, bad header, unreadable file)
          4   the server answered 4xx or 5xx (the body is still printed)
          5   transport error (connection refused or closed, malformed response)
          6   timeout
          7   TLS failure (untrusted certificate, wrong host name)
          8   response larger than the limit
          9   redirect refused (too many, loop, https to http)
          10  cancelled
        """
    )

    @Argument(help: "The method (GET, POST, …) followed by the URL, or just the URL.")
    var arguments: [String]

    @Option(name: .customShort("H"), help: "A header field, as 'Name: value' (repeatable).")
    var headers: [String] = []

    @Option(name: .customShort("d"), help: "A request body, sent as is (defaults the method to POST).")
    var data: String?

    @Option(name: .long, help: "A JSON request body (sets Content-Type: application/json).")
    var json: String?

    @Flag(name: .long, help: "Use HTTP/1.1 only.")
    var http1 = false

    @Flag(name: .long, help: "Allow HTTP/2 (negotiated by ALPN over TLS; the default).")
    var http2 = false

    @Option(name: .long, help: "A PEM file of CA certificates to trust instead of the system's.")
    var cacert: String?

    @Option(name: .long, help: "Seconds the whole exchange may take.")
    var timeout: Double = 30

    @Option(name: .long, help: "The largest response body accepted, in bytes.")
    var maxSize: Int = 100 * 1024 * 1024

    @Flag(name: .customShort("i"), help: "Print the status line and header fields before the body.")
    var include = false

    @Flag(name: .customShort("v"), help: "Print the log lines of the request to standard error.")
    var verbose = false

    func validate() throws {
        guard (1...2).contains(self.arguments.count) else {
            throw ValidationError("give a URL, or a method and a URL")
        }
        if self.data != nil && self.json != nil {
            throw ValidationError("use either -d or --json, not both")
        }
        if self.http1 && self.http2 {
            throw ValidationError("use either --http1 or --http2, not both")
        }
    }

    func run() async throws {
        let code = await self.perform()
        if code != 0 { throw ExitCode(code) }
    }

    private func fail(_ message: String, code: Int32) -> Int32 {
        FileHandle.standardError.write(Data("courier: \(message)\n".utf8))
        return code
    }

    func perform() async -> Int32 {
        let urlText = self.arguments.last!
        guard let url = URL(string: urlText), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            return self.fail("'\(urlText)' is not an http or https URL", code: 3)
        }
        var fields = HTTPFields()
        for header in self.headers {
            let parts = header.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let name = HTTPField.Name(parts[0].trimmingCharacters(in: .whitespaces)) else {
                return self.fail("'\(header)' is not a header field ('Name: value')", code: 3)
            }
            fields.append(HTTPField(name: name, value: parts[1].trimmingCharacters(in: .whitespaces)))
        }
        var body: EndpointBody?
        if let json = self.json {
            body = .data(Data(json.utf8), contentType: "application/json")
        } else if let data = self.data {
            body = .data(Data(data.utf8), contentType: fields[.contentType] ?? "application/x-www-form-urlencoded")
        }
        let method: HTTPRequest.Method
        if self.arguments.count == 2 {
            guard let parsed = HTTPRequest.Method(self.arguments[0].uppercased()) else {
                return self.fail("'\(self.arguments[0])' is not an HTTP method", code: 3)
            }
            method = parsed
        } else {
            method = body == nil ? .get : .post
        }

        var transportConfiguration = AsyncHTTPClientTransport.Configuration()
        transportConfiguration.httpVersion = self.http1 ? .http1Only : .automatic
        if let cacert = self.cacert {
            do {
                let pem = try Data(contentsOf: URL(fileURLWithPath: cacert))
                try transportConfiguration.trust(pemCertificates: Array(pem))
            } catch {
                return self.fail("cannot use --cacert \(cacert): \(error)", code: 3)
            }
        }
        let transport = AsyncHTTPClientTransport(configuration: transportConfiguration)
        defer { _ = transport }
        let verbose = self.verbose
        let client = Client(configuration: .init(transport: transport) {
            if verbose {
                var logger = Logger(label: "courier") { _ in PlainLogHandler(stream: .standardError, prefix: "* ") }
                logger.logLevel = .debug
                $0.logger = logger
            }
            $0.maxResponseSize = self.maxSize
            $0.defaultHeaders[.userAgent] = "courier/1.0"
        })
        let endpoint = Endpoint<Data>(
            name: "cli", method: method, path: url.absoluteString, headers: fields, body: body,
            acceptedStatuses: 100..<600, timeout: .milliseconds(Int64(self.timeout * 1000)), decoding: .data
        )
        let code: Int32
        do {
            if verbose, let request = try? client.makeRequest(for: endpoint) {
                FileHandle.standardError.write(Data("* \(request.cURLDescription())\n".utf8))
            }
            let response = try await client.response(endpoint)
            if self.include {
                var head = "\(response.version) \(response.status.code) \(response.status.reasonPhrase)\r\n"
                for field in response.headers { head += "\(field.name.rawName): \(field.value)\r\n" }
                head += "\r\n"
                FileHandle.standardOutput.write(Data(head.utf8))
            }
            FileHandle.standardOutput.write(response.value)
            if response.status.code >= 400 {
                code = self.fail("the server answered \(response.status.code) \(response.status.reasonPhrase)", code: 4)
            } else {
                code = 0
            }
        } catch let error as CourierError {
            code = self.fail(error.description, code: Self.exitCode(for: error))
        } catch {
            code = self.fail("\(error)", code: 1)
        }
        try? await transport.shutdown()
        return code
    }

    static func exitCode(for error: CourierError) -> Int32 {
        switch error.kind {
        case .invalidRequest: return 3
        case .httpStatus: return 4
        case .transport: return 5
        case .timeout: return 6
        case .tls: return 7
        case .responseTooLarge: return 8
        case .redirect: return 9
        case .cancelled: return 10
        case .decoding: return 1
        }
    }
}
