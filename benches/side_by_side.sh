#!/usr/bin/env bash
# Side-by-side benchmark: the same lavinmqperf scenarios against lavinmq and, when
# Debian's rabbitmq-server is installed, against RabbitMQ (a private node with its
# own name, data dir and ports, started by scripts/start-rabbitmq.sh and stopped
# again at the end), alternating, ROUNDS rounds.
# Prints the median of each scenario, the ratio ours/RabbitMQ, peak RSS during
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
#   RPORT, RDIST_PORT, RNODE  RabbitMQ's AMQP port, distribution port and node
#                name (default 5783, 25783, sbs-bench@localhost)
# A scenario that fails for a broker shows "failed" in its cell; the run goes on.
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

# 1,000 connections need more than 1024 descriptors, in the tool and the brokers.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build --release --bin lavinmq --bin lavinmqperf >&2
PERF=target/release/lavinmqperf
WORK=$(mktemp -d)
DATA=$WORK/lavinmq
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
    if [ -n "${LPID:-}" ]; then
        kill "$LPID" 2>/dev/null || true
        wait "$LPID" 2>/dev/null || true
    fi
    [ "${RMQ:-0}" = 1 ] && stop_rabbitmq >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# The housekeeping lavinmqperf has no mode for: deleting queues and reading a
# queue's message count, with a minimal AMQP 0-9-1 client (no dependencies).
cat >"$WORK/amqp_admin.py" <<'PY'
# amqp_admin.py URI delete QUEUE...  delete queues (missing ones are fine)
# amqp_admin.py URI count QUEUE      print the queue's message count
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

start_lavinmq() {
    mkdir -p "$DATA"
    target/release/lavinmq -D "$DATA" -p "$LPORT" --http-port 0 --metrics-http-port 0 --mqtt-port 0 \
        --control-unix-path "$WORK/lavinmqctl.sock" >>"$WORK/lavinmq.log" 2>&1 &
    LPID=$!
    local _
    for _ in $(seq 100); do
        ss -ltnpH "sport = :$LPORT" 2>/dev/null | grep -q "pid=$LPID," && return 0
        kill -0 "$LPID" 2>/dev/null || break
        sleep 0.1
    done
    echo "lavinmq did not start; see its log:" >&2
    tail -20 "$WORK/lavinmq.log" >&2
    return 1
}
stop_lavinmq() {
    kill "$LPID" 2>/dev/null || true
    wait "$LPID" 2>/dev/null || true
    LPID=
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

start_lavinmq
URI_L="amqp://guest:guest@127.0.0.1:$LPORT"
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

rss_kb() {
    local kb
    kb=$(awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
    echo "${kb:-0}"
}

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

. benches/proc_cpu.sh

# Runs a command (lavinmqperf, or a function running several) in the background,
# samples the broker's peak RSS meanwhile, appends a result line:
#   rate|scenario|broker|rate or "failed"|peak_rss_kb|broker CPU µs per message
# (the messages are the rate times lavinmqperf's elapsed seconds; empty for the
# churn modes)
# `how` says where the rate is: json:FIELD (the last line, lavinmqperf -j) or
# summary (the "average N things/s" of the churn modes).
run() {
    local scenario=$1 broker=$2 pid=$3 how=$4
    shift 4
    local peak=0 rc=0 r rate="" cpu="" ticks
    echo "  [${SECONDS}s] $broker: $scenario" >&2
    ticks=$(cpu_ticks "$pid")
    "$@" >"$WORK/out" 2>"$WORK/err" &
    local perf=$!
    while kill -0 "$perf" 2>/dev/null; do
        r=$(rss_kb "$pid")
        [ "$r" -gt "$peak" ] && peak=$r
        sleep 0.5
    done
    wait "$perf" || rc=$?
    ticks=$(($(cpu_ticks "$pid") - ticks))
    case $how in
    json:*)
        rate=$(tail -1 "$WORK/out" | python3 -c "import json,sys; print(json.load(sys.stdin)['${how#json:}'])" \
            2>/dev/null || true)
        cpu=$(tail -1 "$WORK/out" | python3 -c "
import json, sys
r = json.load(sys.stdin)
msgs = r['${how#json:}'] * r['elapsed_seconds']
print(f'{$ticks / $CLK_TCK / msgs * 1e6:.3f}' if msgs else '')" 2>/dev/null || true)
        ;;
    summary) rate=$(sed -n 's/^Summary: .* average \([0-9.]*\) .*/\1/p' "$WORK/out" | tail -1) ;;
    esac
    if [ "$rc" != 0 ] || [ -z "$rate" ]; then
        echo "$scenario on $broker failed (exit $rc): $(tail -2 "$WORK/err" | tr '\n' ' ')" >&2
        rate=failed
    fi
    echo "rate|$scenario|$broker|$rate|$peak|$cpu" >>"$RESULTS"
}

if "$PERF" bind-churn --help 2>/dev/null | grep -q -- '--durable'; then
    DURABLE_BIND=1
else
    DURABLE_BIND=0
fi

scenarios() {
    local broker=$1 uri=$2 pid=$3 q="bench-$RANDOM"
    run "16 B, 1 publisher 1 consumer" "$broker" "$pid" json:avg_consume_rate \
        "$PERF" throughput -z "$DURATION" -u "$q-a" --uri "$uri" -q -j
    delete_queues "$uri" "$q-a"
    run "16 B, publish only" "$broker" "$pid" json:avg_pub_rate \
        "$PERF" throughput -z "$DURATION" -y 0 -u "$q-b" --uri "$uri" -q -j
    delete_queues "$uri" "$q-b"
    # Fill the backlog (bounded: a broker in a memory alarm may stop reading).
    "$PERF" throughput -y 0 -C "$BACKLOG" -z 60 -u "$q-c" --uri "$uri" -q -j >/dev/null 2>&1 || true
    run "16 B, consume only from a backlog" "$broker" "$pid" json:avg_consume_rate \
        "$PERF" throughput -x 0 -D "$BACKLOG" -z 60 -u "$q-c" --uri "$uri" -q -j
    delete_queues "$uri" "$q-c"
    run "16 B, persistent, confirms and acks" "$broker" "$pid" json:avg_consume_rate \
        "$PERF" throughput -z "$DURATION" -p -c 1000 -a 100 -P 1000 -u "$q-d" --uri "$uri" -q -j
    delete_queues "$uri" "$q-d"
    run "1 KiB, 1 publisher 1 consumer" "$broker" "$pid" json:avg_consume_rate \
        "$PERF" throughput -z "$DURATION" -s 1024 -u "$q-e" --uri "$uri" -q -j
    delete_queues "$uri" "$q-e"
    # Each consumer gets a server-named auto-delete queue bound to amq.fanout:
    # the rate is deliveries, all 10 queues together (10x the publish rate).
    run "16 B, fanout to 10 queues (deliveries)" "$broker" "$pid" json:avg_consume_rate \
        "$PERF" throughput -z "$DURATION" -y 10 -u "" -e amq.fanout --uri "$uri" -q -j
    # Publisher and consumer N on queue N (--queue-pattern).
    run "16 B, 100 publishers on 100 queues" "$broker" "$pid" json:avg_consume_rate \
        "$PERF" throughput -z "$DURATION" -x 100 -y 100 --queue-pattern "$q-m-%" \
        --queue-pattern-from 1 --queue-pattern-to 100 --uri "$uri" -q -j
    # Also waits for the broker to work through what the publishers left in
    # its socket buffers (RabbitMQ: up to a minute).
    # shellcheck disable=SC2046
    delete_queues "$uri" $(seq -f "$q-m-%g" 100)
    # Binds a server-named exclusive queue to amq.direct, a new key each time,
    # the bindings accumulating (as LavinMQ's bind-churn does).
    run "bind churn, transient queue (bindings/s)" "$broker" "$pid" summary \
        "$PERF" bind-churn -z "$DURATION" --uri "$uri"
    if [ "$DURABLE_BIND" = 1 ]; then
        run "bind churn, durable queue (bindings/s)" "$broker" "$pid" summary \
            "$PERF" bind-churn --durable -z "$DURATION" --uri "$uri"
        # Each binding removed again at once: two round trips per binding.
        run "bind+unbind, durable queue (pairs/s)" "$broker" "$pid" summary \
            "$PERF" bind-churn --durable --unbind -z "$DURATION" --uri "$uri"
    else
        echo "rate|bind churn, durable queue (bindings/s)|$broker|n/a|0|" >>"$RESULTS"
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
[ "$RMQ" = 1 ] && memory rabbitmq "$URI_R" "$RPID"
for round in $(seq "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    scenarios lavinmq "$URI_L" "$LPID"
    [ "$RMQ" = 1 ] && scenarios rabbitmq "$URI_R" "$RPID"
done
record_rss "idle after the rounds" lavinmq "$(rss_settled "$LPID")" 0
[ "$RMQ" = 1 ] && record_rss "idle after the rounds" rabbitmq "$(rss_settled "$RPID")" 0

if [ "$BIG_BACKLOG" -gt 0 ]; then
    echo "memory with $BIG_BACKLOG messages queued (restarting the brokers first)" >&2
    stop_lavinmq
    start_lavinmq
    sleep 2
    big_backlog lavinmq "$URI_L" "$LPID"
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

python3 - "$RESULTS" "$DURATION" "$ROUNDS" "$RMQ" "$DURABLE_BIND" <<'PY'
import statistics, sys
path, duration, rounds, rmq, durable_bind = sys.argv[1:]
rows, rss, notes = {}, {}, []
cpu = {}
for line in open(path):
    kind, label, broker, value, extra, *more = line.rstrip("\n").split("|")
    if kind == "rate":
        rows.setdefault(label, {}).setdefault(broker, []).append((value, int(extra)))
        if more and more[0]:
            cpu.setdefault(label, {}).setdefault(broker, []).append(float(more[0]))
    else:
        rss.setdefault(label, {})[broker] = (value, int(extra))

def median(label, broker, runs):
    """(cell text, rate or None, peak RSS MB or None)"""
    if not runs:
        return "-", None, None
    ok = [float(v) for v, _ in runs if v not in ("failed", "n/a")]
    peak = max(s for _, s in runs) / 1024 or None
    if not ok:
        return runs[0][0], None, peak
    if len(ok) < len(runs):
        notes.append(f"{label}: {broker} failed in {len(runs) - len(ok)} of {len(runs)} rounds "
                     "(median of the others)")
    m = statistics.median(ok)
    return f"{m:,.0f}", m, peak

print(f"Median of {rounds} rounds, {duration} s per run (msgs/s unless stated; peak broker RSS in MB)")
print(f"{'scenario':40} {'lavinmq':>12} {'RSS':>6} {'RabbitMQ':>12} {'RSS':>6} {'ratio':>7}")
for label, by in rows.items():
    lt, l, lrss = median(label, "lavinmq", by.get("lavinmq"))
    rt, r, rrss = median(label, "rabbitmq", by.get("rabbitmq"))
    mb = lambda v: f"{v:6.0f}" if v else f"{'-':>6}"
    ratio = f"{l / r:6.1f}x" if l and r else "      -"
    print(f"{label:40} {lt:>12} {mb(lrss)} {rt:>12} {mb(rrss)} {ratio}")

print()
print("Broker CPU per message (user + system time of the broker process over the run, µs; median)")
print(f"{'scenario':40} {'lavinmq':>9} {'RabbitMQ':>9} {'ratio':>7}")
for label, by in cpu.items():
    l = statistics.median(by["lavinmq"]) if by.get("lavinmq") else None
    r = statistics.median(by["rabbitmq"]) if by.get("rabbitmq") else None
    us = lambda v: f"{v:9.2f}" if v is not None else f"{'-':>9}"
    ratio = f"{l / r:6.2f}x" if l and r else "      -"
    print(f"{label:40} {us(l)} {us(r)} {ratio}")
for n in notes:
    print(f"  note: {n}")
if durable_bind == "0":
    print("  note: durable bind churn n/a: lavinmqperf bind-churn has no --durable flag")
print("  note: fanout counts deliveries (all 10 queues)")

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
    if rmq == "1":
        line += f", RabbitMQ {cell(by.get('rabbitmq'))}"
    print(line)
PY
