#!/usr/bin/env bash
# AMQP 1.0 side by side: `lavinmqperf amqp1 throughput` (one sender, one
# receiver, 16-byte transient messages, pre-settled, and unsettled with a
# link credit of 1,000) against lavinmq, beside lavinmq's AMQP 0-9-1 figures
# for the same shapes (`lavinmqperf throughput`: no-ack; confirms and acks
# with 1,000 in flight), and, when Debian's rabbitmq-server is installed,
# against RabbitMQ with its AMQP 1.0 plugin (a private node with its own name
# and ports, started by scripts/start-rabbitmq.sh; RabbitMQ 3's addresses),
# alternating, ROUNDS rounds. Prints medians of the consume rate and of each
# broker's CPU time per message (user + system time of the broker process
# over the run, from /proc, divided by the messages consumed), and the
# ratios the AMQP 1.0 issue sets targets for.
#   DURATION  seconds per run (default 8)    ROUNDS  rounds (default 3)
#   LPORT     lavinmq's AMQP port (default 5694)  RPORT  RabbitMQ's (5695)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/proc_cpu.sh

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
LPORT=${LPORT:-5694}
RPORT=${RPORT:-5695}
RBASE=${RBASE:-/tmp/rabbitmq-amqp1-bench}
RNODE=amqp1bench@localhost
WORK=$(mktemp -d)
LPID=
RABBIT=

cleanup() {
    if [ -n "$LPID" ]; then kill "$LPID" 2>/dev/null || true; fi
    if [ -n "$RABBIT" ]; then
        HOME="$RBASE/home" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RNODE" stop >/dev/null 2>&1 || true
    fi
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --bins >&2
PERF=target/release/lavinmqperf

target/release/lavinmq -D "$WORK/data" -b 127.0.0.1 -p "$LPORT" --http-port 0 --metrics-http-port -1 \
    --mqtt-port 0 --stream-port -1 --amqps-port -1 --mqtts-port -1 \
    --control-unix-path "$WORK/ctl.sock" >"$WORK/lavinmq.log" 2>&1 &
LPID=$!
sleep 1

RPID=
if command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ]; then
    mkdir -p "$RBASE"
    echo '[rabbitmq_amqp1_0].' >"$RBASE/enabled_plugins"
    RABBITMQ_COMPAT_BASE="$RBASE" RABBITMQ_COMPAT_NODENAME="$RNODE" RABBITMQ_COMPAT_PORT="$RPORT" \
        RABBITMQ_COMPAT_DIST_PORT=25695 scripts/start-rabbitmq.sh >&2
    RABBIT=1
    RPID=$(HOME="$RBASE/home" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RNODE" eval 'os:getpid().' 2>/dev/null | tr -dc '0-9')
else
    echo "rabbitmq-server not installed: lavinmq only" >&2
fi

# run NAME PID -- lavinmqperf arguments: prints "NAME rate us_per_msg".
run() {
    local name=$1 pid=$2
    shift 3
    local t0 t1 out rate consumed
    write_back_dirty
    t0=$(cpu_ticks "$pid")
    out=$(timeout $((DURATION + 30)) "$PERF" "$@" -z "$DURATION" -q 2>&1 || true)
    t1=$(cpu_ticks "$pid")
    rate=$(echo "$out" | awk '/Average consume rate/ {print $4}')
    consumed=$(echo "$out" | awk '/Total consumed/ {print $3}')
    # The 0-9-1 mode prints no totals: its rate over the run stands for them.
    if [ -z "$consumed" ] && [ -n "$rate" ]; then
        consumed=$((rate * DURATION))
    fi
    if [ -z "$consumed" ] || [ "$consumed" = 0 ]; then
        echo "$name failed failed"
        return
    fi
    echo "$name $rate $(echo "scale=3; ($t1 - $t0) * 1000000 / $CLK_TCK / $consumed" | bc)"
}

L="amqp://guest:guest@127.0.0.1:$LPORT/%2f"
R="amqp://guest:guest@127.0.0.1:$RPORT/%2f"
results=$WORK/results
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round" >&2
    run lavinmq-amqp1-settled "$LPID" -- amqp1 throughput --uri "$L" -u bench-settled --settled >>"$results"
    run lavinmq-amqp1-unsettled "$LPID" -- amqp1 throughput --uri "$L" -u bench-unsettled --credit 1000 >>"$results"
    run lavinmq-amqp091-noack "$LPID" -- throughput --uri "$L" -u bench-noack >>"$results"
    run lavinmq-amqp091-confirms "$LPID" -- throughput --uri "$L" -u bench-confirms -c 1000 -a 100 -P 1000 >>"$results"
    if [ -n "$RPID" ]; then
        run rabbitmq-amqp1-settled "$RPID" -- amqp1 throughput --uri "$R" --address-version 1 \
            -u bench-settled --settled >>"$results"
        run rabbitmq-amqp1-unsettled "$RPID" -- amqp1 throughput --uri "$R" --address-version 1 \
            -u bench-unsettled --credit 1000 >>"$results"
    fi
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR + 1) / 2)]}'; }
col() { awk -v n="$1" -v c="$2" '$1 == n && $c != "failed" {print $c}' "$results" | median; }
ratio() { if [ "$2" = - ] || [ "$1" = - ]; then echo -; else echo "scale=2; $1 / $2" | bc; fi; }

printf '%-28s %14s %14s\n' scenario "msgs/s" "CPU us/msg"
for name in lavinmq-amqp1-settled lavinmq-amqp091-noack rabbitmq-amqp1-settled \
    lavinmq-amqp1-unsettled lavinmq-amqp091-confirms rabbitmq-amqp1-unsettled; do
    printf '%-28s %14s %14s\n' "$name" "$(col "$name" 2)" "$(col "$name" 3)"
done
for pair in "settled noack" "unsettled confirms"; do
    set -- $pair
    echo "$1: AMQP 1.0 / 0-9-1 rate $(ratio "$(col "lavinmq-amqp1-$1" 2)" "$(col "lavinmq-amqp091-$2" 2)")," \
        "CPU per message $(ratio "$(col "lavinmq-amqp1-$1" 3)" "$(col "lavinmq-amqp091-$2" 3)");" \
        "lavinmq / RabbitMQ rate $(ratio "$(col "lavinmq-amqp1-$1" 2)" "$(col "rabbitmq-amqp1-$1" 2)")"
done
