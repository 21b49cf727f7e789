#!/usr/bin/env bash
# Fuzzes Tether's frame decoders with libFuzzer: builds the Fuzz package, then runs the
# tether-fuzz target once per profile.
#
#   scripts/fuzz.sh PROFILE SECONDS
#
#   PROFILE  a name from Profile.builtIn, or `all` for every one of them (the list comes
#            from the fuzz binary itself, `TETHER_FUZZ_PROFILE=list tether-fuzz`)
#   SECONDS  how long to fuzz each profile
#
# The build (release, libFuzzer and AddressSanitizer, into .build-fuzz at the repository root):
#
#   swift build -c release --package-path Fuzz --product tether-fuzz \
#       --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer,address \
#       --scratch-path .build-fuzz
#
#   --product tether-fuzz         the package's other executable, fuzz-corpus, has a main of
#                                 its own and cannot link against libFuzzer's
#   -Xswiftc -sanitize=fuzzer,address
#                                 SwiftPM passes its two --sanitize flags to swiftc as two
#                                 -sanitize= options and swiftc keeps only the last, so
#                                 without this the Swift code (Tether's codecs included) gets
#                                 ASan but no coverage instrumentation, and libFuzzer fuzzes
#                                 blind ("Loaded 1 PC tables (2 PCs)")
#
# Each profile's committed seed corpus, Fuzz/Corpus/<profile>/, is copied into a scratch
# corpus under .build-fuzz/runs/, so new inputs never land in the repository. A profile
# without a committed corpus starts from an empty one (regenerate the corpora with
# `swift run --package-path Fuzz fuzz-corpus`). A run fails on a crash or broken codec
# invariant, on an input that takes longer than $timeout s (a hang), on an allocation over
# $malloc_limit_mb MB or a process over $rss_limit_mb MB (unbounded memory), and on a leak.
#
# The fuzzer runs with SWIFT_BACKTRACE=enable=no: Swift's crash handler is installed first
# and libFuzzer leaves an installed handler alone, so on a trap the Swift backtracer would
# run (slowly, and it can hang on an ASan binary) and libFuzzer would save no reproducer.
#
# Prints one summary line per profile; for a failure, the reproducer and the command that
# replays it. Exits 1 when any run failed, 2 on a usage error.
set -euo pipefail

# Per-input limits. Inputs are at most $max_len bytes, so any frame they hold is small: a
# single allocation over $malloc_limit_mb MB can only be a codec trusting a declared length.
max_len=4096
timeout=10
rss_limit_mb=2048
malloc_limit_mb=64

usage() { sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

if [[ $# -ne 2 ]]; then
    usage >&2
    exit 2
fi
requested="$1"
seconds="$2"
if [[ ! $seconds =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scratch=.build-fuzz

# --- build -------------------------------------------------------------------------------
echo "==> building tether-fuzz (release, libFuzzer + ASan) into $scratch" >&2
build_start=$SECONDS
# SwiftPM keeps the source list of a path dependency in the build description: drop it, so
# files added to, moved within or removed from the SDK are seen.
rm -f "$scratch/release.yaml"
swift build -c release --package-path Fuzz --product tether-fuzz \
    --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer,address \
    --scratch-path "$scratch"
fuzzer="$(swift build -c release --package-path Fuzz --scratch-path "$scratch" --show-bin-path)/tether-fuzz"
echo "==> built in $((SECONDS - build_start)) s: $fuzzer" >&2

mapfile -t known < <(TETHER_FUZZ_PROFILE=list "$fuzzer")
if [[ ${#known[@]} -eq 0 ]]; then
    echo "fuzz.sh: $fuzzer listed no profiles" >&2
    exit 1
fi
if [[ $requested == all ]]; then
    profiles=("${known[@]}")
else
    found=0
    for name in "${known[@]}"; do [[ $name == "$requested" ]] && found=1; done
    if [[ $found == 0 ]]; then
        echo "fuzz.sh: unknown profile '$requested'; built-in profiles: ${known[*]} (or all)" >&2
        exit 2
    fi
    profiles=("$requested")
fi

# --- fuzz --------------------------------------------------------------------------------
run_dir="$scratch/runs/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$run_dir"
echo "==> fuzzing ${profiles[*]} for $seconds s each; corpora, logs and artifacts in $run_dir" >&2

# The value of `stat::NAME:` in a libFuzzer log (from -print_final_stats), or ?.
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1 | grep . || echo '?'; }
# A field (cov, ft, corp) of libFuzzer's last status line, or ?.
field() { grep -E '^#[0-9]+' "$2" | tail -n 1 | sed -n "s/.* $1: \([^ ]*\).*/\1/p" | grep . || echo '?'; }

failed=()
summaries=()
for profile in "${profiles[@]}"; do
    work="$run_dir/$profile"
    corpus="$work/corpus"
    artifacts="$work/artifacts"
    log="$work/fuzz.log"
    mkdir -p "$corpus" "$artifacts"
    if [[ -d Fuzz/Corpus/$profile ]]; then
        cp Fuzz/Corpus/"$profile"/* "$corpus"/ 2>/dev/null || true
    else
        echo "note: no committed corpus Fuzz/Corpus/$profile/; starting from an empty one" \
            "(run: swift run --package-path Fuzz fuzz-corpus)" >&2
    fi
    seeds=$(find "$corpus" -type f | wc -l)
    echo "==> $profile: $seeds seed inputs, $seconds s" >&2

    status=0
    SWIFT_BACKTRACE=enable=no TETHER_FUZZ_PROFILE="$profile" "$fuzzer" "$corpus" \
        -max_total_time="$seconds" -max_len="$max_len" -timeout="$timeout" \
        -rss_limit_mb="$rss_limit_mb" -malloc_limit_mb="$malloc_limit_mb" \
        -artifact_prefix="$artifacts/" -print_final_stats=1 \
        >"$log" 2>&1 || status=$?

    runs=$(final_stat number_of_executed_units "$log")
    rate=$(final_stat average_exec_per_sec "$log")
    rss=$(final_stat peak_rss_mb "$log")
    coverage="cov $(field cov "$log") ft $(field ft "$log") corpus $(field corp "$log")"
    reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    if [[ $status -eq 0 && -z $reproducer ]]; then
        summaries+=("$profile: ok, $runs runs in $seconds s, $rate exec/s, $coverage, peak rss $rss MB")
        continue
    fi

    # What went wrong: Swift's trap message (a broken invariant, a failed precondition) or
    # the sanitizer's summary (deadly signal, timeout, out-of-memory, leak, overflow ...).
    kind=$(grep -m 1 -oE 'Fatal error: .*' "$log" | cut -c 1-200 || true)
    [[ -n $kind ]] || kind=$(grep -m 1 '^SUMMARY: ' "$log" | sed 's/^SUMMARY: //; s/ (.*//' || true)
    summaries+=("$profile: FAILED (${kind:-exit status $status}) after $runs runs")
    failed+=("$profile")
    {
        echo "---- $profile: fuzzing failed (exit status $status); end of $log:"
        grep -vE '^(#[0-9]+|INFO:|	NEW_FUNC)' "$log" | tail -n 40
        echo "----"
        if [[ -n $reproducer ]]; then
            echo "reproducer: $root/$reproducer"
            echo "reproduce:  SWIFT_BACKTRACE=enable=no TETHER_FUZZ_PROFILE=$profile $fuzzer $root/$reproducer"
            echo "keep it:    mkdir -p $root/Fuzz/Regressions/$profile && cp $root/$reproducer \\"
            echo "                $root/Fuzz/Regressions/$profile/  (swift test --filter FuzzRegression replays it)"
        else
            echo "no reproducer was written; the full log is $root/$log"
        fi
    } >&2
done

echo "==> summary" >&2
printf '%s\n' "${summaries[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz.sh: fuzzing found failures in: ${failed[*]}" >&2
    exit 1
fi
