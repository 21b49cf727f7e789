#if os(Linux)
import Foundation
import Testing
@testable import Tether

/// The Linux path monitor against the kernel: `tether path` runs in a network namespace the
/// test makes (and always deletes), while the test gives the namespace an interface, an
/// address and a default route, then takes them away. Only the namespace changes; no
/// packet is sent anywhere.
@Suite("The netlink path monitor in a network namespace", .timeLimit(.guarded))
struct NetlinkNamespaceTests {
    /// Where `ip` is, when the test can use it: as root, with `ip` installed.
    static let ip: String? = {
        guard getuid() == 0 else { return nil }
        return ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// Runs `ip arguments` and waits for it to succeed.
    static func run(_ ip: String, _ arguments: [String]) async throws {
        let process = try ChildProcess(ip, arguments)
        defer { process.kill() }
        let status = try await process.waitForExit(within: eventBound)
        guard status == 0 else {
            throw CommandFailed(command: process.command, status: status, output: process.outputText)
        }
    }

    /// The complete lines in `output` once there are `count` of them.
    static func lines(_ count: Int, in output: [UInt8]) -> [String]? {
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        return lines.count >= count ? lines.prefix(count).map(String.init) : nil
    }

    /// The complete lines in `output` up to the first that is `last`, once there is one.
    static func lines(through last: String, in output: [UInt8]) -> [String]? {
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        guard let end = lines.firstIndex(where: { $0 == last }) else { return nil }
        return lines[...end].map(String.init)
    }

    @Test(
        "tether path in a new namespace: no path, then the default route of a new interface, then no path once it is gone",
        .enabled(if: ip != nil, "needs root and the `ip` command, to make a network namespace")
    )
    func pathChangesInNamespace() async throws {
        let ip = try #require(Self.ip)
        let namespace = "tether-test-\(getpid())"
        try await Self.run(ip, ["netns", "add", namespace])
        defer {
            // Synchronously, so the namespace goes even when the test fails: deleting it
            // also deletes the interfaces in it.
            if let process = try? ChildProcess(ip, ["netns", "delete", namespace]) {
                _ = try? process.waitForExitBlocking(within: eventBound)
                process.kill()
            }
        }
        let inside = ["-n", namespace]
        try await Self.run(ip, inside + ["link", "set", "lo", "up"])
        let executable = try #require(CLIProfileTests.executable, "no tether executable beside the test bundle: `swift build` makes it")
        let watcher = try ChildProcess(ip, ["netns", "exec", namespace, executable, "path"])
        defer { watcher.kill() }
        let first = try await watcher.waitForOutput("the first path line", within: eventBound) { Self.lines(1, in: $0) }
        #expect(first == ["no usable path"])

        // A veth pair with both ends in the namespace: up, it has a carrier.
        try await Self.run(ip, inside + ["link", "add", "tt0", "type", "veth", "peer", "name", "tt1"])
        try await Self.run(ip, inside + ["address", "add", "10.203.0.2/24", "dev", "tt0"])
        try await Self.run(ip, inside + ["link", "set", "tt1", "up"])
        try await Self.run(ip, inside + ["link", "set", "tt0", "up"])
        try await Self.run(ip, inside + ["route", "add", "default", "via", "10.203.0.1", "dev", "tt0"])
        let usable = try await watcher.waitForOutput("the usable path line", within: eventBound) { Self.lines(2, in: $0) }
        let index = try #require(usable[1].firstMatch(of: /\(index (\d+)\)/).map { String($0.1) }, "\(usable)")
        #expect(usable == ["no usable path", "usable: IPv4 via 10.203.0.1 on tt0 (index \(index)) from 10.203.0.2/24"])

        try await Self.run(ip, inside + ["link", "delete", "tt0"])
        let gone = try await watcher.waitForOutput("the line after the interface went", within: eventBound) { Self.lines(3, in: $0) }
        #expect(gone == ["no usable path", "usable: IPv4 via 10.203.0.1 on tt0 (index \(index)) from 10.203.0.2/24", "no usable path"])
    }
}

extension NetlinkNamespaceTests {
    @Test(
        "a new address on the same interface and gateway is one change of path: the line of the new address, then nothing until the interface goes",
        .enabled(if: ip != nil, "needs root and the `ip` command, to make a network namespace")
    )
    func addressChangeIsOneChange() async throws {
        let ip = try #require(Self.ip)
        let namespace = "tether-test-address-\(getpid())"
        try await Self.run(ip, ["netns", "add", namespace])
        defer {
            if let process = try? ChildProcess(ip, ["netns", "delete", namespace]) {
                _ = try? process.waitForExitBlocking(within: eventBound)
                process.kill()
            }
        }
        let inside = ["-n", namespace]
        try await Self.run(ip, inside + ["link", "set", "lo", "up"])
        try await Self.run(ip, inside + ["link", "add", "tt0", "type", "veth", "peer", "name", "tt1"])
        // With promotion, removing the first address leaves the second as the interface's
        // primary, and the default route stays: the address changes, nothing else.
        try await Self.run(ip, ["netns", "exec", namespace, "/bin/sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/tt0/promote_secondaries"])
        try await Self.run(ip, inside + ["address", "add", "10.9.9.2/24", "dev", "tt0"])
        try await Self.run(ip, inside + ["link", "set", "tt1", "up"])
        try await Self.run(ip, inside + ["link", "set", "tt0", "up"])
        try await Self.run(ip, inside + ["route", "add", "default", "via", "10.9.9.1", "dev", "tt0"])
        let executable = try #require(CLIProfileTests.executable, "no tether executable beside the test bundle: `swift build` makes it")
        let watcher = try ChildProcess(ip, ["netns", "exec", namespace, executable, "path"])
        defer { watcher.kill() }
        let first = try await watcher.waitForOutput("the first path line", within: eventBound) { Self.lines(1, in: $0) }
        let index = try #require(first[0].firstMatch(of: /\(index (\d+)\)/).map { String($0.1) }, "\(first)")
        #expect(first == ["usable: IPv4 via 10.9.9.1 on tt0 (index \(index)) from 10.9.9.2/24"])

        // A second address is not the one the interface sends from; once the first is gone,
        // it is.
        try await Self.run(ip, inside + ["address", "add", "10.9.9.3/24", "dev", "tt0"])
        try await Self.run(ip, inside + ["address", "delete", "10.9.9.2/24", "dev", "tt0"])
        let changed = try await watcher.waitForOutput("the line of the new address", within: eventBound) { Self.lines(2, in: $0) }
        #expect(changed.last == "usable: IPv4 via 10.9.9.1 on tt0 (index \(index)) from 10.9.9.3/24")
        // The interface going is the next change: the address made exactly one line before it.
        try await Self.run(ip, inside + ["link", "delete", "tt0"])
        let lines = try await watcher.waitForOutput("the line after the interface went", within: eventBound) { output in
            Self.lines(through: "no usable path", in: output)
        }
        #expect(lines == [
            "usable: IPv4 via 10.9.9.1 on tt0 (index \(index)) from 10.9.9.2/24",
            "usable: IPv4 via 10.9.9.1 on tt0 (index \(index)) from 10.9.9.3/24",
            "no usable path",
        ])
    }
}

/// A command the test runs that did not succeed.
struct CommandFailed: Error, CustomStringConvertible {
    var command: String
    var status: Int32
    var output: String
    var description: String { "`\(command)` exited with \(status): \(output)" }
}
#endif
