#!/usr/bin/env bash
# Screenshots of the built documentation site, to look at what a reader sees:
#
#   scripts/docs-screenshots.sh OUTDIR
#
# Serves .build-docs/Tether.doccarchive (build it first with scripts/docs.sh) with
# `python3 -m http.server`, on 127.0.0.1 only, on a port the system picks, and has headless
# Chromium (Debian: `apt-get install chromium`) draw the Tether module page
# (/documentation/tether), the Getting Started article (/documentation/tether/gettingstarted)
# the TetherTLS module page (/documentation/tethertls) and the HTTP Through the Channel
# article into OUTDIR/tether.png, OUTDIR/gettingstarted.png, OUTDIR/tethertls.png and
# OUTDIR/httpthroughthechannel.png, 1280×1600. Prints the files' paths.
#
# DocC's pages are drawn by JavaScript from the page's JSON, so each screenshot waits for a
# virtual-time budget of 15 s (Chromium skips ahead when it is idle, so this costs about a
# second or two of real time), and the script fails unless the server saw the page's JSON
# requested. As root in a container Chromium needs --no-sandbox, and --disable-dev-shm-usage
# keeps it off a small /dev/shm; its D-Bus complaints there are harmless and go to a log.
#
# Run by hand, not in CI. The server is stopped on exit, with SIGKILL if SIGTERM is not
# enough.
set -euo pipefail

if (( $# != 1 )); then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
site="$root/.build-docs/Tether.doccarchive"
mkdir -p "$1"
outdir="$(cd "$1" && pwd)"

if [[ ! -f "$site/index.html" ]]; then
    echo "docs-screenshots: no site in $site: run scripts/docs.sh first" >&2
    exit 1
fi
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
    echo "docs-screenshots: no chromium on PATH (apt-get install -y chromium)" >&2
    exit 1
fi

work=$(mktemp -d)
server_pid=""
stop_server() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2> /dev/null; then
        kill -TERM "$server_pid" 2> /dev/null || true
        for _ in $(seq 20); do
            kill -0 "$server_pid" 2> /dev/null || break
            sleep 0.1
        done
        kill -KILL "$server_pid" 2> /dev/null || true
        wait "$server_pid" 2> /dev/null || true
    fi
    rm -rf "$work"
}
trap stop_server EXIT

# Port 0: the system picks a free port, and the server prints which.
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$site" > "$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 100); do
    port=$(sed -n 's/^Serving HTTP on 127\.0\.0\.1 port \([0-9]*\).*/\1/p' "$work/server.log")
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2> /dev/null || break
    sleep 0.1
done
if [[ -z $port ]]; then
    cat "$work/server.log" >&2
    echo "docs-screenshots: the server did not start" >&2
    exit 1
fi

shoot() {
    local name=$1 path=$2
    local file="$outdir/$name.png"
    rm -f "$file"
    if ! timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --hide-scrollbars --no-first-run --user-data-dir="$work/profile" \
        --window-size=1280,1600 --virtual-time-budget=15000 \
        --screenshot="$file" "http://127.0.0.1:$port$path" > "$work/chromium-$name.log" 2>&1 ||
        [[ ! -s $file ]]; then
        cat "$work/chromium-$name.log" >&2
        echo "docs-screenshots: no screenshot of $path" >&2
        exit 1
    fi
    if ! grep -q "\"GET /data$path.json HTTP/1.1\" 200" "$work/server.log"; then
        echo "docs-screenshots: $path was not drawn: its data/…$path.json was never loaded" >&2
        exit 1
    fi
    echo "$file"
}

shoot tether /documentation/tether
shoot gettingstarted /documentation/tether/gettingstarted
shoot tethertls /documentation/tethertls
shoot httpthroughthechannel /documentation/tether/httpthroughthechannel
