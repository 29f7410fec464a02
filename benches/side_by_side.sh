#!/usr/bin/env bash
# Side-by-side benchmark: the same lavinmqperf scenarios against lavinmq, against
# LavinMQ 2.9.1 when its binaries are there (see benches/lavinmq_anchor.sh; a
# private instance with its own ports and data dir) and, when Debian's
# rabbitmq-server is installed, against RabbitMQ (a private node with its
# own name, data dir and ports, started by scripts/start-rabbitmq.sh and stopped
# again at the end), alternating, ROUNDS rounds. Every scenario runs with two
# load generators, each against every broker: ours (target/release/lavinmqperf)
# and LavinMQ 2.9.1's own lavinmqperf (when it is there), which is heavier, so
# that on few cores it leaves the brokers less CPU.
# Prints, per scenario and load generator, the median rate on each broker, the
# ratios ours/LavinMQ 2.9.1 and ours/RabbitMQ, peak RSS during
# each scenario, the broker's CPU time per message (user + system time of the
# broker process over the run, from /proc, divided by the messages the rate
# counts: it does not depend on how much CPU the load generator takes), and a
# memory section: RSS idle, with 1,000 queues, with 1,000
# connections (measured once, first, on fresh brokers), idle again after the
# rounds, and optionally with a big backlog (on restarted brokers).
#   DURATION     seconds per run (default 5)    ROUNDS  rounds (default 3)
#   BACKLOG      messages for the consume-only scenario (default 1000000)
#   BIG_BACKLOG  if set, also the RSS with this many 16 B messages queued
#                (e.g. 10000000; takes minutes and GBs of disk, and RabbitMQ
#                GBs of RAM; off by default)
#   BIG_TIMEOUT  seconds to wait for the big backlog (default 1200)
#   LPORT        lavinmq's AMQP port (default 5799)
#   LAVINMQ_ANCHOR_DIR  where LavinMQ 2.9.1's lavinmq and lavinmqperf are
#                ("none": without it; default: ../shared/anchors/lavinmq-2.9.1-bin.tar.xz
#                unpacked into the temp dir, else /opt/lmq/bin)
#   APORT, ACLUSTER_PORT  LavinMQ 2.9.1's AMQP port and the clustering port it
#                binds even without clustering (default 5789, 5788)
#   RPORT, RDIST_PORT, RNODE  RabbitMQ's AMQP port, distribution port and node
#                name (default 5783, 25783, sbs-bench@localhost)
# A scenario that fails for a broker shows "failed" in its cell; the run goes on.
# LavinMQ 2.9.1's lavinmqperf differs from ours in: its bind-churn measures a
# transient and a durable queue in one run of fixed length (2 s warm-up and 5 s
# each, whatever DURATION) and has no --unbind; with --queue-pattern each of its
# publishers publishes to every queue in turn (ours: publisher N to queue N), and
# on few cores those 100 busy publishers starve its consumers (a consume rate
# near 0 on every broker); it declares no queue when there are no consumers (so
# the script declares it); its run ends on a whole-second tick, so its rate for
# the consume-only scenario, which ends when the backlog is consumed, is the
# backlog over whole seconds, a lower bound (the CPU per message holds).
# Every scenario deletes the queues it made (server-named ones go with their
# connection), so brokers only carry freed-but-retained memory between scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
BACKLOG=${BACKLOG:-1000000}
BIG_BACKLOG=${BIG_BACKLOG:-0}
BIG_TIMEOUT=${BIG_TIMEOUT:-1200}
LPORT=${LPORT:-5799}
RPORT=${RPORT:-5783}
APORT=${APORT:-5789}
ACLUSTER_PORT=${ACLUSTER_PORT:-5788}

# 1,000 connections need more than 1024 descriptors, in the tool and the brokers.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build --release --bin lavinmq --bin lavinmqperf >&2
PERF=target/release/lavinmqperf
WORK=$(mktemp -d)
DATA=$WORK/lavinmq
ADATA=$WORK/lavinmq-2.9.1
RESULTS=$WORK/results
: >"$RESULTS"
# A private RabbitMQ node: fresh state (no queues left by earlier runs or other
# users of the compat node) and no clash with a compat node that may be running.
export RABBITMQ_COMPAT_BASE=$WORK/rabbitmq
export RABBITMQ_COMPAT_NODENAME=${RNODE:-sbs-bench@localhost}
export RABBITMQ_COMPAT_PORT=$RPORT
export RABBITMQ_COMPAT_DIST_PORT=${RDIST_PORT:-25783}
HELD=() # background lavinmqperf processes holding connections or queues
cleanup() {
    local p
    for p in "${HELD[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${LPID:-}" "${APID:-}"; do
        [ -n "$p" ] || continue
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ "${RMQ:-0}" = 1 ]; then stop_rabbitmq >/dev/null 2>&1 || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# The housekeeping lavinmqperf has no mode for: deleting queues and reading a
# queue's message count, with a minimal AMQP 0-9-1 client (no dependencies).
cat >"$WORK/amqp_admin.py" <<'PY'
# amqp_admin.py URI delete QUEUE...  delete queues (missing ones are fine)
# amqp_admin.py URI count QUEUE      print the queue's message count
# amqp_admin.py URI declare QUEUE... declare durable queues (as lavinmqperf does)
import socket, struct, sys
from urllib.parse import urlparse, unquote

def shortstr(s):
    b = s.encode()
    return bytes([len(b)]) + b

class Client:
    def __init__(self, uri):
        u = urlparse(uri)
        # Deleting a queue can wait for the broker to work through a backlog.
        self.sock = socket.create_connection((u.hostname or "localhost", u.port or 5672), timeout=600)
        self.buf = b""
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(10, 10)  # connection.start
        auth = b"\0" + unquote(u.username or "guest").encode() + b"\0" + unquote(u.password or "guest").encode()
        self.method(0, 10, 11, b"\0\0\0\0" + shortstr("PLAIN") + struct.pack(">I", len(auth)) + auth + shortstr("en_US"))
        channel_max, frame_max, _ = struct.unpack(">HIH", self.expect(10, 30)[:8])  # tune
        self.method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0))
        vhost = unquote(u.path[1:]) if len(u.path) > 1 else "/"
        self.method(0, 10, 40, shortstr(vhost) + b"\0\0")
        self.expect(10, 41)
        self.channel = 0
        self.open_channel()

    def open_channel(self):
        self.channel += 1
        self.method(self.channel, 20, 10, b"\0")
        self.expect(20, 11)

    def method(self, ch, cls, mid, args):
        payload = struct.pack(">HH", cls, mid) + args
        self.sock.sendall(struct.pack(">BHI", 1, ch, len(payload)) + payload + b"\xce")

    def read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed by the broker")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def expect(self, cls, mid):
        """The arguments of the next method cls.mid; raises on a close."""
        while True:
            ftype, ch, size = struct.unpack(">BHI", self.read(7))
            payload = self.read(size + 1)[:-1]
            if ftype != 1:
                continue
            c, m = struct.unpack(">HH", payload[:4])
            if (c, m) == (cls, mid):
                return payload[4:]
            if (c, m) in ((10, 50), (20, 40)):  # connection.close, channel.close
                code = struct.unpack(">H", payload[4:6])[0]
                text = payload[7:7 + payload[6]].decode(errors="replace")
                if (c, m) == (20, 40):
                    self.method(ch, 20, 41, b"")
                raise RuntimeError(f"{code} {text}")

    def delete(self, queue):
        self.method(self.channel, 50, 40, b"\0\0" + shortstr(queue) + b"\0")
        self.expect(50, 41)

    def declare(self, queue):  # durable, not exclusive, not auto-delete
        self.method(self.channel, 50, 10, b"\0\0" + shortstr(queue) + b"\x02\0\0\0\0")
        self.expect(50, 11)

    def count(self, queue):  # passive declare
        self.method(self.channel, 50, 10, b"\0\0" + shortstr(queue) + b"\x01\0\0\0\0")
        args = self.expect(50, 11)
        return struct.unpack(">I", args[1 + args[0]:5 + args[0]])[0]

    def close(self):
        self.method(0, 10, 50, b"\0\0" + shortstr("") + b"\0\0\0\0")
        try:
            self.expect(10, 51)
        except (EOFError, OSError):
            pass

uri, cmd, names = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    c = Client(uri)
    if cmd == "delete":
        for q in names:
            try:
                c.delete(q)
            except RuntimeError as e:
                print(f"delete {q}: {e}", file=sys.stderr)
                c.open_channel()
    elif cmd == "declare":
        for q in names:
            c.declare(q)
    elif cmd == "count":
        print(c.count(names[0]))
    c.close()
except Exception as e:
    print(f"amqp_admin {cmd}: {e}", file=sys.stderr)
    sys.exit(1)
PY
admin() { python3 "$WORK/amqp_admin.py" "$@"; }
# delete_queues URI QUEUE...
delete_queues() { admin "$1" delete "${@:2}" || echo "could not delete queues ${*:2} on $1" >&2; }

# await_listen PORT PID NAME LOG: waits (up to 10 s) until PID listens on PORT.
await_listen() {
    local _
    for _ in $(seq 100); do
        ss -ltnpH "sport = :$1" 2>/dev/null | grep -q "pid=$2," && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    echo "$3 did not start; see its log:" >&2
    tail -20 "$4" >&2
    return 1
}
start_lavinmq() {
    mkdir -p "$DATA"
    target/release/lavinmq -D "$DATA" -p "$LPORT" --http-port 0 --metrics-http-port 0 --mqtt-port 0 --stream-port -1 \
        --control-unix-path "$WORK/lavinmqctl.sock" >>"$WORK/lavinmq.log" 2>&1 &
    LPID=$!
    await_listen "$LPORT" "$LPID" lavinmq "$WORK/lavinmq.log"
}
stop_lavinmq() {
    kill "$LPID" 2>/dev/null || true
    wait "$LPID" 2>/dev/null || true
    LPID=
}
# LavinMQ 2.9.1 on its own ports (HTTP, metrics, MQTT and TLS off; the
# clustering port it binds anyway moved) and control socket.
start_anchor() {
    mkdir -p "$ADATA"
    "$ANCHOR_LAVINMQ" -D "$ADATA" -b 127.0.0.1 -p "$APORT" --amqps-port -1 --http-port -1 --https-port -1 \
        --mqtt-port -1 --mqtts-port -1 --metrics-http-port -1 --clustering-port "$ACLUSTER_PORT" \
        --control-unix-path "$WORK/anchor-ctl.sock" >>"$WORK/anchor.log" 2>&1 &
    APID=$!
    await_listen "$APORT" "$APID" "LavinMQ 2.9.1" "$WORK/anchor.log" || { stop_anchor; return 1; }
}
stop_anchor() {
    kill "$APID" 2>/dev/null || true
    wait "$APID" 2>/dev/null || true
    APID=
}
stop_rabbitmq() {
    scripts/stop-rabbitmq.sh || true
    # rabbitmqctl stop returns before the VM is gone: wait, so that its ports,
    # node name and data dir are free.
    local _
    [ "${RPID:-0}" -gt 0 ] || return 0
    for _ in $(seq 60); do
        kill -0 "$RPID" 2>/dev/null || return 0
        sleep 0.5
    done
}
start_rabbitmq() {
    scripts/start-rabbitmq.sh >&2 || return 1
    # The Erlang VM listening on RabbitMQ's AMQP port, for its RSS.
    RPID=$(ss -ltnpH "sport = :$RPORT" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
    RPID=${RPID:-0}
}

# shellcheck disable=SC1091 source=benches/lavinmq_anchor.sh
. benches/lavinmq_anchor.sh
find_anchor "$WORK"
APERF=$ANCHOR_PERF

start_lavinmq
URI_L="amqp://guest:guest@127.0.0.1:$LPORT"
ANCHOR=0
if [ -n "$ANCHOR_LAVINMQ" ]; then
    if start_anchor; then
        ANCHOR=1
        URI_A="amqp://guest:guest@127.0.0.1:$APORT"
    else
        echo "LavinMQ 2.9.1 skipped: its broker did not start" >&2
    fi
fi
RMQ=0
if command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ]; then
    if start_rabbitmq; then
        RMQ=1
        URI_R="amqp://guest:guest@127.0.0.1:$RPORT"
    else
        echo "RabbitMQ did not start: measuring lavinmq only" >&2
    fi
else
    echo "rabbitmq-server not installed: measuring lavinmq only" >&2
fi


# Median of 5 RSS samples over 2 s (the Erlang VM's RSS moves with its GC).
rss_settled() {
    local i s=()
    for i in 1 2 3 4 5; do
        s+=("$(rss_kb "$1")")
        [ "$i" = 5 ] || sleep 0.5
    done
    printf '%s\n' "${s[@]}" | sort -n | sed -n 3p
}

# Waits (up to 30 s) until no client is connected to the broker on `port`, so
# that one scenario's connections don't count in the next one's RSS.
await_no_clients() {
    local _
    for _ in $(seq 60); do
        [ "$(ss -tnH state established "sport = :$1" 2>/dev/null | wc -l)" = 0 ] && return 0
        sleep 0.5
    done
    echo "connections to port $1 still open after 30 s" >&2
}

port_of() { echo "${1##*:}"; }

# shellcheck disable=SC1091 source=benches/proc_cpu.sh
. benches/proc_cpu.sh

# Runs a command (a lavinmqperf) in the background, samples the broker's peak
# RSS meanwhile, appends a result line per scenario it measures:
#   rate|scenario|generator|broker|rate or "failed"|peak_rss_kb|broker CPU µs per message
# (the messages are the rate times lavinmqperf's elapsed seconds; empty for the
# churn modes)
# `how` says where the rate is: json:FIELD (the last line, lavinmqperf -j),
# summary (the "average N things/s" of our churn modes) or ips:REPORT;REPORT...
# (the Benchmark.ips lines of LavinMQ 2.9.1's churn modes, one per scenario:
# then `scenario` is as many labels, also separated by ";").
run() {
    local scenario=$1 gen=$2 broker=$3 pid=$4 how=$5
    shift 5
    local rate="" cpu="" latency
    echo "  [${SECONDS}s] $broker, $gen lavinmqperf: ${scenario//;/ + }" >&2
    sampled_run "$pid" "$@" >"$WORK/out" 2>"$WORK/err"
    local ticks=$RUN_TICKS peak=$RUN_PEAK_KB rc=$RUN_RC
    case $how in
    json:*)
        rate=$(tail -1 "$WORK/out" | python3 -c "import json,sys; print(json.load(sys.stdin)['${how#json:}'])" \
            2>/dev/null || true)
        cpu=$(tail -1 "$WORK/out" | python3 -c "
import json, sys
r = json.load(sys.stdin)
msgs = r['${how#json:}'] * r['elapsed_seconds']
print(f'{$ticks / $CLK_TCK / msgs * 1e6:.3f}' if msgs else '')" 2>/dev/null || true)
        # With -l: the end-to-end latency percentiles, p50 and p99 (ms).
        latency=$(tail -1 "$WORK/out" | python3 -c "
import json, sys
r = json.load(sys.stdin)
print(f\"{r['latency_median_ms']}|{r['latency_p99_ms']}\")" 2>/dev/null || true)
        [ -n "$latency" ] && echo "lat|$scenario|$gen|$broker|$latency" >>"$RESULTS"
        ;;
    summary) rate=$(sed -n 's/^Summary: .* average \([0-9.]*\) .*/\1/p' "$WORK/out" | tail -1) ;;
    ips:*)
        # e.g. "  bind durable queue   4.11k (243.49µs) (± 9.30%)  112B/op   7.10× slower"
        # (LavinMQ 2.9.1's) or "  create/delete durable queue  1486.2 ops/s (672.7µs)" (ours)
        local label report i=0 labels reports
        IFS=';' read -r -a labels <<<"$scenario"
        IFS=';' read -r -a reports <<<"${how#ips:}"
        for report in "${reports[@]}"; do
            label=${labels[$i]}
            i=$((i + 1))
            rate=$(python3 - "$WORK/out" "$report" <<'PY' 2>/dev/null || true
import re, sys
scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3, "µ": 1e-6}
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = re.match(r"\s*" + re.escape(sys.argv[2]) + r"\s+([0-9.]+)\s?([kMGmµ]?)\s*(?:ops/s)?\s*\(", line)
    if m:
        print(f"{float(m[1]) * scale[m[2]]:.0f}")
PY
)
            if [ "$rc" != 0 ] || [ -z "$rate" ]; then
                echo "$label on $broker ($gen lavinmqperf) failed (exit $rc): $(tail -2 "$WORK/err" | tr '\n' ' ')" >&2
                rate=failed
            fi
            echo "rate|$label|$gen|$broker|$rate|$peak|" >>"$RESULTS"
        done
        return 0
        ;;
    esac
    if [ "$rc" != 0 ] || [ -z "$rate" ]; then
        echo "$scenario on $broker ($gen lavinmqperf) failed (exit $rc): $(tail -2 "$WORK/err" | tr '\n' ' ')" >&2
        rate=failed
    fi
    echo "rate|$scenario|$gen|$broker|$rate|$peak|$cpu" >>"$RESULTS"
}

if "$PERF" bind-churn --help 2>/dev/null | grep -q -- '--durable'; then
    DURABLE_BIND=1
else
    DURABLE_BIND=0
fi

# The load generators: ours, and LavinMQ 2.9.1's when it is there.
GENS=(ours)
[ -n "$APERF" ] && GENS+=(2.9.1)
perf_of() { if [ "$1" = ours ]; then echo "$PERF"; else echo "$APERF"; fi; }

scenarios() {
    local gen=$1 broker=$2 uri=$3 pid=$4 q="bench-$RANDOM" p
    p=$(perf_of "$gen")
    run "16 B, 1 publisher 1 consumer" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -u "$q-a" --uri "$uri" -q -j
    delete_queues "$uri" "$q-a"
    # Without consumers LavinMQ 2.9.1's lavinmqperf declares no queue (and
    # would publish to nowhere): the queue is declared first, for both.
    admin "$uri" declare "$q-b" || true
    run "16 B, publish only" "$gen" "$broker" "$pid" json:avg_pub_rate \
        "$p" throughput -z "$DURATION" -y 0 -u "$q-b" --uri "$uri" -q -j
    delete_queues "$uri" "$q-b"
    # Fill the backlog (bounded: a broker in a memory alarm may stop reading),
    # with our lavinmqperf whichever generator consumes it.
    "$PERF" throughput -y 0 -C "$BACKLOG" -z 60 -u "$q-c" --uri "$uri" -q -j >/dev/null 2>&1 || true
    run "16 B, consume only from a backlog" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -x 0 -D "$BACKLOG" -z 60 -u "$q-c" --uri "$uri" -q -j
    delete_queues "$uri" "$q-c"
    run "16 B, persistent, confirms and acks" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -p -c 1000 -a 100 -P 1000 -u "$q-d" --uri "$uri" -q -j
    delete_queues "$uri" "$q-d"
    run "1 KiB, 1 publisher 1 consumer" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -s 1024 -u "$q-e" --uri "$uri" -q -j
    delete_queues "$uri" "$q-e"
    run "64 KiB, 1 publisher 1 consumer" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -s 65536 -u "$q-f" --uri "$uri" -q -j
    delete_queues "$uri" "$q-f"
    run "1 MiB, 1 publisher 1 consumer" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -s 1048576 -u "$q-g" --uri "$uri" -q -j
    delete_queues "$uri" "$q-g"
    # A moderate fixed rate: CPU per message and end-to-end latency (by the
    # generator's clock) rather than throughput.
    run "16 B at a fixed 20,000 msgs/s" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -r 20000 -l -u "$q-h" --uri "$uri" -q -j
    delete_queues "$uri" "$q-h"
    # Each consumer gets a server-named auto-delete queue bound to amq.fanout:
    # the rate is deliveries, all 10 queues together (10x the publish rate).
    run "16 B, fanout to 10 queues (deliveries)" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -y 10 -u "" -e amq.fanout --uri "$uri" -q -j
    # Consumer N on queue N (--queue-pattern); publisher N publishes to queue N
    # (ours) or to every queue in turn (LavinMQ 2.9.1's).
    run "16 B, 100 publishers on 100 queues" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -x 100 -y 100 --queue-pattern "$q-m-%" \
        --queue-pattern-from 1 --queue-pattern-to 100 --uri "$uri" -q -j
    # Also waits for the broker to work through what the publishers left in
    # its socket buffers (RabbitMQ: up to a minute).
    # shellcheck disable=SC2046
    delete_queues "$uri" $(seq -f "$q-m-%g" 100)
    # One publisher taking turns over 1,000 queues, a consumer (and a
    # connection) on each.
    run "16 B, 1,000 queues with a consumer each" "$gen" "$broker" "$pid" json:avg_consume_rate \
        "$p" throughput -z "$DURATION" -x 1 -y 1000 --queue-pattern "$q-k-%" \
        --queue-pattern-from 1 --queue-pattern-to 1000 --uri "$uri" -q -j
    # shellcheck disable=SC2046
    delete_queues "$uri" $(seq -f "$q-k-%g" 1000)
    await_no_clients "$(port_of "$uri")"
    # Declares and deletes a server-named queue, then a durable one, one at a
    # time (2 s warm-up, then DURATION s each with ours, 5 s with LavinMQ's).
    local churn_time=()
    if [ "$gen" = ours ]; then churn_time=(-z "$DURATION"); fi
    run "queue churn, transient (declare+delete/s);queue churn, durable (declare+delete/s)" \
        "$gen" "$broker" "$pid" "ips:create/delete transient queue;create/delete durable queue" \
        "$p" queue-churn "${churn_time[@]}" --uri "$uri"
    if [ "$gen" != ours ]; then
        # One run binds a server-named queue, then a durable one (which it
        # deletes at the end), for 2 + 5 s each.
        run "bind churn, transient queue (bindings/s);bind churn, durable queue (bindings/s)" \
            "$gen" "$broker" "$pid" "ips:bind non-durable queue;bind durable queue" \
            "$p" bind-churn --uri "$uri"
        echo "rate|bind+unbind, durable queue (pairs/s)|$gen|$broker|n/a|0|" >>"$RESULTS"
        await_no_clients "$(port_of "$uri")"
        return 0
    fi
    # Binds a server-named exclusive queue to amq.direct, a new key each time,
    # the bindings accumulating (as LavinMQ's bind-churn does).
    run "bind churn, transient queue (bindings/s)" "$gen" "$broker" "$pid" summary \
        "$p" bind-churn -z "$DURATION" --uri "$uri"
    if [ "$DURABLE_BIND" = 1 ]; then
        run "bind churn, durable queue (bindings/s)" "$gen" "$broker" "$pid" summary \
            "$p" bind-churn --durable -z "$DURATION" --uri "$uri"
        # Each binding removed again at once: two round trips per binding.
        run "bind+unbind, durable queue (pairs/s)" "$gen" "$broker" "$pid" summary \
            "$p" bind-churn --durable --unbind -z "$DURATION" --uri "$uri"
    else
        echo "rate|bind churn, durable queue (bindings/s)|$gen|$broker|n/a|0|" >>"$RESULTS"
    fi
    await_no_clients "$(port_of "$uri")"
}

# RSS line: rss|label|broker|rss_kb or "failed"|rss_kb just before
record_rss() { echo "rss|$1|$2|$3|$4" >>"$RESULTS"; }

# Starts `lavinmqperf "$@"` in the background with stdin held open, waits for
# `ready` in its output, samples the broker's RSS, then ends the tool (which
# closes its connections, and with them its exclusive queues).
held_rss() {
    local label=$1 broker=$2 uri=$3 pid=$4 ready=$5
    shift 5
    await_no_clients "$(port_of "$uri")"
    local before perf _ ok=0
    echo "  [${SECONDS}s] $broker: RSS $label" >&2
    before=$(rss_settled "$pid")
    rm -f "$WORK/hold"
    mkfifo "$WORK/hold"
    "$PERF" "$@" --uri "$uri" <"$WORK/hold" >"$WORK/held.out" 2>&1 &
    perf=$!
    HELD+=("$perf")
    exec 9>"$WORK/hold" # stdin stays open: connection-count waits for a line
    for _ in $(seq 240); do
        grep -q "$ready" "$WORK/held.out" 2>/dev/null && { ok=1; break; }
        kill -0 "$perf" 2>/dev/null || break
        sleep 0.5
    done
    if [ "$ok" = 1 ]; then
        sleep 1
        record_rss "$label" "$broker" "$(rss_settled "$pid")" "$before"
    else
        echo "$label on $broker failed: $(tail -c 300 "$WORK/held.out")" >&2
        record_rss "$label" "$broker" failed "$before"
    fi
    kill -TERM "$perf" 2>/dev/null || true
    exec 9>&-
    wait "$perf" 2>/dev/null || true
    HELD=()
    rm -f "$WORK/hold"
    await_no_clients "$(port_of "$uri")"
}

memory() {
    local broker=$1 uri=$2 pid=$3
    sleep 2
    local idle
    idle=$(rss_settled "$pid")
    record_rss "idle (fresh broker)" "$broker" "$idle" "$idle"
    # Server-named exclusive queues, gone when the tool disconnects.
    held_rss "with 1,000 queues" "$broker" "$uri" "$pid" "queues declared" queue-count -q 1000
    held_rss "with 1,000 connections" "$broker" "$uri" "$pid" "Press enter" connection-count -x 1000
}

thousands() { echo "$1" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta'; }

# Publishes BIG_BACKLOG 16 B messages to one queue (no consumer) until the
# queue holds them (or stops growing for a minute: a broker may block
# publishers in a memory alarm; or BIG_TIMEOUT passed), then samples RSS.
# On restarted brokers.
big_backlog() {
    local broker=$1 uri=$2 pid=$3 q="bench-big-$RANDOM" label
    label="with $(thousands "$BIG_BACKLOG") messages queued"
    local before n=0 last=-1 stalled=0 until=$((SECONDS + BIG_TIMEOUT))
    echo "  [${SECONDS}s] $broker: RSS $label" >&2
    before=$(rss_settled "$pid")
    "$PERF" throughput -y 0 -C "$BIG_BACKLOG" -u "$q" --uri "$uri" -q -j >/dev/null 2>"$WORK/err" &
    local perf=$!
    HELD+=("$perf")
    while :; do
        sleep 2
        n=$(admin "$uri" count "$q" 2>/dev/null || echo 0)
        [ "$n" -ge "$BIG_BACKLOG" ] && break
        if [ "$n" = "$last" ]; then
            stalled=$((stalled + 2))
            [ "$stalled" -ge 60 ] && break
        else
            stalled=0
        fi
        [ "$SECONDS" -ge "$until" ] && break
        last=$n
    done
    kill "$perf" 2>/dev/null || true
    wait "$perf" 2>/dev/null || true
    HELD=()
    if [ "$n" -ge "$BIG_BACKLOG" ]; then
        record_rss "$label" "$broker" "$(rss_settled "$pid")" "$before"
    else
        echo "big backlog on $broker: only $n of $BIG_BACKLOG messages queued $(tail -2 "$WORK/err")" >&2
        record_rss "$label" "$broker" failed "$before"
    fi
    delete_queues "$uri" "$q"
}

echo "memory: idle, 1,000 queues, 1,000 connections" >&2
memory lavinmq "$URI_L" "$LPID"
if [ "$ANCHOR" = 1 ]; then memory lavinmq-2.9.1 "$URI_A" "$APID"; fi
if [ "$RMQ" = 1 ]; then memory rabbitmq "$URI_R" "$RPID"; fi
for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    for gen in "${GENS[@]}"; do
        scenarios "$gen" lavinmq "$URI_L" "$LPID"
        if [ "$ANCHOR" = 1 ]; then scenarios "$gen" lavinmq-2.9.1 "$URI_A" "$APID"; fi
        if [ "$RMQ" = 1 ]; then scenarios "$gen" rabbitmq "$URI_R" "$RPID"; fi
    done
done
record_rss "idle after the rounds" lavinmq "$(rss_settled "$LPID")" 0
if [ "$ANCHOR" = 1 ]; then record_rss "idle after the rounds" lavinmq-2.9.1 "$(rss_settled "$APID")" 0; fi
if [ "$RMQ" = 1 ]; then record_rss "idle after the rounds" rabbitmq "$(rss_settled "$RPID")" 0; fi

if [ "$BIG_BACKLOG" -gt 0 ]; then
    echo "memory with $BIG_BACKLOG messages queued (restarting the brokers first)" >&2
    stop_lavinmq
    start_lavinmq
    sleep 2
    big_backlog lavinmq "$URI_L" "$LPID"
    if [ "$ANCHOR" = 1 ]; then
        stop_anchor
        if start_anchor; then
            sleep 2
            big_backlog lavinmq-2.9.1 "$URI_A" "$APID"
        else
            record_rss "with $(thousands "$BIG_BACKLOG") messages queued" lavinmq-2.9.1 failed 0
        fi
    fi
    if [ "$RMQ" = 1 ]; then
        stop_rabbitmq >&2
        if start_rabbitmq; then
            sleep 2
            big_backlog rabbitmq "$URI_R" "$RPID"
        else
            record_rss "with $(thousands "$BIG_BACKLOG") messages queued" rabbitmq failed 0
        fi
    fi
fi

python3 - "$RESULTS" "$DURATION" "$ROUNDS" "$RMQ" "$DURABLE_BIND" "$ANCHOR" "${GENS[*]}" <<'PY'
import statistics, sys
path, duration, rounds, rmq, durable_bind, anchor, gens = sys.argv[1:]
gens = gens.split()
BROKERS = [("lavinmq", "lavinmq"), ("lavinmq-2.9.1", "LavinMQ 2.9.1"), ("rabbitmq", "RabbitMQ")]
rows, rss, notes, latency = {}, {}, [], {}
cpu = {}
for line in open(path):
    kind, label, *rest = line.rstrip("\n").split("|")
    if kind == "lat":
        gen, broker, p50, p99 = rest
        latency.setdefault(label, {}).setdefault(gen, {}).setdefault(broker, []).append((float(p50), float(p99)))
        continue
    if kind == "rate":
        gen, broker, value, peak, us = rest
        rows.setdefault(label, {}).setdefault(gen, {}).setdefault(broker, []).append((value, int(peak)))
        if us:
            cpu.setdefault(label, {}).setdefault(gen, {}).setdefault(broker, []).append(float(us))
    else:
        broker, value, before = rest
        rss.setdefault(label, {})[broker] = (value, int(before))

def median(label, gen, broker, runs):
    """(cell text, rate or None, peak RSS MB or None)"""
    if not runs:
        return "-", None, None
    ok = [float(v) for v, _ in runs if v not in ("failed", "n/a")]
    peak = max(s for _, s in runs) / 1024 or None
    if not ok:
        return runs[0][0], None, peak
    if len(ok) < len(runs):
        notes.append(f"{label}: {broker} ({gen} lavinmqperf) failed in {len(runs) - len(ok)} of "
                     f"{len(runs)} rounds (median of the others)")
    m = statistics.median(ok)
    return f"{m:,.0f}", m, peak

def ratio(a, b, width, digits):
    return f"{a / b:{width - 1}.{digits}f}x" if a and b else f"{'-':>{width}}"

print(f"Median of {rounds} rounds, {duration} s per run (msgs/s unless stated; peak broker RSS in MB)")
print("perf: the load generator, ours (target/release/lavinmqperf) or LavinMQ 2.9.1's own (2.9.1);")
print("vs 2.9.1, vs RMQ: our rate / LavinMQ 2.9.1's, / RabbitMQ's")
widths = {"lavinmq": 12, "lavinmq-2.9.1": 13, "rabbitmq": 12}
print(f"{'scenario':40} {'perf':5} " + " ".join(f"{name:>{widths[b]}} {'RSS':>6}" for b, name in BROKERS)
      + f" {'vs 2.9.1':>8} {'vs RMQ':>7}")
mb = lambda v: f"{v:6.0f}" if v else f"{'-':>6}"
for label, by_gen in rows.items():
    for gen in gens:
        if gen not in by_gen:
            continue
        by = by_gen[gen]
        cells, rate = [], {}
        for b, _ in BROKERS:
            text, rate[b], peak = median(label, gen, b, by.get(b))
            cells.append(f"{text:>{widths[b]}} {mb(peak)}")
        print(f"{label:40} {gen:5} " + " ".join(cells) + " "
              + ratio(rate["lavinmq"], rate["lavinmq-2.9.1"], 8, 1) + " "
              + ratio(rate["lavinmq"], rate["rabbitmq"], 7, 1))

print()
print("Broker CPU per message (user + system time of the broker process over the run, µs; median)")
print(f"{'scenario':40} {'perf':5} " + " ".join(f"{name:>{max(9, len(name))}}" for _, name in BROKERS)
      + f" {'vs 2.9.1':>8} {'vs RMQ':>7}")
for label, by_gen in cpu.items():
    for gen in gens:
        if gen not in by_gen:
            continue
        by = by_gen[gen]
        us = {b: statistics.median(by[b]) if by.get(b) else None for b, _ in BROKERS}
        cells = [f"{us[b]:{max(9, len(name))}.2f}" if us[b] is not None else f"{'-':>{max(9, len(name))}}"
                 for b, name in BROKERS]
        print(f"{label:40} {gen:5} " + " ".join(cells) + " "
              + ratio(us["lavinmq"], us["lavinmq-2.9.1"], 8, 2) + " "
              + ratio(us["lavinmq"], us["rabbitmq"], 7, 2))

if latency:
    print()
    print("End-to-end latency by the generator's clock, p50 / p99 (ms; median over the rounds)")
    print(f"{'scenario':40} {'perf':5} " + " ".join(f"{name:>15}" for _, name in BROKERS))
    for label, by_gen in latency.items():
        for gen in gens:
            by = by_gen.get(gen, {})
            cells = []
            for b, _ in BROKERS:
                runs = by.get(b)
                if runs:
                    p50 = statistics.median(r[0] for r in runs)
                    p99 = statistics.median(r[1] for r in runs)
                    cells.append(f"{p50:.3f} / {p99:.2f}".rjust(15))
                else:
                    cells.append(f"{'-':>15}")
            print(f"{label:40} {gen:5} " + " ".join(cells))
for n in notes:
    print(f"  note: {n}")
if durable_bind == "0":
    print("  note: durable bind churn n/a: lavinmqperf bind-churn has no --durable flag")
print("  note: fanout counts deliveries (all 10 queues)")
if "2.9.1" in gens:
    print("  note: LavinMQ 2.9.1's lavinmqperf: bind churn runs 2 + 5 s per case whatever the duration,\n"
          "        the transient and the durable case in one run (one peak RSS for both); it has no --unbind;\n"
          "        with 100 queues each publisher publishes to every queue in turn, and on few cores its\n"
          "        publishers starve its consumers; its runs end on a whole-second tick, so its consume-only\n"
          "        rate is the backlog over whole seconds (a lower bound; the CPU per message holds)")
else:
    print("  note: LavinMQ 2.9.1's lavinmqperf not there: rows with our load generator only")
if anchor != "1":
    print("  note: LavinMQ 2.9.1 (broker) not measured")

print()
print("Broker RSS (MB; in brackets the growth over the RSS just before; first three on fresh brokers)")
def cell(v):
    if v is None:
        return "-"
    value, before = v
    if value == "failed":
        return "failed"
    kb = int(value)
    grow = f" (+{(kb - before) / 1024:.1f})" if before and kb != before else ""
    return f"{kb / 1024:.1f} MB{grow}"
for label, by in rss.items():
    line = f"RSS {label}: lavinmq {cell(by.get('lavinmq'))}"
    if anchor == "1":
        line += f", LavinMQ 2.9.1 {cell(by.get('lavinmq-2.9.1'))}"
    if rmq == "1":
        line += f", RabbitMQ {cell(by.get('rabbitmq'))}"
    print(line)
PY
