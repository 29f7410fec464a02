#!/usr/bin/env bash
# MQTT side by side: `lavinmqperf mqtt throughput` (16-byte payloads, one
# publisher, one subscriber) against lavinmq, against LavinMQ 2.9.1 when its
# binaries are there (see benches/lavinmq_anchor.sh; a private instance with its
# own ports and data dir) and, when Debian's mosquitto is installed, against
# Mosquitto (a private instance on its own port, no persistence), alternating,
# ROUNDS rounds; prints medians and our/LavinMQ 2.9.1 and our/Mosquitto ratios.
# Every scenario runs with two load generators, each against every broker: ours
# (target/release/lavinmqperf) and LavinMQ 2.9.1's own lavinmqperf (when it is
# there), which is heavier, so that on few cores it leaves the brokers less CPU.
# Scenarios: QoS 0 and QoS 1 with clean sessions, and QoS 1 with a
# persistent session (for lavinmq a durable queue, acknowledged after fsync;
# Mosquitto without persistence keeps it in memory), in MQTT 3.1.1, and QoS 0
# and 1 with clean sessions in MQTT 5 (our generator only, not on LavinMQ
# 2.9.1: neither its generator nor its broker speaks MQTT 5); for lavinmq it
# also prints the MQTT 5
# rate as a share of the 3.1.1 rate. Beside each rate it prints the broker's CPU
# time per message: the user + system time of the broker process over the run
# (from /proc), divided by the messages consumed, so that the figure does not
# depend on how much CPU the load generator takes; and the broker's peak RSS
# during the run. A run that fails shows "failed", and the report says why.
# Our generator stops with a protocol error on LavinMQ 2.9.1 at QoS 1: its
# packet identifiers wrap to 0 after 65,535 (0 is not allowed, MQTT-2.3.1-1;
# its own generator lets it pass).
#   DURATION  seconds per run (default 5)    ROUNDS  rounds (default 3)
#   LPORT     lavinmq's MQTT port (default 1893)   MPORT  Mosquitto's (default 1894)
#   LAVINMQ_ANCHOR_DIR  where LavinMQ 2.9.1's lavinmq and lavinmqperf are
#             ("none": without it; default: ../shared/anchors/lavinmq-2.9.1-bin.tar.xz
#             unpacked into the temp dir, else /opt/lmq/bin)
#   APORT, ACLUSTER_PORT  LavinMQ 2.9.1's MQTT port and the clustering port it
#             binds even without clustering (default 1895, 5787)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
LPORT=${LPORT:-1893}
MPORT=${MPORT:-1894}
APORT=${APORT:-1895}
ACLUSTER_PORT=${ACLUSTER_PORT:-5787}
WORK=$(mktemp -d)
RESULTS=$WORK/results
: >"$RESULTS"
LPID=
MPID=
APID=

cleanup() {
    local p
    for p in "$LPID" "$MPID" "$APID"; do
        if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi
    done
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

target/release/lavinmq -D "$WORK/data" -p 0 --http-port 0 --metrics-http-port -1 --stream-port -1 --mqtt-port "$LPORT" \
    --control-unix-path "$WORK/ctl.sock" >"$WORK/lavinmq.log" 2>&1 &
LPID=$!
wait_port "$LPORT" "$LPID" || { echo "lavinmq did not start:" >&2; tail "$WORK/lavinmq.log" >&2; exit 1; }

# shellcheck disable=SC1091 source=benches/lavinmq_anchor.sh
. benches/lavinmq_anchor.sh
find_anchor "$WORK"
APERF=$ANCHOR_PERF
if [ -n "$ANCHOR_LAVINMQ" ]; then
    # Only MQTT (AMQP, HTTP, metrics and TLS off; the clustering port it binds
    # anyway moved), its own control socket.
    "$ANCHOR_LAVINMQ" -D "$WORK/anchor-data" -b 127.0.0.1 -p -1 --amqps-port -1 --http-port -1 --https-port -1 \
        --mqtt-port "$APORT" --mqtts-port -1 --metrics-http-port -1 --clustering-port "$ACLUSTER_PORT" \
        --control-unix-path "$WORK/anchor-ctl.sock" >"$WORK/anchor.log" 2>&1 &
    APID=$!
    if ! wait_port "$APORT" "$APID"; then
        echo "LavinMQ 2.9.1 skipped: its broker did not start:" >&2
        grep -v '^  from ' "$WORK/anchor.log" | tail -3 >&2
        kill "$APID" 2>/dev/null || true
        APID=
    fi
fi

MOSQUITTO=$(command -v mosquitto || true)
[ -z "$MOSQUITTO" ] && [ -x /usr/sbin/mosquitto ] && MOSQUITTO=/usr/sbin/mosquitto
if [ -n "$MOSQUITTO" ]; then
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n' "$MPORT" >"$WORK/mosquitto.conf"
    "$MOSQUITTO" -c "$WORK/mosquitto.conf" >"$WORK/mosquitto.log" 2>&1 &
    MPID=$!
    wait_port "$MPORT" "$MPID" || { echo "mosquitto did not start" >&2; MPID=; }
else
    echo "mosquitto not installed: measuring without it" >&2
fi

# shellcheck disable=SC1091 source=benches/proc_cpu.sh
. benches/proc_cpu.sh


# The load generators: ours, and LavinMQ 2.9.1's when it is there.
GENS=(ours)
[ -n "$APERF" ] && GENS+=(2.9.1)
perf_of() { if [ "$1" = ours ]; then echo target/release/lavinmqperf; else echo "$APERF"; fi; }

# run SCENARIO GEN BROKER PID URI FLAGS...: runs GEN's lavinmqperf in the
# background, samples the broker's peak RSS meanwhile, appends
#   "scenario|generator|broker|consume rate|publish rate|broker CPU µs per consumed message|peak RSS kB"
run() {
    local scenario=$1 gen=$2 broker=$3 pid=$4 uri=$5
    shift 5
    echo "  $broker, $gen lavinmqperf: $scenario" >&2
    sampled_run "$pid" "$(perf_of "$gen")" mqtt throughput -u "$uri" -z "$DURATION" -q -j "$@" >"$WORK/out" 2>"$WORK/err"
    local ticks=$RUN_TICKS peak=$RUN_PEAK_KB rc=$RUN_RC
    if [ "$rc" = 0 ] && python3 -c '
import json, sys
d = json.loads(sys.argv[1])
msgs = d["avg_consume_rate"] * d["elapsed_seconds"]
cpu = f"{int(sys.argv[5]) / int(sys.argv[6]) / msgs * 1e6:.3f}" if msgs else "failed"
print("|".join([sys.argv[2], sys.argv[3], sys.argv[4], str(d["avg_consume_rate"]), str(d["avg_pub_rate"]), cpu, sys.argv[7]]))' \
        "$(tail -1 "$WORK/out")" "$scenario" "$gen" "$broker" "$ticks" "$CLK_TCK" "$peak" >>"$RESULTS" 2>/dev/null; then
        return 0
    fi
    local why
    why=$(tail -2 "$WORK/err" | tr '\n|' '  ')
    echo "$scenario on $broker ($gen lavinmqperf) failed (exit $rc): $why" >&2
    echo "$scenario on $broker ($gen lavinmqperf): exit $rc: $why" >>"$WORK/failures"
    echo "$scenario|$gen|$broker|failed|failed|failed|$peak" >>"$RESULTS"
}

# A topic per run: a persistent session outlives its run and would otherwise
# receive the next run's messages. LavinMQ 2.9.1's generator takes the QoS only
# as --qos=N, its sessions are persistent unless --clean-session (with the same
# client ids every run: the next round's clean session ends the old one), and
# it has no --protocol-version.
scenarios() {
    local gen=$1 broker=$2 pid=$3 uri=$4 round=$5 t
    # No dots in topics: our broker delivers nothing on a topic with a dot.
    t="${gen//./}-$round"
    run "QoS 0, clean session" "$gen" "$broker" "$pid" "$uri" --qos=0 --clean-session -t "q0-$t"
    run "QoS 1, clean session" "$gen" "$broker" "$pid" "$uri" --qos=1 --clean-session -t "q1-$t"
    run "QoS 1, persistent session" "$gen" "$broker" "$pid" "$uri" --qos=1 -t "q1p-$t"
    [ "$gen" = ours ] && [ "$broker" != lavinmq-2.9.1 ] || return 0
    run "MQTT 5 QoS 0, clean session" "$gen" "$broker" "$pid" "$uri" --protocol-version 5 --qos=0 --clean-session -t "v5q0-$t"
    run "MQTT 5 QoS 1, clean session" "$gen" "$broker" "$pid" "$uri" --protocol-version 5 --qos=1 --clean-session -t "v5q1-$t"
}

for round in $(seq "$ROUNDS"); do
    echo "round $round of $ROUNDS" >&2
    for gen in "${GENS[@]}"; do
        scenarios "$gen" lavinmq "$LPID" "mqtt://127.0.0.1:$LPORT" "$round"
        # LavinMQ 2.9.1 wants a user (the default guest) on MQTT too.
        if [ -n "$APID" ]; then scenarios "$gen" lavinmq-2.9.1 "$APID" "mqtt://guest:guest@127.0.0.1:$APORT" "$round"; fi
        if [ -n "$MPID" ]; then scenarios "$gen" mosquitto "$MPID" "mqtt://127.0.0.1:$MPORT" "$round"; fi
    done
done

python3 - "$RESULTS" "$DURATION" "$ROUNDS" "${GENS[*]}" "${APID:+1}" "$WORK/failures" <<'PY'
import os, statistics, sys
path, duration, rounds, gens, anchor, failures = sys.argv[1:]
gens = gens.split()
BROKERS = [("lavinmq", "lavinmq"), ("lavinmq-2.9.1", "LavinMQ 2.9.1"), ("mosquitto", "Mosquitto")]
rows, cpu, rss = {}, {}, {}
for line in open(path):
    scenario, gen, broker, consume, publish, us, peak = line.rstrip("\n").split("|")
    rows.setdefault(scenario, {}).setdefault(gen, {}).setdefault(broker, []).append(consume)
    cpu.setdefault(scenario, {}).setdefault(gen, {}).setdefault(broker, []).append(us)
    rss.setdefault(scenario, {}).setdefault(gen, {}).setdefault(broker, []).append(int(peak))
def med(values):
    ok = [float(v) for v in values or [] if v != "failed"]
    return statistics.median(ok) if ok else None
def failed(values):
    return bool(values) and all(v == "failed" for v in values)
def ratio(a, b):
    return f"{a / b:5.1f}x" if a and b else "     -"
cell = lambda v, f="{:,.0f}": f.format(v) if v else "-"
print(f"MQTT, 16-byte payloads, 1 publisher 1 subscriber: median of {rounds} rounds, {duration} s each")
print("perf: the load generator, ours (target/release/lavinmqperf) or LavinMQ 2.9.1's own (2.9.1);")
print("µs/msg: the broker's CPU per message; RSS: its peak RSS in MB")
print(f"{'':34} {'lavinmq':^26} {'LavinMQ 2.9.1':^26} {'Mosquitto':^26} {'vs 2.9.1':^13} {'vs Mosquitto':^13}")
print(f"{'scenario':28} {'perf':5} " + " ".join(f"{'msgs/s':>11} {'µs/msg':>7} {'RSS':>6}" for _ in BROKERS)
      + f" {'rate':>6} {'CPU':>6} {'rate':>6} {'CPU':>6}")
for scenario, by_gen in rows.items():
    for gen in gens:
        if gen not in by_gen:
            continue
        rate = {b: med(by_gen[gen].get(b)) for b, _ in BROKERS}
        us = {b: med(cpu[scenario][gen].get(b)) for b, _ in BROKERS}
        peak = {b: max(rss[scenario][gen].get(b) or [0]) / 1024 for b, _ in BROKERS}
        cells = " ".join(f"{'failed' if failed(by_gen[gen].get(b)) else cell(rate[b]):>11} "
                         f"{cell(us[b], '{:.2f}'):>7} {cell(peak[b], '{:.0f}'):>6}" for b, _ in BROKERS)
        print(f"{scenario:28} {gen:5} {cells} {ratio(rate['lavinmq'], rate['lavinmq-2.9.1']):>6} "
              f"{ratio(us['lavinmq-2.9.1'], us['lavinmq']):>6} {ratio(rate['lavinmq'], rate['mosquitto']):>6} "
              f"{ratio(us['mosquitto'], us['lavinmq']):>6}")
print("rate: our consume rate / the other broker's; CPU: the other broker's CPU per message / ours (above 1: we use less)")
if "2.9.1" not in gens:
    print("LavinMQ 2.9.1's lavinmqperf not there: rows with our load generator only")
else:
    print("MQTT 5 rows: our load generator only (LavinMQ 2.9.1's has no --protocol-version)")
if anchor != "1":
    print("LavinMQ 2.9.1 (broker) not measured")
else:
    print("LavinMQ 2.9.1 (broker): no MQTT 5")
if os.path.exists(failures):
    print("failed runs:")
    for line in open(failures):
        print("  " + line.rstrip("\n"))
for qos in (0, 1):
    v3 = med(rows.get(f"QoS {qos}, clean session", {}).get("ours", {}).get("lavinmq"))
    v5 = med(rows.get(f"MQTT 5 QoS {qos}, clean session", {}).get("ours", {}).get("lavinmq"))
    if v3 and v5:
        print(f"lavinmq MQTT 5 / 3.1.1 at QoS {qos}: {v5 / v3:.2f}")
PY
