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
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        .target(
            name: "Tether",
            dependencies: ["CTetherShims", "CSQLite"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "tether",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TetherTests",
            dependencies: ["Tether", "CSQLite"],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
