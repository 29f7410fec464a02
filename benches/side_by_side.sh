#!/usr/bin/env bash
# Side-by-side benchmark: the same lavinmqperf scenarios against lavinmq and, when
# Debian's rabbitmq-server is installed, against RabbitMQ (its own node name, data
# dir and ports, see scripts/start-rabbitmq.sh), alternating, ROUNDS rounds.
# Prints the median of each scenario, the ratio ours/RabbitMQ, and RSS figures.
#   DURATION  seconds per run (default 5)    ROUNDS  rounds (default 3)
#   BACKLOG   messages for the consume-only scenario (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
BACKLOG=${BACKLOG:-1000000}
LPORT=${LPORT:-5799}

cargo build --release --bin lavinmq --bin lavinmqperf >&2
PERF=target/release/lavinmqperf
DATA=$(mktemp -d)
RESULTS=$(mktemp)
cleanup() {
    [ -n "${LPID:-}" ] && kill "$LPID" 2>/dev/null || true
    [ "${RMQ:-0}" = 1 ] && scripts/stop-rabbitmq.sh >/dev/null 2>&1 || true
    rm -rf "$DATA" "$RESULTS"
}
trap cleanup EXIT

target/release/lavinmq -D "$DATA" -p "$LPORT" --http-port 0 --metrics-http-port 0 >"$DATA.log" 2>&1 &
LPID=$!
for _ in $(seq 100); do grep -q "AMQP listening" "$DATA.log" 2>/dev/null && break; sleep 0.1; done
URI_L="amqp://guest:guest@127.0.0.1:$LPORT"

RMQ=0
if command -v rabbitmq-server >/dev/null 2>&1 && scripts/start-rabbitmq.sh >&2; then
    RMQ=1
    URI_R="amqp://guest:guest@127.0.0.1:5682"
    # The Erlang VM listening on RabbitMQ's AMQP port, for its RSS.
    RPID=$(ss -ltnpH 'sport = :5682' 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
    RPID=${RPID:-0}
else
    echo "rabbitmq-server not installed: measuring lavinmq only" >&2
fi

rss_kb() {
    local kb
    kb=$(awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
    echo "${kb:-0}"
}

# Runs lavinmqperf, samples the broker's peak RSS meanwhile, appends a result line:
# scenario broker rate peak_rss_kb
run() {
    local scenario=$1 broker=$2 uri=$3 pid=$4 field=$5
    shift 5
    local out peak=0
    "$PERF" "$@" --uri "$uri" -q -j >"$RESULTS.out" 2>/dev/null &
    local perf=$!
    while kill -0 "$perf" 2>/dev/null; do
        local r
        r=$(rss_kb "$pid")
        [ "$r" -gt "$peak" ] && peak=$r
        sleep 0.5
    done
    wait "$perf" || true
    out=$(tail -1 "$RESULTS.out")
    local rate
    rate=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['$field'])" "$out" 2>/dev/null || echo 0)
    echo "$scenario|$broker|$rate|$peak" >>"$RESULTS"
}

scenarios() {
    local broker=$1 uri=$2 pid=$3 q="bench-$RANDOM"
    run "16 B, 1 publisher 1 consumer" "$broker" "$uri" "$pid" avg_consume_rate throughput -z "$DURATION" -u "$q-a"
    run "16 B, publish only" "$broker" "$uri" "$pid" avg_pub_rate throughput -z "$DURATION" -y 0 -u "$q-b"
    # Fill the backlog (bounded: a broker in a memory alarm may stop reading).
    "$PERF" throughput -y 0 -C "$BACKLOG" -z 60 -u "$q-c" --uri "$uri" -q -j >/dev/null 2>&1 || true
    run "16 B, consume only from a backlog" "$broker" "$uri" "$pid" avg_consume_rate throughput -x 0 -D "$BACKLOG" -z 60 -u "$q-c"
    run "16 B, persistent, confirms and acks" "$broker" "$uri" "$pid" avg_consume_rate \
        throughput -z "$DURATION" -p -c 1000 -a 100 -P 1000 -u "$q-d"
    run "1 KiB, 1 publisher 1 consumer" "$broker" "$uri" "$pid" avg_consume_rate throughput -z "$DURATION" -s 1024 -u "$q-e"
}

IDLE_L=$(rss_kb "$LPID")
IDLE_R=$([ "$RMQ" = 1 ] && rss_kb "$RPID" || echo 0)
for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    scenarios lavinmq "$URI_L" "$LPID"
    [ "$RMQ" = 1 ] && scenarios rabbitmq "$URI_R" "$RPID"
done

python3 - "$RESULTS" "$IDLE_L" "$IDLE_R" "$DURATION" "$ROUNDS" <<'PY'
import statistics, sys
path, idle_l, idle_r, duration, rounds = sys.argv[1:]
rows = {}
for line in open(path):
    scenario, broker, rate, rss = line.strip().split("|")
    rows.setdefault(scenario, {}).setdefault(broker, []).append((float(rate), int(rss)))
print(f"Median of {rounds} rounds, {duration} s per run (msgs/s; peak broker RSS in MB)")
print(f"{'scenario':40} {'lavinmq':>12} {'RSS':>6} {'RabbitMQ':>12} {'RSS':>6} {'ratio':>7}")
for scenario, by in rows.items():
    def med(b):
        v = by.get(b)
        if not v:
            return None, None
        return statistics.median(r for r, _ in v), max(s for _, s in v) / 1024
    l, lrss = med("lavinmq")
    r, rrss = med("rabbitmq")
    ratio = f"{l / r:6.1f}x" if l and r else "      -"
    rs = f"{r:12,.0f} {rrss:6.0f}" if r is not None else f"{'-':>12} {'-':>6}"
    print(f"{scenario:40} {l:12,.0f} {lrss:6.0f} {rs} {ratio}")
print(f"idle RSS: lavinmq {int(idle_l) / 1024:.1f} MB, RabbitMQ {int(idle_r) / 1024:.1f} MB")
PY
