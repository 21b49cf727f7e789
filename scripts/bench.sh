#!/usr/bin/env bash
# Tether's benchmark suite in one command: builds the Benchmarks package (release) and the C
# baseline, runs the matrix of echo servers {tether, nio, c} × load generators
# {tether, nio-handler, nio-async, c} over the scenarios, and prints markdown tables with
# Tether's ratio to each peer.
#
#   scripts/bench.sh [--quick] [--duration S] [--warmup S] [--repeat N]
#                    [--scenarios abcdefghtw] [--tether-executor default|loop] [--out FILE]
#
#   --quick       1 s runs, 1 repetition, scenarios a–d, only tether↔tether,
#                 nio↔nio-handler and c↔c
#   --duration S  measured seconds per run (default 4)
#   --warmup S    unmeasured seconds before each (default 1)
#   --repeat N    repetitions; runs are interleaved (A B C A B C …) (default 3)
#   --scenarios   which scenarios to run (default abcdefghtw; abcd with --quick)
#   --tether-executor default|loop
#                 where the Tether client's request tasks run: the global concurrent
#                 executor, as an application's tasks do (default), or their connection's
#                 event loop (withTaskExecutorPreference(connection.taskExecutor))
#   --out FILE    also write the report there
#
# Scenarios: a. 1 connection, 1 request in flight, 64 B; b. 1 connection, 100 in flight,
# 64 B; c. 100 connections × 10 in flight, 64 B; d. 1 connection, 4 in flight, 1 MiB;
# e. server memory per idle connection, 10,000 connections; f. push fan-out from one
# server to 1,000 clients; g. heap allocations per request (package-benchmark); h. sessions:
# replay of 100,000 stored pushes to one resuming client, and sequenced pushes to 1,000
# identified clients, SQLite, in-memory and PostgreSQL mailboxes (one server, and a cluster
# of three nodes) against plain broadcast (bench-sessions); t. b over TLS (1.3, a
# self-signed P-256 certificate made with openssl): Tether's TetherTLS (OpenSSL) and
# NIO's NIOSSL (BoringSSL), each with its own server and against the other's; w. b over
# WebSocket (binary messages, masked by the client): Tether's `ws://` endpoint and
# WebSocket port, and NIO's NIOWebSocket (HTTP/1.1 upgrade), each with its own server and
# against the other's, with b over plain TCP for Tether and NIO in the same repetition.
#
# All traffic stays on 127.0.0.1. Servers listen on random free high ports and are killed
# with SIGKILL when the script exits. Scenario h runs a throwaway PostgreSQL of its own
# (initdb in a temporary directory, as the postgres user when run as root, durable
# defaults: fsync and synchronous_commit on), stopped when the script exits.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
package="$root/Benchmarks"

quick=0
duration=4
warmup=1
repeat=3
scenarios=""
tether_executor=default
out=""
duration_set=0
warmup_set=0
repeat_set=0

usage() { sed -n '2,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) quick=1; shift ;;
        --duration) duration="$2"; duration_set=1; shift 2 ;;
        --warmup) warmup="$2"; warmup_set=1; shift 2 ;;
        --repeat) repeat="$2"; repeat_set=1; shift 2 ;;
        --scenarios) scenarios="$2"; shift 2 ;;
        --tether-executor) tether_executor="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
if [[ $quick == 1 ]]; then
    [[ $duration_set == 1 ]] || duration=1
    [[ $warmup_set == 1 ]] || warmup=0.5
    [[ $repeat_set == 1 ]] || repeat=1
    [[ -n $scenarios ]] || scenarios="abcd"
fi
[[ -n $scenarios ]] || scenarios="abcdefghtw"
if [[ $tether_executor != default && $tether_executor != loop ]]; then
    echo "bench.sh: --tether-executor takes default or loop, not $tether_executor" >&2
    exit 2
fi
if [[ ! $scenarios =~ ^[a-htw]+$ ]]; then
    echo "bench.sh: --scenarios takes letters a to h, t and w, not $scenarios" >&2
    exit 2
fi
has() { [[ $scenarios == *"$1"* ]]; }

# --- build -------------------------------------------------------------------------------
echo "==> building the Benchmarks package (release)" >&2
# SwiftPM keeps the source list of a path dependency in the build description: drop it, so
# a file added to the SDK is compiled. One retry: the SDK's sources may change under a
# build while someone edits them.
rm -f "$package/.build/release.yaml"
swift build -c release --package-path "$package" >&2 \
    || { echo "==> build failed; retrying once" >&2; sleep 2; swift build -c release --package-path "$package" >&2; }
bin="$(swift build -c release --package-path "$package" --show-bin-path)"
cbin="$package/.build/c"
mkdir -p "$cbin"
echo "==> building the C baseline" >&2
cc -O2 -Wall -Wextra -o "$cbin/server" "$package/c/server.c" -lpthread
cc -O2 -Wall -Wextra -o "$cbin/client" "$package/c/client.c" -lpthread
cc -O2 -Wall -Wextra -o "$cbin/idle" "$package/c/idle.c"
cc -O2 -Wall -Wextra -o "$cbin/fanout" "$package/c/fanout.c"

# 10,000 idle connections need as many descriptors on each side; scenario h holds both
# ends of 1,000 connections in one process.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
idle_connections=10000
if (( $(ulimit -n) < idle_connections + 256 )); then
    idle_connections=$(( $(ulimit -n) - 256 ))
    echo "bench.sh: open files are limited to $(ulimit -n); scenario e uses $idle_connections connections" >&2
fi

# --- servers -----------------------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-bench.XXXXXX")"
results="$work/results.txt"
: > "$results"
declare -A server_pid=() server_port=()
helper_pid=""

cleanup() {
    for pid in "${server_pid[@]}" $helper_pid; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    stop_postgres
    stop_redis
}
trap cleanup EXIT
trap 'exit 130' INT TERM

server_command() { # impl port
    case "$1" in
        tether) echo "$bin/bench-server --impl tether --port $2" ;;
        nio) echo "$bin/bench-server --impl nio --port $2" ;;
        tether-tls|nio-tls) echo "$bin/bench-server --impl ${1%-tls} --port $2 --tls-cert $work/tls/cert.pem --tls-key $work/tls/key.pem" ;;
        tether-ws|nio-ws) echo "$bin/bench-server --impl ${1%-ws} --port $2 --websocket $websocket_path" ;;
        c) echo "$cbin/server --port $2" ;;
    esac
}

# Starts a server on a random free port between 20000 and 32767 (below Linux's ephemeral
# range, so no client socket takes it), retrying when the port turns out to be taken.
start_server() { # impl
    local impl="$1" attempt port log pid
    for attempt in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 12768))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
        log="$work/server-$impl.log"
        # shellcheck disable=SC2046
        $(server_command "$impl" "$port") > "$log" 2>&1 &
        pid=$!
        for _ in $(seq 100); do
            if grep -q "^listening on 127.0.0.1:$port" "$log" 2>/dev/null; then
                server_pid[$impl]=$pid
                server_port[$impl]=$port
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    echo "bench.sh: cannot start the $impl server; its log:" >&2
    cat "$log" >&2
    exit 1
}

stop_server() { # impl
    local pid="${server_pid[$1]:-}"
    [[ -n $pid ]] || return 0
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "server_pid[$1]"
}

# --- PostgreSQL, for scenario h -----------------------------------------------------------
# A throwaway cluster: initdb in a temporary directory (as the postgres user when root:
# PostgreSQL refuses to run as root), user tether with trust authentication, listening on
# 127.0.0.1 and a free port only, with PostgreSQL's durable defaults (fsync on,
# synchronous_commit on, full_page_writes on). Each run gets a fresh database.
pg_dir="" pg_bin="" pg_port="" pg_settings="" pg_databases=0
as_postgres=()

start_postgres() {
    local attempt port
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
    [[ -n $pg_bin ]] || pg_bin="$(pg_config --bindir 2>/dev/null || true)"
    if [[ -z $pg_bin || ! -x $pg_bin/initdb ]]; then
        echo "bench.sh: PostgreSQL is not installed (no initdb): scenario h runs without its PostgreSQL rows" >&2
        return 1
    fi
    pg_dir="$(mktemp -d /tmp/tether-bench-pg.XXXXXX)"
    if [[ $(id -u) == 0 ]]; then
        chown postgres: "$pg_dir"
        as_postgres=(runuser -u postgres --)
    fi
    if ! "${as_postgres[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U tether --auth=trust -E UTF8 --locale=C \
            > "$work/initdb.log" 2>&1; then
        echo "bench.sh: initdb failed:" >&2
        tail -5 "$work/initdb.log" >&2
        exit 1
    fi
    for attempt in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 12768))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
        if "${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w -t 60 \
                -o "-h 127.0.0.1 -p $port -k $pg_dir -c max_connections=200" start > /dev/null 2>&1; then
            pg_port=$port
            pg_settings="$("$pg_bin/psql" -h 127.0.0.1 -p "$pg_port" -U tether -d postgres -At -F ' ' -c \
                "SELECT 'PostgreSQL ' || current_setting('server_version') || ', fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit') || ', full_page_writes=' || current_setting('full_page_writes') || ', shared_buffers=' || current_setting('shared_buffers')")"
            pg_settings+=", data directory on $(df --output=source,fstype "$pg_dir" 2>/dev/null | tail -1 | tr -s ' ')"
            echo "==> PostgreSQL on 127.0.0.1:$pg_port ($pg_settings)" >&2
            return 0
        fi
        grep -qE 'could not bind|Address already in use' "$pg_dir/log" 2>/dev/null || break
    done
    echo "bench.sh: PostgreSQL did not start; its log:" >&2
    tail -10 "$pg_dir/log" >&2 || true
    exit 1
}

# Stops the server (immediate shutdown, then SIGKILL if it is still there) and removes its
# directory. Safe to call more than once.
stop_postgres() {
    [[ -n $pg_dir ]] || return 0
    local pid
    pid="$(head -n 1 "$pg_dir/data/postmaster.pid" 2>/dev/null || true)"
    if [[ -n $pid ]]; then
        "${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate -w -t 10 stop > /dev/null 2>&1 || true
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$pg_dir"
    pg_dir=""
}

# A throwaway redis-server for scenario h's Redis rows: on 127.0.0.1 and a free port, its
# files in a temporary directory, with the append-only file synced on every write
# (appendfsync always), the durability the PostgreSQL rows have (each commit synced). Each
# run keeps its keys under a prefix of its own (bench-sessions makes one).
redis_dir="" redis_pid="" redis_url="" redis_settings=""

start_redis() {
    local attempt port
    if ! command -v redis-server > /dev/null 2>&1; then
        echo "bench.sh: redis-server is not installed: scenario h runs without its Redis rows" >&2
        return 1
    fi
    redis_dir="$(mktemp -d /tmp/tether-bench-redis.XXXXXX)"
    for attempt in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 12768))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
        redis-server --port "$port" --bind 127.0.0.1 --dir "$redis_dir" --save '' \
            --appendonly yes --appendfsync always > "$redis_dir/log" 2>&1 &
        redis_pid=$!
        for _ in $(seq 100); do
            grep -q 'Ready to accept connections' "$redis_dir/log" 2>/dev/null && break
            sleep 0.05
        done
        if grep -q 'Ready to accept connections' "$redis_dir/log"; then
            redis_url="redis://127.0.0.1:$port"
            redis_settings="Redis $(redis-server --version | awk '{print $3}' | sed 's/v=//'), appendonly yes, appendfsync always"
            echo "==> Redis on 127.0.0.1:$port ($redis_settings)" >&2
            return 0
        fi
        kill -KILL "$redis_pid" 2>/dev/null || true
    done
    echo "bench.sh: redis-server did not start; its log:" >&2
    tail -5 "$redis_dir/log" >&2 || true
    return 1
}

stop_redis() {
    [[ -n $redis_dir ]] || return 0
    [[ -z $redis_pid ]] || kill -KILL "$redis_pid" 2>/dev/null || true
    rm -rf "$redis_dir"
    redis_dir="" redis_pid=""
}

# A fresh, empty database for one run; its URL in $database. (Not in a subshell: the
# count of databases made must last.)
fresh_database() {
    pg_databases=$((pg_databases + 1))
    "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U tether "bench_$pg_databases"
    database="postgresql://tether@127.0.0.1:$pg_port/bench_$pg_databases"
}

drop_database() {
    "$pg_bin/dropdb" -h 127.0.0.1 -p "$pg_port" -U tether --if-exists "bench_$pg_databases" 2>/dev/null || true
}

# --- runs --------------------------------------------------------------------------------
# w: the request path of the WebSocket servers' upgrade.
websocket_path=/tether

scenario_args() {
    case "$1" in
        a) echo "--connections 1 --in-flight 1 --size 64" ;;
        b) echo "--connections 1 --in-flight 100 --size 64" ;;
        c) echo "--connections 100 --in-flight 10 --size 64" ;;
        d) echo "--connections 1 --in-flight 4 --size 1048576" ;;
        t) echo "--connections 1 --in-flight 100 --size 64 --tls-ca $work/tls/cert.pem" ;;
        w) echo "--connections 1 --in-flight 100 --size 64" ;;
    esac
}

client_command() { # impl port
    case "$1" in
        c) echo "$cbin/client --port $2" ;;
        tether|tether-pipeline) echo "$bin/bench-client --impl $1 --executor $tether_executor --host 127.0.0.1 --port $2" ;;
        *) echo "$bin/bench-client --impl $1 --host 127.0.0.1 --port $2" ;;
    esac
}

if [[ $quick == 1 ]]; then
    pairs="tether:tether nio:nio-handler c:c"
else
    pairs=""
    for server in tether nio c; do
        for client in tether nio-handler nio-async c; do
            pairs+=" $server:$client"
        done
    done
    # Connection.pipeline: K requests at a time, in scenarios b and c only.
    pairs+=" tether:tether-pipeline c:tether-pipeline"
fi
servers_used="$(for pair in $pairs; do echo "${pair%%:*}"; done | sort -u | tr '\n' ' ')"

run_one() { # rep scenario server client
    local rep="$1" scenario="$2" server="$3" client="$4" output status line
    local limit over=""
    # A WebSocket server (tether-ws, nio-ws) is reached at ws://127.0.0.1:PORT/tether.
    [[ $server != *-ws ]] || over="--websocket $websocket_path"
    limit=$(awk -v d="$duration" -v w="$warmup" 'BEGIN { printf "%d", d + w + 40 }')
    # shellcheck disable=SC2046
    if output=$(timeout -s KILL "$limit" $(client_command "$client" "${server_port[$server]}") \
            $(scenario_args "$scenario") $over --duration "$duration" --warmup "$warmup" 2>"$work/client.err"); then
        status=ok
    else
        status="failed(rc=$?)"
    fi
    line=$(grep '^RESULT ' <<<"$output" | tail -1 || true)
    [[ -n $line ]] || status="failed(no-result)"
    echo "RUN rep=$rep scenario=$scenario server=$server client=$client status=$status $line" >> "$results"
    local brief
    brief=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(rps|mbps|p50_us|p99_us|errors)=/) printf "%s ", $i }' <<<"$line")
    printf '  %s  %-7s %-12s %s %s\n' "$scenario" "$server" "$client" "$status" "$brief" >&2
    if [[ $status != ok ]]; then
        sed 's/^/      client: /' "$work/client.err" | tail -5 >&2
    fi
    # A server that died is reported and restarted so the rest of the matrix still runs.
    if ! kill -0 "${server_pid[$server]}" 2>/dev/null; then
        echo "RUN rep=$rep scenario=$scenario server=$server client=$client status=server-died" >> "$results"
        echo "      the $server server died; its log:" >&2
        tail -5 "$work/server-$server.log" | sed 's/^/      /' >&2
        wait "${server_pid[$server]}" 2>/dev/null || true
        start_server "$server"
    fi
}

# t: a self-signed certificate for localhost and 127.0.0.1, which the clients trust.
make_certificate() {
    [[ -f $work/tls/cert.pem ]] && return 0
    mkdir -p "$work/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$work/tls/key.pem" -out "$work/tls/cert.pem" 2>/dev/null
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# e: a fresh server, warmed by 100 connections that come and go, then 10,000 idle ones.
run_idle() { # rep server
    local rep="$1" server="$2" before after status=ok line=""
    start_server "$server"
    local port="${server_port[$server]}" pid="${server_pid[$server]}"
    for count in 100 "$idle_connections"; do
        "$cbin/idle" --port "$port" --connections "$count" > "$work/idle.out" 2>&1 &
        helper_pid=$!
        for _ in $(seq 1200); do
            grep -q '^ready' "$work/idle.out" && break
            kill -0 "$helper_pid" 2>/dev/null || break
            sleep 0.05
        done
        if ! grep -q '^ready' "$work/idle.out"; then
            status="failed($(tail -1 "$work/idle.out" | tr ' ' '_'))"
        elif [[ $count == 100 ]]; then
            :
        else
            sleep 1
            after=$(rss_kib "$pid")
        fi
        kill -KILL "$helper_pid" 2>/dev/null || true
        wait "$helper_pid" 2>/dev/null || true
        helper_pid=""
        [[ $status == ok ]] || break
        if [[ $count == 100 ]]; then
            sleep 0.5
            before=$(rss_kib "$pid")
        fi
    done
    if [[ $status == ok ]]; then
        line="RESULT conns=$idle_connections rss_before_kib=$before rss_after_kib=$after bytes_per_conn=$(( (after - before) * 1024 / idle_connections ))"
    fi
    echo "RUN rep=$rep scenario=e server=$server client=idle status=$status $line" >> "$results"
    printf '  e  %-7s %-12s %s %s\n' "$server" idle "$status" "${line#RESULT }" >&2
    stop_server "$server"
}

# f: the running server pushes to 1,000 clients, 10 rounds of 64 B per request.
run_fanout() { # rep server
    local rep="$1" server="$2" output status line limit
    limit=$(awk -v d="$duration" -v w="$warmup" 'BEGIN { printf "%d", d + w + 40 }')
    if output=$(timeout -s KILL "$limit" "$cbin/fanout" --port "${server_port[$server]}" --connections 1000 \
            --rounds 10 --size 64 --duration "$duration" --warmup "$warmup" 2>"$work/client.err"); then
        status=ok
    else
        status="failed(rc=$?)"
    fi
    line=$(grep '^RESULT ' <<<"$output" | tail -1 || true)
    [[ -n $line ]] || status="failed(no-result)"
    echo "RUN rep=$rep scenario=f server=$server client=fanout status=$status $line" >> "$results"
    printf '  f  %-7s %-12s %s %s\n' "$server" fanout "$status" "$(grep -o 'nps=[0-9]*' <<<"$line")" >&2
    [[ $status == ok ]] || sed 's/^/      client: /' "$work/client.err" | tail -5 >&2
}

# g: package-benchmark's malloc counts per request, once (they do not vary between runs).
run_allocations() {
    local log="$work/allocations.log" status=ok
    echo "  g  package-benchmark (allocations per request; builds its tool the first time)" >&2
    if ! swift package --package-path "$package" benchmark --target TetherBenchmarks --no-progress > "$log" 2>&1; then
        status="failed"
        tail -20 "$log" | sed 's/^/      /' >&2
    fi
    awk -F'│' -v status="$status" '
        /round trip/ && !/│/ { name = $0 }
        /Malloc \(total\)/ {
            gsub(/ /, "", $5)
            side = name ~ /^client round trip on its loop/ ? "client-loop" : name ~ /^client round trip/ ? "client" : name ~ /^server round trip/ ? "server" : "both"
            printf "RUN rep=1 scenario=g server=tether client=%s status=%s RESULT mallocs=%s\n", side, status, $5
        }' "$log" >> "$results"
    grep 'scenario=g' "$results" | sed 's/^.*client=/      /' >&2 || true
}

# h: bench-sessions, servers and clients in one process, one case per run. Replay of a full
# mailbox to one client, from SQLite, memory and PostgreSQL, then pushes to 1,000
# identified clients (one pusher, then 4 at once) with SQLite, in memory, PostgreSQL behind
# one server, a cluster of three nodes on PostgreSQL (pushes by the nodes in turn, then by a
# publisher with no connection), and plain broadcast. Every PostgreSQL run gets a fresh
# database. The in-memory pushes are fast enough to take more rounds for a measurable time.
# Beside them, the same fan-out through channels: 1,000 clients on one channel, and on 100
# channels of 10, each message published once per channel (server.publish(_:to:)); with
# PostgreSQL, the same on a cluster of three nodes whose channels are on the database
# (channel3: clients spread over the nodes, channels published through them in turn).
session_runs="replay:sqlite replay:memory push:sqlite push:memory push:broadcast channel:1 channel:100"

run_sessions() { # rep
    local rep="$1" run store kind args expected output status line client this database rounds
    for run in $session_runs; do
        kind="${run%%:*}" store="${run##*:}" database=""
        if [[ $kind == replay ]]; then
            args="--messages 100000 --batch 1000"
            expected="replay"
        elif [[ $kind == channel ]]; then
            args="--clients 1000 --channels $store --rounds 400 --warmup 5"
            expected="channel"
        elif [[ $kind == channel3 ]]; then
            fresh_database
            args="--clients 1000 --channels $store --rounds 30 --warmup 3 --store postgres --postgres $database --nodes 3"
            expected="channel"
            kind=channel store="postgres-3-ch$store"
        elif [[ $kind == claims ]]; then
            # Both ends of every connection are in the process: as many as the limit allows,
            # up to 10,000.
            local most=$(( ($(ulimit -n) - 256) / 2 ))
            args="--clients $(( most < 10000 ? most : 10000 )) --timeout 120"
            expected="claims"
            case "$store" in
                postgres) fresh_database; args+=" --store postgres --postgres $database --nodes 1" ;;
                redis) args+=" --store redis --redis $redis_url --nodes 1" ;;
            esac
            store="claims-$store"
        elif [[ $kind == channel3redis ]]; then
            args="--clients 1000 --channels $store --rounds 30 --warmup 3 --store redis --redis $redis_url --nodes 3"
            expected="channel"
            kind=channel store="redis-3-ch$store"
        else
            case "$store" in
                memory) rounds=400 ;;
                postgres*|redis*) rounds=30 ;;
                *) rounds=100 ;;
            esac
            args="--clients 1000 --rounds $rounds --warmup 5"
            expected="push1 push4"
        fi
        case "$store" in
            postgres) fresh_database; args+=" --store postgres --postgres $database" ;;
            postgres-3) fresh_database; args+=" --store postgres --postgres $database --nodes 3" ;;
            postgres-3-pub) fresh_database; args+=" --store postgres --postgres $database --nodes 3 --from publisher" ;;
            postgres-3-ch*|redis-3-ch*|claims-*) ;;
            redis) args+=" --store redis --redis $redis_url" ;;
            redis-3) args+=" --store redis --redis $redis_url --nodes 3" ;;
            redis-3-pub) args+=" --store redis --redis $redis_url --nodes 3 --from publisher" ;;
            *) [[ $kind == channel ]] || args+=" --store $store" ;;
        esac
        # shellcheck disable=SC2086
        if output=$(timeout -s KILL 180 "$bin/bench-sessions" --case "$kind" --size 64 --timeout 60 $args \
                2>"$work/client.err"); then
            status=ok
        else
            status="failed(rc=$?)"
        fi
        [[ -z $database ]] || drop_database
        for client in $expected; do
            if [[ $client == replay ]]; then
                line=$(grep '^RESULT case=replay ' <<<"$output" | tail -1 || true)
            elif [[ $client == channel ]]; then
                line=$(grep '^RESULT case=channel ' <<<"$output" | tail -1 || true)
            elif [[ $client == claims ]]; then
                line=$(grep '^RESULT case=claims ' <<<"$output" | tail -1 || true)
            else
                line=$(grep "^RESULT case=push .* pushers=${client#push} " <<<"$output" | tail -1 || true)
            fi
            this="$status"
            [[ -n $line ]] || this="failed(no-result)"
            echo "RUN rep=$rep scenario=h server=$store client=$client status=$this $line" >> "$results"
            printf '  h  %-14s %-7s %s %s\n' "$store" "$client" "$this" \
                "$(grep -oE ' (fill_aps|nps|cps|clients|p99_us|call_p99_us|seconds)=[0-9.]*' <<<"$line" | tr -d '\n')" >&2
        done
        [[ $status == ok ]] || sed 's/^/      bench-sessions: /' "$work/client.err" | tail -5 >&2
    done
}

if has h && start_postgres; then
    session_runs="replay:sqlite replay:memory replay:postgres push:sqlite push:memory push:postgres push:postgres-3 push:postgres-3-pub push:broadcast channel:1 channel:100 channel3:1 channel3:100 claims:postgres"
fi
if has h && start_redis; then
    session_runs+=" replay:redis push:redis push:redis-3 push:redis-3-pub channel3redis:1 channel3redis:100 claims:redis"
fi

echo "==> running: scenarios $scenarios, ${duration}s (+${warmup}s warm-up) per run, $repeat repetition(s)" >&2
for rep in $(seq "$repeat"); do
    echo "--- repetition $rep of $repeat" >&2
    if has a || has b || has c || has d || has f || has t || has w; then
        if has a || has b || has c || has d; then
            for server in $servers_used; do start_server "$server"; done
        fi
        for scenario in a b c d; do
            has "$scenario" || continue
            for pair in $pairs; do
                if [[ ${pair##*:} == tether-pipeline && $scenario != b && $scenario != c ]]; then continue; fi
                run_one "$rep" "$scenario" "${pair%%:*}" "${pair##*:}"
            done
        done
        if has t; then
            make_certificate
            for server in tether-tls nio-tls; do start_server "$server"; done
            for pair in tether-tls:tether nio-tls:nio-handler tether-tls:nio-handler nio-tls:tether; do
                run_one "$rep" t "${pair%%:*}" "${pair##*:}"
            done
            stop_server tether-tls
            stop_server nio-tls
        fi
        if has w; then
            # b over WebSocket, each client against its own server and the other's, with b
            # over plain TCP for the same two stacks in between: ratios within one repetition.
            for server in tether-ws nio-ws tether nio; do
                [[ -n ${server_pid[$server]:-} ]] || start_server "$server"
            done
            for pair in tether-ws:tether nio-ws:nio-handler tether:tether nio:nio-handler tether-ws:nio-handler nio-ws:tether; do
                run_one "$rep" w "${pair%%:*}" "${pair##*:}"
            done
            stop_server tether-ws
            stop_server nio-ws
        fi
        if has f; then
            for server in tether nio; do
                [[ -n ${server_pid[$server]:-} ]] || start_server "$server"
                run_fanout "$rep" "$server"
            done
        fi
        for server in "${!server_pid[@]}"; do stop_server "$server"; done
    fi
    if has e; then
        for server in tether nio c; do run_idle "$rep" "$server"; done
    fi
    if has h; then run_sessions "$rep"; fi
done
stop_postgres
stop_redis
if has g; then run_allocations; fi

# --- report ------------------------------------------------------------------------------
{
    echo "## Tether benchmarks"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC') · $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')) · $(swift --version 2>/dev/null | head -1) · commit $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo
    [[ -z $pg_settings ]] || { echo "Scenario h's database: $pg_settings; on 127.0.0.1, started for this run."; echo; }
    [[ -z $redis_settings ]] || { echo "Scenario h's Redis: $redis_settings; on 127.0.0.1, started for this run."; echo; }
    echo "Client and server on the same machine over loopback. Each run: ${warmup} s warm-up, ${duration} s measured; $repeat repetition(s), interleaved. Tether client tasks on the $tether_executor executor. Raw results: \`$results\`."
    echo
    "$bin/bench-report" "$results"
} > "$work/report.md"
[[ -z $out ]] || cp "$work/report.md" "$out"
cat "$work/report.md"
