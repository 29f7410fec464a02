#!/usr/bin/env bash
# MQTT side by side: `lavinmqperf mqtt throughput` (16-byte payloads, one
# publisher, one subscriber) against lavinmq and, when Debian's mosquitto is
# installed, against Mosquitto (a private instance on its own port, no
# persistence), alternating, ROUNDS rounds; prints medians and our/Mosquitto
# ratios. Scenarios: QoS 0 and QoS 1 with clean sessions, and QoS 1 with a
# persistent session (for lavinmq a durable queue, acknowledged after fsync;
# Mosquitto without persistence keeps it in memory), in MQTT 3.1.1, and QoS 0
# and 1 with clean sessions in MQTT 5; for lavinmq it also prints the MQTT 5
# rate as a share of the 3.1.1 rate. Beside each rate it prints the broker's CPU
# time per message: the user + system time of the broker process over the run
# (from /proc), divided by the messages consumed, so that the figure does not
# depend on how much CPU the load generator takes.
#   DURATION  seconds per run (default 5)    ROUNDS  rounds (default 3)
#   LPORT     lavinmq's MQTT port (default 1893)   MPORT  Mosquitto's (default 1894)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
LPORT=${LPORT:-1893}
MPORT=${MPORT:-1894}
WORK=$(mktemp -d)
RESULTS=$WORK/results
LPID=
MPID=

cleanup() {
    [ -n "$LPID" ] && kill "$LPID" 2>/dev/null || true
    [ -n "$MPID" ] && kill "$MPID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --bins >&2

wait_port() {
    local port=$1 pid=$2 _
    for _ in $(seq 100); do
        ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

target/release/lavinmq -D "$WORK/data" -p 0 --http-port 0 --metrics-http-port -1 --mqtt-port "$LPORT" \
    --control-unix-path "$WORK/ctl.sock" >"$WORK/lavinmq.log" 2>&1 &
LPID=$!
wait_port "$LPORT" "$LPID" || { echo "lavinmq did not start:" >&2; tail "$WORK/lavinmq.log" >&2; exit 1; }

MOSQUITTO=$(command -v mosquitto || true)
[ -z "$MOSQUITTO" ] && [ -x /usr/sbin/mosquitto ] && MOSQUITTO=/usr/sbin/mosquitto
if [ -n "$MOSQUITTO" ]; then
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$MPORT" >"$WORK/mosquitto.conf"
    "$MOSQUITTO" -c "$WORK/mosquitto.conf" >"$WORK/mosquitto.log" 2>&1 &
    MPID=$!
    wait_port "$MPORT" "$MPID" || { echo "mosquitto did not start" >&2; MPID=; }
else
    echo "mosquitto not installed: measuring lavinmq only" >&2
fi

. benches/proc_cpu.sh

# run SCENARIO BROKER PID PORT FLAGS...: appends
#   "scenario|broker|consume rate|publish rate|broker CPU µs per consumed message"
run() {
    local scenario=$1 broker=$2 pid=$3 port=$4
    shift 4
    echo "  $broker: $scenario" >&2
    local out ticks
    ticks=$(cpu_ticks "$pid")
    if out=$(target/release/lavinmqperf mqtt throughput -u "mqtt://127.0.0.1:$port" -z "$DURATION" -q -j "$@" 2>"$WORK/err" | tail -1); then
        ticks=$(($(cpu_ticks "$pid") - ticks))
        python3 -c '
import json, sys
d = json.loads(sys.argv[1])
msgs = d["avg_consume_rate"] * d["elapsed_seconds"]
cpu = f"{int(sys.argv[4]) / int(sys.argv[5]) / msgs * 1e6:.3f}" if msgs else "failed"
print("|".join([sys.argv[2], sys.argv[3], str(d["avg_consume_rate"]), str(d["avg_pub_rate"]), cpu]))' \
            "$out" "$scenario" "$broker" "$ticks" "$CLK_TCK" >>"$RESULTS"
    else
        echo "$scenario on $broker failed: $(tail -2 "$WORK/err")" >&2
        echo "$scenario|$broker|failed|failed|failed" >>"$RESULTS"
    fi
}

# A topic per run: a persistent session outlives its run and would otherwise
# receive the next run's messages.
scenarios() {
    local broker=$1 pid=$2 port=$3 round=$4
    run "QoS 0, clean session" "$broker" "$pid" "$port" --qos 0 --clean-session -t "q0-$round"
    run "QoS 1, clean session" "$broker" "$pid" "$port" --qos 1 --clean-session -t "q1-$round"
    run "QoS 1, persistent session" "$broker" "$pid" "$port" --qos 1 -t "q1p-$round"
    run "MQTT 5 QoS 0, clean session" "$broker" "$pid" "$port" --protocol-version 5 --qos 0 --clean-session -t "v5q0-$round"
    run "MQTT 5 QoS 1, clean session" "$broker" "$pid" "$port" --protocol-version 5 --qos 1 --clean-session -t "v5q1-$round"
}

for round in $(seq "$ROUNDS"); do
    echo "round $round of $ROUNDS" >&2
    scenarios lavinmq "$LPID" "$LPORT" "$round"
    [ -n "$MPID" ] && scenarios mosquitto "$MPID" "$MPORT" "$round"
done

python3 - "$RESULTS" "$DURATION" "$ROUNDS" <<'PY'
import statistics, sys
path, duration, rounds = sys.argv[1:]
rows, cpu = {}, {}
for line in open(path):
    scenario, broker, consume, publish, us = line.rstrip("\n").split("|")
    rows.setdefault(scenario, {}).setdefault(broker, []).append(consume)
    cpu.setdefault(scenario, {}).setdefault(broker, []).append(us)
def med(values):
    ok = [float(v) for v in values or [] if v != "failed"]
    return statistics.median(ok) if ok else None
print(f"MQTT, 16-byte payloads, 1 publisher 1 subscriber: median of {rounds} rounds, {duration} s each")
print(f"{'scenario':28} {'lavinmq msgs/s':>15} {'µs/msg':>7} {'Mosquitto msgs/s':>17} {'µs/msg':>7} {'rate':>6} {'CPU':>6}")
for scenario, by in rows.items():
    l, m = med(by.get("lavinmq")), med(by.get("mosquitto"))
    lc, mc = med(cpu[scenario].get("lavinmq")), med(cpu[scenario].get("mosquitto"))
    cell = lambda v, f="{:,.0f}": f.format(v) if v else "-"
    ratio = f"{l / m:5.1f}x" if l and m else "     -"
    cpu_ratio = f"{mc / lc:5.1f}x" if lc and mc else "     -"
    print(f"{scenario:28} {cell(l):>15} {cell(lc, '{:.2f}'):>7} {cell(m):>17} {cell(mc, '{:.2f}'):>7} {ratio:>6} {cpu_ratio:>6}")
print("rate: our consume rate / Mosquitto's; CPU: Mosquitto's CPU per message / ours (above 1: we use less)")
for qos in (0, 1):
    v3 = med(rows.get(f"QoS {qos}, clean session", {}).get("lavinmq"))
    v5 = med(rows.get(f"MQTT 5 QoS {qos}, clean session", {}).get("lavinmq"))
    if v3 and v5:
        print(f"lavinmq MQTT 5 / 3.1.1 at QoS {qos}: {v5 / v3:.2f}")
PY
