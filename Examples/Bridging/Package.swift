// swift-tools-version: 6.0
// The code of Documentation.docc/Bridging.md: Tether's states, events and metrics through
// swift-log and swift-metrics, its requests as spans of swift-distributed-tracing, and a
// Tether server run as a Swift Service Lifecycle service.
// Tether itself depends on none of them; this package does, to show the few lines each needs.
import PackageDescription

let package = Package(
    name: "Bridging",
    platforms: [.macOS(.v15), .iOS(.v18)],
    dependencies: [
        .package(name: "Tether", path: "../.."),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .executableTarget(
            name: "BridgingExample",
            dependencies: [
                .product(name: "Tether", package: "Tether"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: [
                .enableUpcomingFeature("ExistentialAny"),
                .enableUpcomingFeature("InternalImportsByDefault"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
