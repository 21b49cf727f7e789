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
        .library(name: "TetherTLS", targets: ["TetherTLS"]),
        .library(name: "TetherSQLite", targets: ["TetherSQLite"]),
        .library(name: "TetherHTTP", targets: ["TetherHTTP"]),
        .library(name: "TetherUDP", targets: ["TetherUDP"]),
        .library(name: "TetherPostgres", targets: ["TetherPostgres"]),
        .library(name: "TetherRedis", targets: ["TetherRedis"]),
        .library(name: "TetherTesting", targets: ["TetherTesting"]),
        .executable(name: "tether", targets: ["tether"]),
    ],
    dependencies: [],
    targets: [
        .target(name: "CTetherShims"),
        // SQLite from the system, for TetherSQLite only: code that uses Tether without the
        // durable mailbox store never needs its headers or library.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        // zlib from the system, for compressed frame bodies and CRC-32 checksums.
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]
        ),
        // OpenSSL 3 from the system, for TetherTLS only: code that uses Tether without TLS
        // never needs its headers.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]
        ),
        // libpq from the system, for TetherPostgres only: code that keeps its mailboxes
        // elsewhere never needs its headers or library.
        .systemLibrary(
            name: "CPostgres",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        .target(
            name: "Tether",
            dependencies: ["CTetherShims", "CZlib"],
            swiftSettings: strict
        ),
        .target(
            name: "TetherTLS",
            dependencies: ["Tether", "COpenSSL"],
            swiftSettings: strict
        ),
        // The durable mailbox store, in a SQLite file: its own module so programs that keep
        // no mailboxes, or keep them elsewhere, never link SQLite.
        .target(
            name: "TetherSQLite",
            dependencies: ["Tether", "CSQLite"],
            swiftSettings: strict
        ),
        // Mailboxes in PostgreSQL, shared by several servers: its own module so programs
        // that never use PostgreSQL never link libpq.
        .target(
            name: "TetherPostgres",
            dependencies: ["Tether", "CPostgres"],
            swiftSettings: strict
        ),
        // Mailboxes on Redis or Valkey: a RESP client of its own on Tether's event loops, so
        // it needs no system library.
        .target(
            name: "TetherRedis",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
        // The server side of HTTP through the channel: performs the requests clients send
        // with `Connection.http(_:)`, with the toolchain's URLSession (FoundationNetworking
        // on Linux). Its own module so programs that never forward HTTP never link it.
        .target(
            name: "TetherHTTP",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
        // Datagrams over UDP on Tether's event loops: its own module so programs that only
        // keep connections never see it.
        .target(
            name: "TetherUDP",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
        // What tests of code that uses Tether need: an in-memory network, a manual clock,
        // faults on demand (in memory and through a proxy on 127.0.0.1), and the helpers
        // tests otherwise copy. It depends on no test framework, so any can use it.
        .target(
            name: "TetherTesting",
            dependencies: ["Tether"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "tether",
            dependencies: ["Tether", "TetherTLS", "TetherSQLite", "TetherHTTP", "TetherPostgres", "TetherRedis", "TetherUDP"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "TetherTests",
            dependencies: ["Tether", "TetherTLS", "TetherSQLite", "TetherHTTP", "TetherPostgres", "TetherRedis", "TetherUDP", "TetherTesting", "CSQLite", "COpenSSL", "CZlib", "CPostgres"],
            swiftSettings: strict
        ),
        // The code examples of the documentation and the README, compiled (and the
        // self-contained ones run) so they cannot drift from the API.
        .testTarget(
            name: "DocumentationTests",
            dependencies: ["Tether", "TetherTLS", "TetherSQLite", "TetherHTTP", "TetherTesting", "TetherPostgres", "TetherRedis", "TetherUDP"],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
