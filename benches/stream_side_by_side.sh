#!/usr/bin/env bash
# Streams side by side: `lavinmqperf stream throughput` (RabbitMQ's stream
# protocol, 12-byte messages, publish frames of 100 messages, credit per
# chunk) against lavinmq and, when Debian's rabbitmq-server is installed,
# against RabbitMQ with its stream plugin (a private node with its own name
# and ports, started by scripts/start-rabbitmq.sh), alternating, ROUNDS
# rounds; prints medians of the consume rate and of each broker's CPU time
# per message (user + system time of the broker process over the run, from
# /proc, divided by the messages consumed), and the ratios. Scenarios: one
# publisher and one consumer; one publisher and ten consumers of the stream;
# and, for lavinmq only, AMQP 0-9-1 into and out of a stream queue
# (`lavinmqperf throughput` with x-queue-type=stream) as the reference the
# stream protocol is compared with.
#
# lavinmq confirms a publish once the group commit has synced it; RabbitMQ's
# streams confirm once the chunk is written (and replicated), never fsyncing
# it. The publisher's window of unconfirmed messages makes the sync's latency
# part of the rate, so a second lavinmq started with --no-sync (confirm once
# written, as RabbitMQ does) runs the same scenarios: the rows "nosync" are
# the comparison at equal durability.
#   DURATION  seconds per run (default 8)    ROUNDS  rounds (default 3)
#   SPORT     lavinmq's stream port (default 5562)  RSPORT  RabbitMQ's (5563)
#   NSPORT    the --no-sync lavinmq's (default 5564)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
SPORT=${SPORT:-5562}
RSPORT=${RSPORT:-5563}
NSPORT=${NSPORT:-5564}
LAPORT=${LAPORT:-5692}
RBASE=${RBASE:-/tmp/rabbitmq-stream-bench}
RNODE=streambench@localhost
WORK=$(mktemp -d)
LPID=
NPID=
RABBIT=

cleanup() {
    if [ -n "$LPID" ]; then kill "$LPID" 2>/dev/null || true; fi
    if [ -n "$NPID" ]; then kill "$NPID" 2>/dev/null || true; fi
    if [ -n "$RABBIT" ]; then
        HOME="$RBASE/home" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RNODE" stop >/dev/null 2>&1 || true
    fi
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --bins >&2
PERF=target/release/lavinmqperf

target/release/lavinmq -D "$WORK/data" -p "$LAPORT" --http-port 0 --metrics-http-port -1 --mqtt-port 0 \
    --stream-port "$SPORT" --control-unix-path "$WORK/ctl.sock" >"$WORK/lavinmq.log" 2>&1 &
LPID=$!
target/release/lavinmq -D "$WORK/nosync" -p 0 --http-port 0 --metrics-http-port -1 --mqtt-port 0 \
    --stream-port "$NSPORT" --no-sync --control-unix-path "$WORK/nosync.sock" >"$WORK/nosync.log" 2>&1 &
NPID=$!
sleep 1

RPID=
if command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ]; then
    mkdir -p "$RBASE"
    echo '[rabbitmq_stream].' >"$RBASE/enabled_plugins"
    cat >"$RBASE/rabbitmq.conf" <<CONF
loopback_users = none
stream.listeners.tcp.1 = 127.0.0.1:$RSPORT
stream.advertised_host = 127.0.0.1
CONF
    RABBITMQ_COMPAT_BASE="$RBASE" RABBITMQ_COMPAT_NODENAME="$RNODE" RABBITMQ_COMPAT_PORT=5693 \
        RABBITMQ_COMPAT_DIST_PORT=25693 scripts/start-rabbitmq.sh >&2
    RABBIT=1
    RPID=$(HOME="$RBASE/home" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RNODE" eval 'os:getpid().' 2>/dev/null | tr -dc '0-9')
else
    echo "rabbitmq-server not installed: lavinmq only" >&2
fi

# shellcheck disable=SC1091 source=benches/proc_cpu.sh
. benches/proc_cpu.sh

# run NAME PID -- lavinmqperf arguments: prints "NAME rate us_per_msg".
run() {
    local name=$1 pid=$2
    shift 3
    local t0 t1 out consumed rate
    write_back_dirty
    t0=$(cpu_ticks "$pid")
    out=$(timeout $((DURATION + 30)) "$PERF" "$@" -z "$DURATION" -q 2>&1 || true)
    t1=$(cpu_ticks "$pid")
    consumed=$(echo "$out" | awk '/Total consumed/ {print $3}')
    rate=$(echo "$out" | awk '/Average consume rate/ {print $4}')
    # The AMQP mode prints no totals: its rate over the run stands for them.
    if [ -z "$consumed" ] && [ -n "$rate" ]; then
        consumed=$((rate * DURATION))
    fi
    if [ -z "$consumed" ] || [ "$consumed" = 0 ]; then
        echo "$name failed failed"
        return
    fi
    echo "$name $rate $(echo "scale=3; ($t1 - $t0) * 10000 / $consumed" | bc)"
}

results=$WORK/results
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round" >&2
    for scenario in 1x1 1x10; do
        y=${scenario#1x}
        run "lavinmq-$scenario" "$LPID" -- stream throughput -u "rabbitmq-stream://guest:guest@127.0.0.1:$SPORT/%2f" \
            --stream "bench-$scenario" -y "$y" -s 12 >>"$results"
        run "nosync-$scenario" "$NPID" -- stream throughput -u "rabbitmq-stream://guest:guest@127.0.0.1:$NSPORT/%2f" \
            --stream "bench-$scenario" -y "$y" -s 12 >>"$results"
        if [ -n "$RPID" ]; then
            run "rabbitmq-$scenario" "$RPID" -- stream throughput -u "rabbitmq-stream://guest:guest@127.0.0.1:$RSPORT/%2f" \
                --stream "bench-$scenario" -y "$y" -s 12 >>"$results"
        fi
    done
    run "lavinmq-amqp091-1x1" "$LPID" -- throughput --uri "amqp://guest:guest@127.0.0.1:$LAPORT/%2f" \
        --queue bench-amqp-stream --queue-args '{"x-queue-type":"stream"}' --consumer-args '{"x-stream-offset":"next"}' \
        -P 1000 -a 100 -s 12 >>"$results"
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR + 1) / 2)]}'; }
col() { awk -v n="$1" -v c="$2" '$1 == n && $c != "failed" {print $c}' "$results" | median; }

printf '%-22s %14s %14s\n' scenario "msgs/s" "CPU us/msg"
for name in lavinmq-1x1 nosync-1x1 rabbitmq-1x1 lavinmq-1x10 nosync-1x10 rabbitmq-1x10 lavinmq-amqp091-1x1; do
    printf '%-22s %14s %14s\n' "$name" "$(col "$name" 2)" "$(col "$name" 3)"
done
if [ -n "$RPID" ]; then
    for s in 1x1 1x10; do
        l=$(col "lavinmq-$s" 2) r=$(col "rabbitmq-$s" 2) lc=$(col "lavinmq-$s" 3) rc=$(col "rabbitmq-$s" 3)
        echo "$s: rate ratio $(echo "scale=2; $l / $r" | bc), CPU per message ratio $(echo "scale=2; $lc / $rc" | bc)"
        n=$(col "nosync-$s" 2) nc=$(col "nosync-$s" 3)
        echo "$s, both confirming once written (--no-sync): rate ratio $(echo "scale=2; $n / $r" | bc), CPU per message ratio $(echo "scale=2; $nc / $rc" | bc)"
    done
fi
l=$(col lavinmq-1x1 2) a=$(col lavinmq-amqp091-1x1 2)
echo "stream protocol / AMQP 0-9-1 into the same kind of stream: $(echo "scale=2; $l / $a" | bc)"
