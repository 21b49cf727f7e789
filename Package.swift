// swift-tools-version: 6.0
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Tether",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .library(name: "Tether", targets: ["Tether"]),
        .executable(name: "tether", targets: ["tether"]),
    ],
    dependencies: [],
    targets: [
        .target(name: "CTetherShims"),
        .target(
            name: "Tether",
            dependencies: ["CTetherShims"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "tether",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TetherTests",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
