#!/usr/bin/env bash
# Prometheus scrapes at many queues: QUEUES durable queues (default 10,000,
# imported as definitions), then SCRAPES scrapes (default 15) of
# `/metrics/detailed` with the three per-queue families (queue_coarse_metrics,
# queue_consumer_count, queue_delivery_metrics: 13 samples a queue) and of
# `/metrics`, against lavinmq and, when its binaries are found (see
# benches/lavinmq_anchor.sh), LavinMQ 2.9.1. Prints, per broker and document,
# the median and range of the HTTP request time (curl) and of the broker's own
# `telemetry_scrape_duration_seconds`, the document's lines, and the broker's
# resident memory after the scrapes.
#   QUEUES  queues (default 10000)   SCRAPES  scrapes per document (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."

QUEUES=${QUEUES:-10000}
SCRAPES=${SCRAPES:-15}
HPORT=${HPORT:-15790}
WORK=$(mktemp -d)
PID=

cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --bin lavinmq >&2
# shellcheck disable=SC1091 source=benches/lavinmq_anchor.sh
. benches/lavinmq_anchor.sh
find_anchor "$WORK"

python3 -c "
import json, sys
n = int(sys.argv[1])
queues = [{'name': 'bulk-%06d' % i, 'vhost': '/', 'durable': True, 'auto_delete': False, 'arguments': {}}
          for i in range(n)]
print(json.dumps({'queues': queues}))
" "$QUEUES" >"$WORK/definitions.json"

# median_range: "median (min-max)" of the numbers on stdin, in milliseconds.
median_range() {
    sort -g | awk '{a[NR] = $1 * 1000} END {printf "%.1f ms (%.1f-%.1f)", a[int((NR + 1) / 2)], a[1], a[NR]}'
}

# measure NAME: imports the queues into the broker on $HPORT and scrapes it.
measure() {
    local name=$1 url path
    for _ in $(seq 100); do
        curl -sf -u guest:guest "http://127.0.0.1:$HPORT/api/overview" -o /dev/null && break
        sleep 0.1
    done
    curl -sf -u guest:guest -H 'content-type: application/json' -X POST \
        --data @"$WORK/definitions.json" "http://127.0.0.1:$HPORT/api/definitions" -o /dev/null
    for path in "metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count&family=queue_delivery_metrics" metrics; do
        url="http://127.0.0.1:$HPORT/$path"
        : >"$WORK/http" && : >"$WORK/render"
        for _ in $(seq "$SCRAPES"); do
            curl -sf -u guest:guest "$url" -o "$WORK/doc" -w '%{time_total}\n' >>"$WORK/http"
            awk '/^telemetry_scrape_duration_seconds / {print $2}' "$WORK/doc" >>"$WORK/render"
        done
        printf '%-16s /%-17s lines %7d  request %s  broker %s\n' "$name" "${path%%\?*}" \
            "$(wc -l <"$WORK/doc")" "$(median_range <"$WORK/http")" "$(median_range <"$WORK/render")"
    done
    printf '%-16s RSS after the scrapes: %d MiB\n' "$name" "$(($(awk '/VmRSS/ {print $2}' "/proc/$PID/status") / 1024))"
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=
}

echo "$QUEUES queues, $SCRAPES scrapes each; medians (ranges)"
target/release/lavinmq -D "$WORK/ours" -b 127.0.0.1 -p 5790 --http-port "$HPORT" --metrics-http-port -1 \
    --mqtt-port 0 --mqtts-port -1 --amqps-port -1 --stream-port -1 \
    --control-unix-path "$WORK/ours.sock" >"$WORK/ours.log" 2>&1 &
PID=$!
measure lavinmq

if [ -n "$ANCHOR_LAVINMQ" ]; then
    "$ANCHOR_LAVINMQ" -D "$WORK/anchor" -b 127.0.0.1 -p 5791 --http-port "$HPORT" --amqps-port -1 \
        --https-port -1 --mqtt-port -1 --mqtts-port -1 --metrics-http-port -1 --clustering-port 5792 \
        --control-unix-path "$WORK/anchor.sock" >"$WORK/anchor.log" 2>&1 &
    PID=$!
    measure "LavinMQ 2.9.1"
fi
