import BenchCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    usage: bench-report RESULTS-FILE
      Reads the RUN lines that scripts/bench.sh writes, one per client run:
        RUN rep=1 scenario=a server=tether client=tether status=ok RESULT impl=tether … rps=… p50_us=…
      and prints markdown: Tether against each peer per scenario (medians of the
      repetitions with their min–max spread, and Tether's ratio to each peer), the same
      with one side held fixed to the C baseline, and the whole matrix.
    """

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 1, !arguments[0].hasPrefix("-") else {
    if arguments.first == "--help" || arguments.first == "-h" {
        printNow(usage)
        exit(0)
    }
    Options.fail("expected one results file", usage: usage)
}
guard let text = readFile(arguments[0]) else {
    printError("bench-report: cannot read \(arguments[0])")
    exit(1)
}
printNow(Report(runs: text.split(separator: "\n").compactMap { Run(line: $0) }).markdown())
