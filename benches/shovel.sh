#!/usr/bin/env bash
# Shovel throughput between two brokers of the same kind: N persistent messages
# queued on the source, a dynamic shovel (created through the management API)
# moving them to a queue on the destination, where lavinmqperf consumes them
# with acks. Runs for lavinmq (two processes) and, where Debian's
# rabbitmq-server is installed, for RabbitMQ (two private nodes with the
# shovel and management plugins), once per ack mode.
# Prints msgs/s from the shovel's creation to the last message consumed, and
# each broker's CPU time (user + system, from /proc) per message over the same
# span; the destination's includes serving the consumer.
#   N          messages per run (default 200000)    SIZE  body bytes (default 16)
#   ACK_MODES  default "on-confirm on-publish no-ack"
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-200000}
SIZE=${SIZE:-16}
ACK_MODES=${ACK_MODES:-"on-confirm on-publish no-ack"}

cargo build --release --bin lavinmq --bin lavinmqperf >&2
PERF=target/release/lavinmqperf
WORK=$(mktemp -d)
LAVINMQ_PIDS=()
RABBIT_BASES=()
cleanup() {
    local p b
    for p in "${LAVINMQ_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for b in "${RABBIT_BASES[@]}"; do
        RABBITMQ_COMPAT_BASE=$b RABBITMQ_COMPAT_NODENAME=$(cat "$b/node") scripts/stop-rabbitmq.sh >/dev/null 2>&1 || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

. benches/proc_cpu.sh
listener_pid() { ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2; }
wait_listening() {
    local _
    for _ in $(seq 100); do
        [ -n "$(listener_pid "$1")" ] && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

# start_lavinmq NAME AMQP_PORT HTTP_PORT: prints the broker's pid.
start_lavinmq() {
    mkdir -p "$WORK/$1"
    target/release/lavinmq -D "$WORK/$1" -p "$2" --http-port "$3" --metrics-http-port 0 --mqtt-port 0 --stream-port -1 \
        --control-unix-path "$WORK/$1.sock" >>"$WORK/$1.log" 2>&1 &
    LAVINMQ_PIDS+=($!)
    wait_listening "$2" && wait_listening "$3"
}

# start_rabbitmq NAME AMQP_PORT HTTP_PORT DIST_PORT
start_rabbitmq() {
    local base=$WORK/$1
    mkdir -p "$base"
    echo "$1@localhost" >"$base/node"
    echo '[rabbitmq_shovel, rabbitmq_management].' >"$base/enabled_plugins"
    printf 'loopback_users = none\nmanagement.tcp.port = %s\nmanagement.tcp.ip = 127.0.0.1\n' "$3" >"$base/rabbitmq.conf"
    RABBIT_BASES+=("$base")
    RABBITMQ_COMPAT_BASE=$base RABBITMQ_COMPAT_NODENAME=$1@localhost RABBITMQ_COMPAT_PORT=$2 \
        RABBITMQ_COMPAT_DIST_PORT=$4 scripts/start-rabbitmq.sh >&2
    wait_listening "$3"
}

# run BRAND MODE SRC_AMQP SRC_HTTP DST_AMQP
run() {
    local brand=$1 mode=$2 src=$3 http=$4 dst=$5
    local src_uri="amqp://guest:guest@127.0.0.1:$src" dst_uri="amqp://guest:guest@127.0.0.1:$dst"
    local q="shovel-$mode" src_pid dst_pid
    src_pid=$(listener_pid "$src")
    dst_pid=$(listener_pid "$dst")
    $PERF throughput --uri "$src_uri" -x 1 -y 0 -C "$N" -c 1000 -p -s "$SIZE" -u "$q-src" -q >/dev/null
    $PERF throughput --uri "$dst_uri" -x 0 -y 1 -D "$N" -a 100 -P 1000 -s "$SIZE" -u "$q-dst" -q >/dev/null &
    local consumer=$!
    sleep 1 # the consumer has declared its queue
    local t0 s0 d0 t1 s1 d1
    t0=$(date +%s.%N)
    s0=$(cpu_ticks "$src_pid")
    d0=$(cpu_ticks "$dst_pid")
    curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
        "http://127.0.0.1:$http/api/parameters/shovel/%2F/$q" \
        -d "{\"value\":{\"src-uri\":\"$src_uri\",\"src-queue\":\"$q-src\",\"dest-uri\":\"$dst_uri\",\"dest-queue\":\"$q-dst\",\"ack-mode\":\"$mode\",\"src-prefetch-count\":1000}}" >/dev/null
    wait "$consumer"
    t1=$(date +%s.%N)
    s1=$(cpu_ticks "$src_pid")
    d1=$(cpu_ticks "$dst_pid")
    curl -sf -u guest:guest -X DELETE "http://127.0.0.1:$http/api/parameters/shovel/%2F/$q" >/dev/null || true
    awk -v b="$brand" -v m="$mode" -v n="$N" -v t0="$t0" -v t1="$t1" -v tick="$CLK_TCK" \
        -v s="$((s1 - s0))" -v d="$((d1 - d0))" 'BEGIN {
        printf "%-9s %-11s %10.0f %14.2f %14.2f\n", b, m, n / (t1 - t0), s / tick * 1e6 / n, d / tick * 1e6 / n }'
}

printf "%-9s %-11s %10s %14s %14s\n" broker ack-mode msgs/s "src µs/msg" "dest µs/msg"
start_lavinmq src 5811 15811
start_lavinmq dst 5812 15812
for mode in $ACK_MODES; do run lavinmq "$mode" 5811 15811 5812; done
if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    start_rabbitmq shovel-src 5821 15821 25821
    start_rabbitmq shovel-dst 5822 15822 25822
    for mode in $ACK_MODES; do run rabbitmq "$mode" 5821 15821 5822; done
else
    echo "rabbitmq-server not installed: lavinmq only (scripts/start-rabbitmq.sh installs it)" >&2
fi
