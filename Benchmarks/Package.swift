// swift-tools-version: 6.1
import PackageDescription

// The benchmark suite: its own package, so the SDK keeps `dependencies: []`.
//
//   bench-server  an echo server for the seed protocol: Tether's `Server` or SwiftNIO,
//                 over TCP, TLS or WebSocket
//   bench-client  a closed-loop load generator: Tether's `Connection`, a NIO
//                 ChannelHandler client or a NIOAsyncChannel client with continuations,
//                 over TCP, TLS or WebSocket
//   bench-sessions  sessions and mailboxes: replay of a full mailbox, and sequenced
//                 pushes to 1,000 identified clients, server and clients in one process;
//                 SQLite, in memory, or PostgreSQL (one node or a cluster of three)
//   bench-codec   decode and encode throughput of every profile's codec, in process
//   bench-report  turns the RESULT lines of a run into the markdown tables
//   TetherBenchmarks  package-benchmark: allocations per request round trip
//
// `scripts/bench.sh` builds all of it (and the C baseline in `c/`) and runs the matrix.

let package = Package(
    name: "TetherBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Tether", path: ".."),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .target(name: "BenchCore"),
        // Tether's and SwiftNIO's types named side by side without qualification.
        .target(
            name: "TetherBesideNIO",
            dependencies: [
                .product(name: "Tether", package: "Tether"),
                .product(name: "TetherHTTP", package: "Tether"),
                .product(name: "TetherUDP", package: "Tether"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .target(
            name: "SeedNIO",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "bench-server",
            dependencies: [
                "BenchCore",
                "SeedNIO",
                .product(name: "Tether", package: "Tether"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "TetherTLS", package: "Tether"),
            ]
        ),
        .executableTarget(
            name: "bench-client",
            dependencies: [
                "BenchCore",
                "SeedNIO",
                .product(name: "Tether", package: "Tether"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "TetherTLS", package: "Tether"),
            ]
        ),
        .executableTarget(
            name: "bench-sessions",
            dependencies: [
                "BenchCore",
                .product(name: "Tether", package: "Tether"),
                .product(name: "TetherSQLite", package: "Tether"),
                .product(name: "TetherPostgres", package: "Tether"),
                .product(name: "TetherRedis", package: "Tether"),
            ]
        ),
        .executableTarget(
            name: "bench-codec",
            dependencies: [
                "BenchCore",
                .product(name: "Tether", package: "Tether"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "bench-report",
            dependencies: ["BenchCore"]
        ),
        .executableTarget(
            name: "TetherBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "Tether", package: "Tether"),
            ],
            path: "Benchmarks/TetherBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
