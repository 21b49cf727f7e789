// swift-tools-version: 6.0
import PackageDescription

// Fuzzing for Tether's frame decoders: its own package, so the SDK's `swift build` and
// `swift test` never see libFuzzer.
//
//   tether-fuzz   the libFuzzer target; TETHER_FUZZ_PROFILE picks the profile. Build it
//                 from the repository root with
//                   swift build -c release --package-path Fuzz --product tether-fuzz \
//                       --sanitize=fuzzer --sanitize=address \
//                       -Xswiftc -sanitize=fuzzer,address --scratch-path .build-fuzz
//                 or let scripts/fuzz.sh do it (README.md says why each flag is there).
//                 It has no `main` of its own, so a plain build cannot link it.
//   fuzz-corpus   regenerates the seed corpora in Corpus/ from each profile's codec.
//   FuzzHarness   the harness both use; the root package's FuzzRegressionTests compile the
//                 same file through a symlink.

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "TetherFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Tether", path: ".."),
    ],
    targets: [
        .target(
            name: "FuzzHarness",
            dependencies: [.product(name: "Tether", package: "Tether")],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "tether-fuzz",
            dependencies: ["FuzzHarness", .product(name: "Tether", package: "Tether")],
            // libFuzzer provides `main`. No -parse-as-library needed: with --sanitize=fuzzer
            // SwiftPM passes it to every executable target itself.
            swiftSettings: strict,
            // gold warns about every ASan runtime symbol it cannot export; lld links cleanly.
            linkerSettings: [.unsafeFlags(["-use-ld=lld"])]
        ),
        .executableTarget(
            name: "fuzz-corpus",
            dependencies: ["FuzzHarness", .product(name: "Tether", package: "Tether")],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
