// swift-tools-version:6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "Courier",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9)],
    products: [
        .library(name: "Courier", targets: ["Courier"]),
        .library(name: "CourierAsyncHTTPClient", targets: ["CourierAsyncHTTPClient"]),
        .library(name: "CourierTesting", targets: ["CourierTesting"]),
        .library(name: "CourierConformance", targets: ["CourierConformance"]),
        .library(name: "CourierOpenAPI", targets: ["CourierOpenAPI"]),
        .library(name: "CourierTelemetry", targets: ["CourierTelemetry"]),
        .library(name: "CourierOutbox", targets: ["CourierOutbox"]),
        .library(name: "CourierProtobuf", targets: ["CourierProtobuf"]),
        .executable(name: "courier", targets: ["CourierCLI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        // Only for the tests: the conformance suite runs over OpenAPI's own two transports too.
        .package(url: "https://github.com/apple/swift-openapi-urlsession.git", from: "1.4.0"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        // `swift package generate-documentation` (scripts/build-docs.sh); no target depends on it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
    ],
    targets: [
        // The system's zlib, for gzip and deflate content coding.
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
        // The system's brotli and zstd, for the br and zstd content codings: on Linux only (the
        // Apple SDKs have neither library; URLSession decodes br there itself).
        .systemLibrary(name: "CBrotli", path: "Sources/CBrotli", providers: [.apt(["libbrotli-dev"])]),
        .systemLibrary(name: "CZstd", path: "Sources/CZstd", providers: [.apt(["libzstd-dev"])]),
        .target(
            name: "Courier",
            dependencies: [
                "CZlib",
                .target(name: "CBrotli", condition: .when(platforms: [.linux])),
                .target(name: "CZstd", condition: .when(platforms: [.linux])),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HTTPTypesFoundation", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "CourierAsyncHTTPClient",
            dependencies: [
                "Courier",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // OpenAPI in both directions, in its own library so the core stays free of the runtime.
        .target(
            name: "CourierOpenAPI",
            dependencies: [
                "Courier",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        // Metrics and tracing monitors, in their own library so the core stays free of both APIs.
        .target(
            name: "CourierTelemetry",
            dependencies: [
                "Courier",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        // A durable outbox on SQLite through GRDB, in its own library.
        .target(
            name: "CourierOutbox",
            dependencies: [
                "Courier",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        // Protocol Buffers bodies and decodings, in their own library.
        .target(
            name: "CourierProtobuf",
            dependencies: [
                "Courier",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "CourierTesting",
            dependencies: [
                "Courier",
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "CourierConformance",
            dependencies: [
                "Courier",
                "CourierTestServer",
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "CourierTestServer",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The `courier` command (its folder is not `Sources/courier`: on a case-insensitive file
        // system that would be the library's folder, `Sources/Courier`).
        .executableTarget(
            name: "CourierCLI",
            dependencies: [
                "Courier",
                "CourierAsyncHTTPClient",
                "CourierOutbox",
                "CourierTestServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Fuzz targets for the parsers of untrusted bytes, and the program that runs them
        // (replays corpus files in any build; fuzzes when built by scripts/fuzz.sh).
        .target(
            name: "CourierFuzzTargets",
            dependencies: ["Courier", .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: swiftSettings
        ),
        .target(name: "CLibFuzzer"),
        .executableTarget(
            name: "CourierFuzz",
            dependencies: ["CourierFuzzTargets", "CLibFuzzer"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "CourierBenchmarks",
            dependencies: [
                "Courier",
                "CourierAsyncHTTPClient",
                "CourierTestServer",
                "CourierTelemetry",
                "CourierOutbox",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Benchmarks/CourierBenchmarks",
            swiftSettings: swiftSettings
        ),
        // A client generated from Examples/PetsAPI/openapi.yaml (see its README), for the OpenAPI tests.
        .target(
            name: "PetsAPI",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            path: "Examples/PetsAPI",
            exclude: ["openapi.yaml", "openapi-generator-config.yaml", "README.md"],
            // Generated code, kept as the generator writes it: its unused `public import`s of the
            // empty component files would be the build's only warnings.
            swiftSettings: [.unsafeFlags(["-suppress-warnings"])]
        ),
        // Messages generated from Examples/NewsProto/news.proto (the command is in the file), for the protobuf tests.
        .target(
            name: "NewsProto",
            dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Examples/NewsProto",
            exclude: ["news.proto"]
        ),
        // Caps how many tests run at once (a constructor, run before the test library starts).
        .target(name: "CTestParallelism", path: "Tests/CTestParallelism"),
        .testTarget(
            name: "CourierTests",
            dependencies: [
                "CTestParallelism",
                "Courier",
                "CourierAsyncHTTPClient",
                "CourierTesting",
                "CourierConformance",
                .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                "CourierTestServer",
                "CourierOpenAPI",
                "CourierTelemetry",
                "CourierOutbox",
                "CourierProtobuf",
                "CourierFuzzTargets",
                "PetsAPI",
                "NewsProto",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
