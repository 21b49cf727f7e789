#if os(Linux)
import Glibc
import Foundation
import Testing
@testable import Tether

/// The system resolver end to end, in a network namespace of the test's own: its loopback
/// is the only interface, `tether udp listen` on 127.0.0.1:53 is a DNS server that never
/// answers, and a private mount namespace puts a `resolv.conf` naming it (and a `hosts`
/// file with a dual-stack name) over the system's. The `tether` executable beside the test
/// bundle runs inside, as a user runs it.
@Suite("Name resolution through the system resolver, in a network namespace", .timeLimit(.guarded))
struct ResolutionNamespaceTests {
    /// Whether the tests can run: root, `unshare -mn` works, and `tether` is built.
    static let available: Bool = {
        guard getuid() == 0, CLIProfileTests.executable != nil else { return false }
        guard let probe = try? ChildProcess("/usr/bin/unshare", ["-mn", "true"]) else { return false }
        return (try? probe.waitForExitBlocking(within: .seconds(10))) == 0
    }()

    /// Runs `script` under `unshare -mn bash`, in a namespace whose `/etc/resolv.conf`
    /// names a silent DNS server on 127.0.0.1:53 (already listening when `script` starts)
    /// and whose `/etc/hosts` has `dual.test` at ::1 and 127.0.0.1. `$T` is the `tether`
    /// executable.
    ///
    /// - Returns: The merged output of the namespace's processes.
    private func inNamespace(_ script: String) async throws -> String {
        let tether = try #require(CLIProfileTests.executable)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tether-netns-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try "nameserver 127.0.0.1\n".write(to: directory.appendingPathComponent("resolv.conf"), atomically: true, encoding: .utf8)
        try "127.0.0.1 localhost\n::1 localhost\n::1 dual.test\n127.0.0.1 dual.test\n"
            .write(to: directory.appendingPathComponent("hosts"), atomically: true, encoding: .utf8)
        let setup = """
            set -u
            D="$1"; T="$2"
            ip link set lo up || { echo "setup failed: ip link"; exit 90; }
            mount --bind "$D/resolv.conf" /etc/resolv.conf || { echo "setup failed: resolv.conf"; exit 91; }
            mount --bind "$D/hosts" /etc/hosts || { echo "setup failed: hosts"; exit 92; }
            mkfifo "$D/dns"
            "$T" udp listen 127.0.0.1:53 > "$D/dns" 2>&1 &
            DNS=$!
            trap 'kill $DNS 2>/dev/null' EXIT
            exec 3< "$D/dns"
            read -r line <&3; echo "dns: $line"

            """
        let child = try ChildProcess("/usr/bin/unshare", ["-mn", "bash", "-c", setup + script, "bash", directory.path, tether])
        defer { child.kill() }
        // Generous: before resolution was bounded, the lookup alone took the resolver's
        // retries (5 s each). A hang guard, not a measurement.
        let status = try await child.waitForExit(within: .seconds(90))
        let output = child.outputText
        #expect(status == 0, "\(output)")
        return output
    }

    /// The integer after `name=` in `output`.
    private func figure(_ name: String, in output: String) -> Int? {
        guard let start = output.range(of: "\(name)=") else { return nil }
        return Int(output[start.upperBound...].prefix { $0.isNumber })
    }

    @Test("a silent DNS server with a 1 s connect timeout: tether request fails in about 1 s, naming the host and the resolution step", .enabled(if: available, "needs root, unshare -mn and the tether executable"))
    func silentServer() async throws {
        let output = try await inNamespace("""
            start=$(date +%s%N)
            "$T" request slow.test:9 --type 0x402 --json '{}' --timeout 1; status=$?
            end=$(date +%s%N)
            echo "status=$status elapsed_ms=$(( (end - start) / 1000000 ))"
            read -r -t 5 line <&3 && echo "dns: $line"
            exit 0
            """)
        // The server was asked: the lookup ran and found no answer, not no server.
        #expect(output.contains("dns: from 127.0.0.1:"), "\(output)")
        #expect(figure("status", in: output) == 1, "\(output)")
        #expect(output.contains("resolving slow.test did not finish within 1 s"), "\(output)")
        let elapsed = try #require(figure("elapsed_ms", in: output), "\(output)")
        // About 1 s; 3 s guards against a hang, it is not a measurement of the timeout.
        #expect(elapsed < 3000, "failed after \(elapsed) ms:\n\(output)")
        #expect(elapsed >= 900, "failed after \(elapsed) ms, before the timeout:\n\(output)")
    }

    @Test("a dual-stack name from the hosts file still races both families: it connects to a server on ::1 only, and to one on 127.0.0.1 only", .enabled(if: available, "needs root, unshare -mn and the tether executable"))
    func dualStackName() async throws {
        // Which answer comes first is up to the system's resolver; either way the race must
        // reach the one family that listens.
        let output = try await inNamespace("""
            serve() {
                mkfifo "$D/serve$2"
                "$T" serve --port 0 --host "$1" > "$D/serve$2" 2>&1 &
                PIDS="$PIDS $!"
                exec {fd}< "$D/serve$2"
                read -r line <&$fd; echo "serve: $line"
                port=${line##*:}
            }
            PIDS=$DNS
            trap 'kill $PIDS 2>/dev/null' EXIT
            serve ::1 6; echo "port6=$port"
            "$T" request "dual.test:$port" --type 0x402 --json '{"hello":6}' --verbose 2>&1; echo "status6=$?"
            serve 127.0.0.1 4; echo "port4=$port"
            "$T" request "dual.test:$port" --type 0x402 --json '{"hello":4}' --verbose 2>&1; echo "status4=$?"
            exit 0
            """)
        let port6 = try #require(figure("port6", in: output), "\(output)")
        let port4 = try #require(figure("port4", in: output), "\(output)")
        #expect(figure("status6", in: output) == 0, "\(output)")
        #expect(figure("status4", in: output) == 0, "\(output)")
        #expect(output.contains("tether: connected to [::1]:\(port6) (IPv6)"), "\(output)")
        #expect(output.contains("tether: connected to 127.0.0.1:\(port4) (IPv4)"), "\(output)")
        #expect(output.contains(#"{"echo":{"hello":6}}"#) && output.contains(#"{"echo":{"hello":4}}"#), "\(output)")
        // The hosts file answered: no query reached the DNS server.
        #expect(!output.contains("dns: from"), "\(output)")
    }
}
#endif
