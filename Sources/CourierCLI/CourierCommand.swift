import ArgumentParser
import Courier

@main
struct CourierCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "Courier, the network layer: a demo and a curl-like client running the whole pipeline.",
        version: courierVersion,
        subcommands: [DemoCommand.self, RequestCommand.self, ServeCommand.self, EnvCommand.self, OutboxCommand.self]
    )
}
