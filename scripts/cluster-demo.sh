#!/usr/bin/env bash
# Three `tether serve --postgres` nodes on a throwaway PostgreSQL, a listener for client
# `alice` moved from node to node (stopped, taken over, its node killed), and a backend
# that pushes with `tether push` in between: prints who is on which node and the
# sequences alice receives, and checks there is no gap and no duplicate.
#
# PostgreSQL runs from a temporary directory on 127.0.0.1 and a free port, with fsync off,
# as the postgres user when run as root (PostgreSQL refuses root). Everything started here
# is stopped at the end, on failure and on Ctrl-C too, and the directory is removed.
#
# With --redis the nodes are `tether serve --redis` on a throwaway redis-server instead
# (127.0.0.1, a free port, no persistence), and the backend is `tether push --redis`.
#
# usage: scripts/cluster-demo.sh [--redis]   (builds tether first; TETHER=path skips the build)
set -euo pipefail

engine=postgres
case "${1:-}" in
    --redis) engine=redis ;;
    "") ;;
    *) echo "usage: scripts/cluster-demo.sh [--redis]" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."

children=()
work=""
postgres_bin=""

as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ ${#children[@]} -gt 0 ]; then
        kill -TERM "${children[@]}" 2>/dev/null || true
        # Two seconds to close gracefully, then SIGKILL for whatever ignored SIGTERM.
        for _ in $(seq 20); do
            local alive=0
            for pid in "${children[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
            [ "$alive" = 0 ] && break
            sleep 0.1
        done
        kill -KILL "${children[@]}" 2>/dev/null || true
        wait 2>/dev/null || true
    fi
    if [ -n "$work" ]; then
        if [ -f "$work/pg/postmaster.pid" ]; then
            as_postgres "$postgres_bin/pg_ctl" -D "$work/pg" -m immediate -w -t 10 stop >/dev/null 2>&1 || {
                pid=$(head -n 1 "$work/pg/postmaster.pid" 2>/dev/null || true)
                [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
            }
        fi
        rm -rf "$work"
    fi
    [ "$status" = 0 ] || echo "cluster demo: failed (status $status)" >&2
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "cluster demo: $*" >&2
    exit 1
}

# Waits up to $3 seconds (default 10) until file $1 has a line matching $2.
wait_for() {
    local file=$1 pattern=$2 limit=${3:-10}
    local tries=$((limit * 20))
    while ! grep -qE -- "$pattern" "$file" 2>/dev/null; do
        tries=$((tries - 1))
        [ "$tries" -gt 0 ] || fail "waited ${limit}s for '$pattern' in $(basename "$file"): $(tail -n 3 "$file" 2>/dev/null)"
        sleep 0.05
    done
}

# Waits up to 10 s until file $1 has $2 lines.
wait_lines() {
    local tries=200
    while [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -lt "$2" ]; do
        tries=$((tries - 1))
        [ "$tries" -gt 0 ] || fail "waited 10s for $2 lines in $(basename "$1"), got: $(cat "$1")"
        sleep 0.05
    done
}

# The serials of the pushes a listener printed, on one line.
serials() {
    sed -n 's/.*"serial":\([0-9]*\).*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'
}

# Prints the lines node $1 logged since the last call, indented.
declare -A shown=()
node_log() {
    local name=$1 file="$work/$1.err" from=$(( ${shown[$1]:-0} + 1 ))
    local total
    total=$(wc -l <"$file")
    sed -n "${from},${total}p" "$file" | sed "s/^/    $name| /"
    shown[$name]=$total
}

# Where the database says alice is: her holder node, its claim's generation, her last
# sequence and what she acknowledged.
where_is_alice() {
    if [ "$engine" = redis ]; then
        redis-cli -p "$redis_port" --no-raw HMGET tether:m:alice holder gen last ack | tr -d '"' | tr '\n' ' ' |
            awk '{h = ($2 == "" || $2 == "(nil)") ? "no node" : $2; printf "redis: alice held by %s (claim %s), last sequence %s, acknowledged %s\n", h, $4, $6, $8}'
        return
    fi
    "$postgres_bin/psql" -X -q -At -F ' ' -h 127.0.0.1 -p "$pg_port" -U tether -d tether -c \
        "SELECT 'database: alice held by ' || coalesce(holder, 'no node') || ' (claim ' || generation || '), last sequence ' || last_sequence || ', acknowledged ' || acknowledged FROM tether_mailboxes WHERE client_id = 'alice'"
}

push() {
    local shown="" argument
    for argument in "$@"; do
        if [[ $argument =~ ^[A-Za-z0-9_./:=-]+$ ]]; then shown+=" $argument"; else shown+=" '$argument'"; fi
    done
    echo "  \$ tether push --$engine \$URL --client-id alice$shown"
    "$tether" push "--$engine" "$url" --client-id alice "$@" | sed 's/^/    /'
}

# Starts `tether listen` for alice against node $2 as listener $1, keeping her sequence in
# one state file; extra options follow.
listen() {
    local name=$1 node=$2
    shift 2
    "$tether" listen "127.0.0.1:${ports[$node]}" --client-id alice --state "$work/alice.state" \
        --reconnect-delay 0.2 "$@" >"$work/$name.out" 2>"$work/$name.err" &
    children+=($!)
    listener_pid[$name]=$!
    wait_for "$work/$name.err" '^tether: connected'
}

started=$(date +%s.%N)

# --- tether ----------------------------------------------------------------------------
if [ -z "${TETHER:-}" ]; then
    echo "building tether…"
    swift build --product tether >/dev/null
    TETHER="$(swift build --show-bin-path)/tether"
fi
tether=$TETHER
[ -x "$tether" ] || fail "no tether executable at $tether"

work=$(mktemp -d /tmp/tether-cluster-demo.XXXXXX)
if [ "$engine" = redis ]; then
    # --- Redis ---------------------------------------------------------------------------
    command -v redis-server >/dev/null || fail "redis-server is not installed (apt-get install -y redis-server)"
    redis_port=""
    for _ in 1 2 3 4 5; do
        candidate=$((20000 + RANDOM % 40000))
        if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then continue; fi
        redis-server --port "$candidate" --bind 127.0.0.1 --dir "$work" --save '' --appendonly no >"$work/redis.log" 2>&1 &
        children+=($!)
        wait_for "$work/redis.log" 'Ready to accept connections' 10
        redis_port=$candidate
        break
    done
    [ -n "$redis_port" ] || fail "redis-server did not start: $(tail -n 3 "$work/redis.log")"
    url="redis://127.0.0.1:$redis_port"
    echo "URL=$url"
    echo "Redis $(redis-server --version | awk '{print $3}' | sed 's/v=//') on 127.0.0.1:$redis_port (no persistence)"
else
# --- PostgreSQL ------------------------------------------------------------------------
postgres_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$postgres_bin" ] || postgres_bin=$(pg_config --bindir 2>/dev/null || true)
[ -x "$postgres_bin/initdb" ] || fail "PostgreSQL is not installed (apt-get install -y postgresql)"

if [ "$(id -u)" = 0 ]; then chown postgres "$work"; fi
as_postgres "$postgres_bin/initdb" -D "$work/pg" -U tether --auth=trust -E UTF8 --locale=C --no-sync >"$work/initdb.log" 2>&1 ||
    fail "initdb failed: $(tail -n 3 "$work/initdb.log")"

pg_port=""
for _ in 1 2 3 4 5; do
    candidate=$((20000 + RANDOM % 40000))
    # Taken if something answers there.
    if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then continue; fi
    if as_postgres "$postgres_bin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w -t 30 \
        -o "-h 127.0.0.1 -p $candidate -k $work -c fsync=off -c full_page_writes=off -c synchronous_commit=off" start >/dev/null 2>&1; then
        pg_port=$candidate
        break
    fi
done
[ -n "$pg_port" ] || fail "PostgreSQL did not start: $(tail -n 3 "$work/pg/log" 2>/dev/null)"
"$postgres_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U tether tether
url="postgresql://tether@127.0.0.1:$pg_port/tether"
echo "URL=$url"
echo "PostgreSQL $("$postgres_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port (fsync off, data in $work)"
fi

# --- three nodes -----------------------------------------------------------------------
declare -A ports=() node_pid=() listener_pid=()
for node in n1 n2 n3; do
    "$tether" serve --port 0 "--$engine" "$url" --node "$node" >"$work/$node.out" 2>"$work/$node.err" &
    children+=($!)
    node_pid[$node]=$!
done
for node in n1 n2 n3; do
    wait_for "$work/$node.out" '^listening on '
    ports[$node]=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$node.out")
    echo "$node: $(head -n 1 "$work/$node.out")"
done

# --- 1: pushes to an offline client ----------------------------------------------------
echo
echo "1. alice is offline; a backend pushes to her twice"
push --json '{"step":1}' --count 2
where_is_alice

# --- 2: alice on n1 --------------------------------------------------------------------
echo
echo "2. alice listens on n1: the two stored pushes are replayed, the next one is live"
listen a n1
wait_lines "$work/a.out" 2
push --json '{"step":2}'
wait_lines "$work/a.out" 3
where_is_alice
node_log n1

# --- 3: moved to n2 --------------------------------------------------------------------
echo
echo "3. alice stops (SIGTERM) after saving sequence $(serials "$work/a.out" | awk '{print $NF}'); two pushes while she is away; she comes back on n2"
kill -TERM "${listener_pid[a]}"
wait "${listener_pid[a]}" || fail "the listener on n1 did not exit 0"
echo "  saved state: $(cat "$work/alice.state")"
push --json '{"step":3}' --count 2
listen b n2 --max-attempts 0
wait_lines "$work/b.out" 2
push --json '{"step":3,"live":true}'
wait_lines "$work/b.out" 3
where_is_alice
node_log n1
node_log n2

# --- 4: taken over on n3 ---------------------------------------------------------------
echo
echo "4. alice connects on n3 while still connected on n2: n3 takes her over, n2 closes its connection"
listen c n3
wait_for "$work/n2.err" 'connected again on node n3'
wait "${listener_pid[b]}" 2>/dev/null || true
echo "  the listener on n2 ended: $(grep -v '^tether: connected' "$work/b.err" | tail -n 1)"
push --json '{"step":4}'
wait_lines "$work/c.out" 1
where_is_alice
node_log n2
node_log n3

# --- 5: n3 killed ----------------------------------------------------------------------
echo
echo "5. n3 is killed (SIGKILL); a push while alice has no node; she comes back on n1"
kill -KILL "${node_pid[n3]}"
wait "${node_pid[n3]}" 2>/dev/null || true
wait_for "$work/c.err" 'reconnecting'
kill -TERM "${listener_pid[c]}"
wait "${listener_pid[c]}" || true
push --json '{"step":5}'
listen d n1
wait_lines "$work/d.out" 1
push --json '{"step":5,"live":true}'
wait_lines "$work/d.out" 2
where_is_alice
node_log n1

# --- what alice received ---------------------------------------------------------------
echo
echo "alice received, listener by listener:"
all=""
for name in a b c d; do
    node=$(case $name in a) echo n1 ;; b) echo n2 ;; c) echo n3 ;; d) echo n1 ;; esac)
    echo "  on $node: $(serials "$work/$name.out")   $(sed -n 's/.*"content":\(.*\)}$/\1/p' "$work/$name.out" | tr '\n' ' ')"
    all="$all $(serials "$work/$name.out")"
done
all=$(echo "$all" | xargs)
expected=$(seq -s ' ' 1 9)
[ "$all" = "$expected" ] || fail "alice received '$all', expected '$expected'"
echo "  in all: $all: every push once, in order, no gap, no duplicate"
backend=PostgreSQL; [ "$engine" = redis ] && backend=Redis
awk -v from="$started" -v to="$(date +%s.%N)" -v backend="$backend" 'BEGIN { printf "done in %.1f s; stopping the nodes and %s\n", to - from, backend }'
