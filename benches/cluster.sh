#!/usr/bin/env bash
# Clustering benchmark: the same lavinmqperf scenarios against a single node
# (clustering off), then a clustered leader with 0, 1 and 2 in-sync followers,
# all on this machine with a private etcd, alternating ROUNDS rounds; prints the
# medians, the ratio to the single node and the leader's CPU time per message.
# Then the failover time after `kill -9` and after SIGTERM of the leader (time
# until a client through another node's address gets a publish confirmed), and
# the largest follower lag seen in /api/nodes during a confirmed-publish run.
#   DURATION  seconds per run (default 5)    ROUNDS  rounds (default 3)
#   TTL       lease TTL in seconds (default 2, as the tests)
#   BASE      first port (default 5900; uses BASE..BASE+40)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
TTL=${TTL:-2}
BASE=${BASE:-5900}

cargo build --release --bin lavinmq --bin lavinmqperf >&2
BIN=target/release/lavinmq
PERF=target/release/lavinmqperf
ETCD=${ETCD_BIN:-$(command -v etcd || echo /usr/bin/etcd)}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

ECLIENT=$((BASE + 1))
"$ETCD" --name bench --data-dir "$WORK/etcd" \
    --listen-client-urls "http://127.0.0.1:$ECLIENT" --advertise-client-urls "http://127.0.0.1:$ECLIENT" \
    --listen-peer-urls "http://127.0.0.1:$((BASE + 2))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((BASE + 2))" \
    --initial-cluster "bench=http://127.0.0.1:$((BASE + 2))" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$ECLIENT/health" >/dev/null 2>&1 && break
    sleep 0.2
done

# Node i's ports: AMQP BASE+10+i, MQTT BASE+20+i, HTTP BASE+30+i, clustering BASE+40+i.
NODE_PIDS=()
start_node() { # start_node i prefix [clustered]: a fresh data dir per prefix
    local i=$1 prefix=$2 args=()
    if [ "${3:-}" = clustered ]; then
        args=(--clustering --clustering-port $((BASE + 40 + i))
            --clustering-advertised-uri "tcp://127.0.0.1:$((BASE + 40 + i))"
            --clustering-etcd-endpoints "127.0.0.1:$ECLIENT" --clustering-etcd-prefix "$prefix"
            --clustering-lease-ttl "$TTL")
    fi
    NO_COLOR=1 "$BIN" -D "$WORK/d$i-$prefix" -p $((BASE + 10 + i)) --mqtt-port $((BASE + 20 + i)) --stream-port -1 \
        --http-port $((BASE + 30 + i)) --metrics-http-port -1 --amqps-port -1 --mqtts-port -1 \
        --https-port -1 --control-unix-path "$WORK/ctl$i.sock" "${args[@]}" >"$WORK/n$i-$prefix.log" 2>&1 &
    NODE_PIDS[i]=$!
    PIDS+=($!)
}
stop_nodes() {
    local p
    for p in "${NODE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    NODE_PIDS=()
}
wait_for() { # wait_for file text [seconds]
    local n=$((${3:-30} * 10))
    for _ in $(seq "$n"); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "timed out waiting for '$2' in $1" >&2
    return 1
}
. benches/proc_cpu.sh

# A setup: 0 = clustering off; N >= 1 = a leader (node 0) and N-1 followers.
setup() {
    # Every run gets fresh data dirs: a queue left by an earlier run would
    # hand the next one a backlog to consume.
    local n=$1 prefix="c$1-$RANDOM"
    if [ "$n" = 0 ]; then
        start_node 0 "$prefix"
        wait_for "$WORK/n0-$prefix.log" "AMQP listening"
        return
    fi
    start_node 0 "$prefix" clustered
    wait_for "$WORK/n0-$prefix.log" "cluster: elected leader"
    local i
    for i in $(seq 1 $((n - 1))); do
        start_node "$i" "$prefix" clustered
        wait_for "$WORK/n$i-$prefix.log" "cluster: in sync with leader"
    done
}

# run label setup perf-args...: one measurement; prints "rate cpu_us_per_msg".
measure() {
    local setup_n=$1 field=$2
    shift 2
    setup "$setup_n"
    local pid=${NODE_PIDS[0]} t0 t1 out rate
    t0=$(cpu_ticks "$pid")
    out=$("$PERF" throughput -z "$DURATION" --uri "amqp://guest:guest@127.0.0.1:$((BASE + 10))" -q -j "$@" 2>/dev/null || echo '{}')
    t1=$(cpu_ticks "$pid")
    stop_nodes
    rate=$(echo "$out" | python3 -c "import json,sys; print(int(json.load(sys.stdin).get('$field', 0)))" 2>/dev/null || echo 0)
    python3 -c "
rate=$rate; ticks=$t1-$t0; hz=$CLK_TCK
total=rate*$DURATION
print(rate, '%.2f' % (ticks/hz*1e6/total) if total else 'n/a')"
}

declare -A RATE CPU
SCENARIOS=("persistent, confirms (publish only)|avg_pub_rate|-p -c 1000 -y 0"
    "transient, 1 publisher 1 consumer|avg_consume_rate|")
for round in $(seq "$ROUNDS"); do
    for sc in "${SCENARIOS[@]}"; do
        IFS='|' read -r label field args <<<"$sc"
        for n in 0 1 2 3; do
            # shellcheck disable=SC2086
            read -r r c <<<"$(measure "$n" "$field" -u "bench-$round" $args)"
            RATE["$label|$n"]+="$r "
            CPU["$label|$n"]+="$c "
            echo "round $round: $label, setup $n: $r msgs/s, $c us/msg" >&2
        done
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }
echo
echo "| scenario | setup | msgs/s (median of $ROUNDS) | ratio to single node | leader CPU µs/msg |"
echo "|---|---|---|---|---|"
for sc in "${SCENARIOS[@]}"; do
    IFS='|' read -r label _ _ <<<"$sc"
    base=$(echo "${RATE["$label|0"]}" | median)
    for n in 0 1 2 3; do
        case $n in
        0) name="single node, clustering off" ;;
        1) name="clustered, 0 followers" ;;
        2) name="clustered, 1 in-sync follower" ;;
        3) name="clustered, 2 in-sync followers" ;;
        esac
        r=$(echo "${RATE["$label|$n"]}" | median)
        c=$(echo "${CPU["$label|$n"]}" | median)
        ratio=$(python3 -c "print('%.2f' % ($r / $base) if $base else 'n/a')")
        echo "| $label | $name | $r | $ratio | $c |"
    done
done

# Follower lag under confirmed load, from the leader's /api/nodes.
setup 3
"$PERF" throughput -z "$DURATION" --uri "amqp://guest:guest@127.0.0.1:$((BASE + 10))" -p -c 1000 -y 0 -q -u lag >/dev/null 2>&1 &
LOAD=$!
MAXLAG=0
while kill -0 "$LOAD" 2>/dev/null; do
    lag=$(curl -fs -u guest:guest "http://127.0.0.1:$((BASE + 30))/api/nodes" 2>/dev/null |
        python3 -c "import json,sys; print(max([n.get('lag_bytes',0) for n in json.load(sys.stdin)] or [0]))" 2>/dev/null || echo 0)
    [ "$lag" -gt "$MAXLAG" ] && MAXLAG=$lag
    sleep 0.1
done
echo
echo "largest follower lag seen during ${DURATION} s of confirmed publishing: $MAXLAG bytes"

# Failover: time from killing the leader until a publish through node 1's
# address is confirmed.
failover() { # failover signal
    local t0 t1
    t0=$(date +%s.%N)
    kill "-$1" "${NODE_PIDS[0]}"
    until "$PERF" throughput -C 1 -y 0 -p -c 1 -z 2 --uri "amqp://guest:guest@127.0.0.1:$((BASE + 11))" -q -u fo >/dev/null 2>&1; do
        sleep 0.05
    done
    t1=$(date +%s.%N)
    python3 -c "print('%.2f' % ($t1 - $t0))"
}
echo "failover after kill -9 (lease TTL $TTL s): $(failover 9) s"
stop_nodes
setup 3
echo "failover after SIGTERM: $(failover TERM) s"
stop_nodes
