#!/usr/bin/env bash
# Checks the documentation and builds it with the toolchain's docc, into .build-docs at the
# repository root (from any working directory):
#
#   scripts/docs.sh
#
# 1. Symbol graphs. The library modules Tether, TetherTLS, TetherSQLite, TetherPostgres,
#    TetherRedis, TetherHTTP, TetherUDP and TetherTesting are built with the compiler's own symbol graph output, in .build-docs (its flags differ
#    from a normal build, so it keeps a build directory of its own and stays incremental):
#
#      swift build --scratch-path .build-docs --target MODULE \
#          -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc .build-docs/symbol-graphs
#
#    The compiler writes public and open symbols only (its default minimum access level),
#    one file per module plus one per module it extends (TetherTLS@Tether.symbols.json). A
#    module's graphs are written only when the module is rebuilt, so an extension graph
#    older than its module's main graph is left from an earlier build and is removed.
#
# 2. Doc comments: scripts/check-doc-comments.swift over those graphs. Every public symbol
#    with a source location needs a `///` comment that documents its parameters, what it
#    throws and what it returns (the script's header has the rules and what is skipped). It
#    covers whatever source files the modules have when it runs.
#
# 3. Code in the documentation: scripts/check-doc-code.swift. Every ```swift block of
#    Documentation.docc/*.md and README.md must appear, line for line (trimmed, blank lines
#    dropped), in a Swift file under Tests/DocumentationTests or Examples/, which are
#    compiled (by `swift build --build-tests`, and by step 4). Blocks that begin with the
#    line `// Package.swift` are manifest fragments and are exempt.
#
# 4. Example packages: each Examples/*/Package.swift (Examples/Bridging, when it exists) is
#    built with `swift build --package-path`, so the code that step 3 finds there compiles.
#
# 5. Rendering: `docc convert` on Documentation.docc with the symbol graphs of all six
#    modules, warnings as errors, into .build-docs/Tether.doccarchive, transformed for static
#    hosting at the root of a site (no hosting base path). One catalog takes all six
#    modules: Tether.md stays the Tether module's page (/documentation/tether, with the
#    articles beneath it), and TetherTLS, TetherSQLite, TetherPostgres, TetherHTTP and TetherTesting get module pages of
#    their own (/documentation/tethertls, /documentation/tethersqlite,
#    /documentation/tetherhttp, /documentation/tethertesting) with their symbols; their extensions of Tether types
#    (TLSConfiguration.client(...), MailboxConfiguration.sqlite(...)) appear on those
#    types' pages.
#    Two rules follow from having several modules in one catalog, where docc has no single
#    module to fall back on: a link from one module's comments to another module's symbol
#    names the module (``Tether/TLSDetails``, ``TetherTLS/TLSClientOptions``), and every
#    article must be listed in a Topics section (`- <doc:Name>`) of Tether.md or of an
#    article listed there. docc reports a broken link, but leaves an unlisted article out
#    without a word, so this script checks that each article came out as a page. Serve the
#    archive with any static file server and open /documentation/tether;
#    scripts/docs-screenshots.sh does that and takes screenshots.
#
# Every step runs even when an earlier check failed (a failed build of the symbol graphs
# stops the script, since nothing after it can run), and each failure is listed at the end.
# The last line sums up: symbols checked, code blocks checked, pages rendered, time taken.
# Exits 0 when every step passed, 1 otherwise.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

scratch="$root/.build-docs"
graphs="$scratch/symbol-graphs"
archive="$scratch/Tether.doccarchive"
logs="$scratch/logs"
modules=(Tether TetherTLS TetherSQLite TetherPostgres TetherRedis TetherHTTP TetherUDP TetherTesting)
started=$(date +%s%N)
failures=()

mkdir -p "$graphs" "$logs"

swift_bin="$(dirname "$(readlink -f "$(command -v swift)")")"
if [[ -x "$swift_bin/docc" ]]; then
    docc="$swift_bin/docc"
elif command -v docc > /dev/null; then
    docc="$(command -v docc)"
else
    echo "docs: no docc beside $swift_bin/swift or on PATH" >&2
    exit 1
fi

# --- 1. Symbol graphs --------------------------------------------------------------------

build_graphs() {
    local module=$1
    swift build --scratch-path "$scratch" --target "$module" \
        -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$graphs" \
        > "$logs/build-$module.log" 2>&1 || {
        cat "$logs/build-$module.log" >&2
        echo "docs: building $module for its symbol graph failed" >&2
        exit 1
    }
}

echo "docs: building the symbol graphs of ${modules[*]}"
for module in "${modules[@]}"; do
    build_graphs "$module"
    if [[ ! -f "$graphs/$module.symbols.json" ]]; then
        # Up to date from a build whose graphs were deleted since: without its module file
        # the module is emitted again, and its graphs with it.
        rm -f "$scratch/debug/Modules/$module.swiftmodule"
        build_graphs "$module"
        [[ -f "$graphs/$module.symbols.json" ]] || {
            echo "docs: the build of $module wrote no $graphs/$module.symbols.json;" \
                "remove .build-docs and run again" >&2
            exit 1
        }
    fi
done

# Keep only the current graphs of these modules.
for graph in "$graphs"/*.symbols.json; do
    name=$(basename "$graph" .symbols.json)
    module=${name%%@*}
    keep=false
    for wanted in "${modules[@]}"; do [[ $module == "$wanted" ]] && keep=true; done
    if [[ $keep == true && $name == *@* ]]; then
        # Written by the same compiler job as the module's main graph, or left over.
        main_time=$(stat -c %Y "$graphs/$module.symbols.json")
        (( $(stat -c %Y "$graph") + 60 >= main_time )) || keep=false
    fi
    [[ $keep == true ]] || rm -f "$graph"
done

# --- 2. Doc comments ---------------------------------------------------------------------

echo "docs: checking doc comments"
if swift scripts/check-doc-comments.swift --root "$root" "$graphs" | tee "$logs/doc-comments.log"; then
    :
else
    failures+=("doc comments")
fi
symbols=$(sed -n 's/^doc comments: \([0-9]*\) public symbols.*/\1/p' "$logs/doc-comments.log")

# --- 3. Code in the documentation --------------------------------------------------------

echo "docs: checking the Swift blocks of the documentation against compiled code"
shopt -s nullglob
markdown=("$root"/Documentation.docc/*.md "$root/README.md")
code_directories=("$root/Tests/DocumentationTests")
[[ -d "$root/Examples" ]] && code_directories+=("$root/Examples")
if swift scripts/check-doc-code.swift --root "$root" --markdown "${markdown[@]}" \
    --swift "${code_directories[@]}" | tee "$logs/doc-code.log"; then
    :
else
    failures+=("code blocks")
fi
blocks=$(sed -n 's/^code blocks: \([0-9]*\) swift blocks.*/\1/p' "$logs/doc-code.log")

# --- 4. Example packages -----------------------------------------------------------------

examples=0
for manifest in "$root"/Examples/*/Package.swift; do
    package=$(dirname "$manifest")
    name=${package#"$root"/}
    echo "docs: building $name"
    # The build description keeps the SDK's source list (a path dependency): drop it, so
    # a file added to the SDK is compiled.
    rm -f "$package/.build/debug.yaml"
    if swift build --package-path "$package" > "$logs/build-$(basename "$package").log" 2>&1; then
        examples=$((examples + 1))
    else
        cat "$logs/build-$(basename "$package").log" >&2
        failures+=("$name")
    fi
done

# --- 5. Rendering ------------------------------------------------------------------------

echo "docs: rendering Documentation.docc with $(basename "$docc")"
rm -rf "$archive"
if "$docc" convert "$root/Documentation.docc" \
    --additional-symbol-graph-dir "$graphs" \
    --fallback-display-name Tether \
    --fallback-bundle-identifier dev.tether.Tether \
    --warnings-as-errors \
    --transform-for-static-hosting \
    --output-path "$archive" > "$logs/docc.log" 2>&1; then
    pages=$(find "$archive/data/documentation" -name '*.json' | wc -l)
    # The landing page is the Tether module's page, from Tether.md.
    if ! grep -q '"role":"collection"' "$archive/data/documentation/tether.json" 2> /dev/null ||
        ! grep -q '"title":"Tether"' "$archive/data/documentation/tether.json"; then
        echo "docs: $archive has no Tether module page at /documentation/tether" >&2
        failures+=("rendering")
    fi
    # With more than one module in the catalog, docc silently leaves out an article that no
    # Topics section lists: every article must have come out as a page.
    unrendered=0
    for article in "$root"/Documentation.docc/*.md; do
        head -n 1 "$article" | grep -q '^# ``' && continue  # a symbol's page, not an article
        name=$(basename "$article" .md)
        if [[ ! -f "$archive/data/documentation/tether/${name,,}.json" ]]; then
            echo "Documentation.docc/$name.md:1: not rendered: list <doc:$name> in a Topics section of Tether.md (or of an article listed there)" >&2
            unrendered=$((unrendered + 1))
        fi
    done
    (( unrendered == 0 )) || failures+=("uncurated articles")
else
    cat "$logs/docc.log" >&2
    failures+=("rendering")
    pages=0
fi

# --- Summary -----------------------------------------------------------------------------

elapsed=$(( ($(date +%s%N) - started) / 1000000 ))
seconds="$((elapsed / 1000)).$(printf '%03d' $((elapsed % 1000)) | cut -c1)"
summary="${symbols:-0} public symbols checked, ${blocks:-0} code blocks checked, $pages pages rendered"
summary+=" (${modules[*]}) into ${archive#"$root"/}, $examples example packages built, in $seconds s"
if (( ${#failures[@]} > 0 )); then
    failed=$(IFS=,; echo "${failures[*]}")
    echo "docs: FAILED (${failed//,/, }): $summary"
    exit 1
fi
echo "docs: passed: $summary"
