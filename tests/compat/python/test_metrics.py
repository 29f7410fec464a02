"""Prometheus metrics (LavinMQ's /metrics and /metrics/detailed on the
management port) read by the Prometheus project's own Python parser
(prometheus_client.parser), the way an exporter or a test harness reads them.

Needs MGMT_URL=http://user:pass@host:port (run.sh sets it for the broker it
starts); skipped without it, and against a broker that serves no /metrics on
its management port (RabbitMQ serves it from rabbitmq_prometheus elsewhere).
"""
import os
from urllib.parse import urlsplit

import pika
import pytest
import requests

from conftest import connect, families, sample_value, uniq

MGMT_URL = os.environ.get("MGMT_URL")
pytestmark = pytest.mark.skipif(not MGMT_URL, reason="MGMT_URL not set")

TIMEOUT = 5

# Every family /metrics/detailed knows, LavinMQ's and RabbitMQ's names.
DETAILED_FAMILIES = [
    "connection_churn_metrics",
    "queue_coarse_metrics",
    "queue_consumer_count",
    "queue_delivery_metrics",
    "connection_coarse_metrics",
    "connection_metrics",
    "channel_metrics",
    "exchange_metrics",
    "vhost_message_stats",
]

# A few families of each endpoint, as the parser names them (a counter's
# family name drops its `_total`), with their types.
OVERVIEW_EXPECTED = {
    "lavinmq_identity_info": "gauge",
    "lavinmq_connections": "gauge",
    "lavinmq_queue_messages_ready": "gauge",
    "lavinmq_connections_opened": "counter",
    "lavinmq_global_messages_confirmed": "counter",
    "lavinmq_global_messages_delivered": "counter",
    "lavinmq_mfile_count": "gauge",
    "lavinmq_stats_rates_collection_duration_seconds": "gauge",
    "lavinmq_uptime": "counter",
    "telemetry_scrape_duration_seconds": "gauge",
    "telemetry_scrape_mem": "gauge",
}
DETAILED_EXPECTED = {
    "lavinmq_detailed_consumers_added": "counter",
    "lavinmq_detailed_queue_messages_ready": "gauge",
    "lavinmq_detailed_queue_deduplication": "counter",
    "lavinmq_detailed_queue_consumers": "gauge",
    "lavinmq_detailed_connection_incoming_bytes": "counter",
    "lavinmq_detailed_channel_consumers": "gauge",
    "lavinmq_detailed_exchange_deduplication": "counter",
    "lavinmq_detailed_vhost_queues": "gauge",
    "telemetry_scrape_mem": "gauge",
}


def get(path, params=None):
    parts = urlsplit(MGMT_URL)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    auth = (parts.username or "guest", parts.password or "guest")
    r = requests.get(base + path, params=params, auth=auth, timeout=TIMEOUT)
    if r.status_code == 404:
        pytest.skip(f"no {path} on the management port")
    assert r.status_code == 200, (path, r.status_code, r.text)
    assert r.headers["content-type"].startswith("text/plain"), r.headers["content-type"]
    return r.text


@pytest.fixture
def traffic():
    """An open connection with a consumer on a queue that holds messages
    (one published with confirms, one deduplicated), so that every detailed
    family has samples."""
    conn = connect()
    ch = conn.channel()
    q = uniq("metrics")
    ch.queue_declare(q, arguments={"x-message-deduplication": True})
    ch.confirm_delivery()
    headers = pika.BasicProperties(headers={"x-deduplication-header": "same"})
    for _ in range(2):
        ch.basic_publish("", q, b"m", headers)
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume(q, lambda *a: None, auto_ack=False)
    conn.process_data_events(time_limit=0.2)
    yield q
    try:
        ch.queue_delete(q)
        conn.close()
    except Exception:
        pass


def test_overview_parses_with_lavinmq_families(traffic):
    parsed = families(get("/metrics"))
    for name, kind in OVERVIEW_EXPECTED.items():
        assert name in parsed, (name, sorted(parsed))
        assert parsed[name].type == kind, (name, parsed[name].type)
    assert sample_value(parsed["lavinmq_global_messages_confirmed"]) >= 2
    assert sample_value(parsed["lavinmq_connections"]) >= 1
    assert not any(name.startswith("lavinmq_gc_") for name in parsed)


def test_detailed_with_every_family_parses(traffic):
    params = [("family", f) for f in DETAILED_FAMILIES]
    parsed = families(get("/metrics/detailed", params))
    for name, kind in DETAILED_EXPECTED.items():
        assert name in parsed, (name, sorted(parsed))
        assert parsed[name].type == kind, (name, parsed[name].type)
    dedup = parsed["lavinmq_detailed_queue_deduplication"]
    assert sample_value(dedup, queue=traffic, vhost="/") == 1
    consumers = parsed["lavinmq_detailed_queue_consumers"]
    assert sample_value(consumers, queue=traffic, vhost="/") == 1


def test_each_family_alone_and_another_prefix_parse(traffic):
    for family in DETAILED_FAMILIES:
        parsed = families(get("/metrics/detailed", {"family": family, "prefix": "x"}))
        named = [n for n in parsed if not n.startswith("telemetry_")]
        assert named and all(n.startswith("x_") for n in named), (family, sorted(parsed))
    parsed = families(get("/metrics", {"prefix": "x"}))
    assert "x_identity_info" in parsed
    labels = parsed["x_identity_info"].samples[0].labels
    assert "x_version" in labels and "x_cluster" in labels, labels


def test_confirms_counted_after_a_confirmed_publish(traffic):
    def confirmed():
        return sample_value(families(get("/metrics"))["lavinmq_global_messages_confirmed"])

    before = confirmed()
    conn = connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for _ in range(3):
            ch.basic_publish("", traffic, b"confirmed")
    finally:
        conn.close()
    # Counted before each confirm is sent, and kept once the channel is gone.
    assert confirmed() >= before + 3
