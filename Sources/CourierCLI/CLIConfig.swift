import ArgumentParser
import Courier
import Foundation

/// The `--config` file: services, their environments' URLs, their wire protocol, and the default environment.
///
/// ```json
/// { "defaultEnvironment": "develop", "releaseBuild": false,
///   "services": { "main": { "protocol": "rest", "urls": { "develop": "http://127.0.0.1:8080", "release": "https://api.example.com" } },
///                 "math": { "protocol": "jsonrpc", "urls": { "develop": "http://127.0.0.1:5000" } } } }
/// ```
struct CLIConfig: Decodable {
    struct Service: Decodable {
        var `protocol`: String?
        var urls: [String: String]
        var successCodes: [String]?
    }

    var defaultEnvironment: String
    var releaseBuild: Bool?
    var services: [String: Service]

    static func load(_ path: String) throws -> CLIConfig {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw CourierError.invalidRequest("cannot read the config file \(path): \(error.localizedDescription)")
        }
        do {
            return try JSONDecoder().decode(CLIConfig.self, from: data)
        } catch {
            throw CourierError.invalidRequest("the config file \(path) is not valid: \(error)")
        }
    }

    /// The directory, with `environment` chosen for this run when given.
    func directory(environment: String?) throws -> ServerDirectory {
        var urls: [ServiceID: [ServerEnvironment: URL]] = [:]
        for (name, service) in self.services {
            for (environment, text) in service.urls {
                guard let url = URL(string: text) else {
                    throw CourierError.invalidRequest(
                        "the URL '\(Redactor.standard.redact(urlString: text))' of \(name)/\(environment) is not valid")
                }
                urls[ServiceID(name), default: [:]][ServerEnvironment(environment)] = url
            }
        }
        let directory = ServerDirectory(
            urls: urls, buildDefault: ServerEnvironment(self.defaultEnvironment), isReleaseBuild: self.releaseBuild ?? false)
        if let environment {
            try directory.switchEnvironment(to: ServerEnvironment(environment))
        }
        return directory
    }

    /// The wire protocol of each service.
    func wireProtocols() throws -> [ServiceID: any WireProtocol] {
        var protocols: [ServiceID: any WireProtocol] = [:]
        for (name, service) in self.services {
            switch (service.protocol ?? "rest").lowercased() {
            case "rest": protocols[ServiceID(name)] = RESTProtocol()
            case "jsonrpc", "json-rpc": protocols[ServiceID(name)] = JSONRPCProtocol()
            case "envelope":
                protocols[ServiceID(name)] = EnvelopeProtocol(successCodes: service.successCodes ?? ["0"])
            case let other:
                throw CourierError.invalidRequest("unknown protocol '\(other)' for service \(name) (rest, jsonrpc, envelope)")
            }
        }
        return protocols
    }
}

struct EnvCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "env",
        abstract: "Show the services and environments of a config file.",
        subcommands: [List.self]
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "Print the service × environment table; * marks the active environment.")

        @Option(name: .long, help: "The config file (JSON).")
        var config: String

        @Option(name: .long, help: "Show the table as if this environment were chosen.")
        var env: String?

        func run() async throws {
            do {
                let config = try CLIConfig.load(self.config)
                let directory = try config.directory(environment: self.env)
                let protocols = try config.wireProtocols()
                let active = directory.activeEnvironment
                print("active environment: \(active)\(directory.isReleaseBuild ? " (release build, locked)" : "")")
                for service in directory.services {
                    let kind =
                        protocols[service].map { String(describing: type(of: $0)).replacingOccurrences(of: "Protocol", with: "") } ?? "REST"
                    print("\(service) [\(kind)]")
                    for environment in directory.environments {
                        let url = (try? directory.baseURL(for: service, in: environment)).map(Redactor.standard.redact(url:)) ?? "-"
                        print(
                            "  \(environment == active ? "*" : " ") \(environment.name.padding(toLength: 12, withPad: " ", startingAt: 0)) \(url)"
                        )
                    }
                }
            } catch let error as CourierError {
                Output.standardError("courier: \(error.message)\n")
                throw ExitCode(3)
            }
        }
    }
}
