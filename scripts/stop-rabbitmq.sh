#!/usr/bin/env bash
# Stop the reference RabbitMQ started by scripts/start-rabbitmq.sh.
set -euo pipefail
NODE="${RABBITMQ_COMPAT_NODENAME:-compat@localhost}"
BASE="${RABBITMQ_COMPAT_BASE:-/tmp/rabbitmq-compat}"
export HOME="$BASE/home"
rabbitmqctl() { /usr/lib/rabbitmq/bin/rabbitmqctl "$@"; }
if rabbitmqctl -n "$NODE" status >/dev/null 2>&1; then
    rabbitmqctl -n "$NODE" stop >/dev/null
    echo "RabbitMQ node $NODE stopped"
else
    echo "RabbitMQ node $NODE not running"
fi
