"""Exchange extensions RabbitMQ ships as plugins and LavinMQ builds in:
delayed messages, consistent hashing, message deduplication.

A broker without the extension refuses the exchange type (COMMAND_INVALID);
such tests are skipped, so the suite also runs against a plain RabbitMQ.
"""
import time

import pika
import pika.exceptions
import pytest

from conftest import uniq


def declare_or_skip(conn, cleanup, kind, arguments=None, durable=False):
    ch = conn.channel()
    name = uniq("ext")
    try:
        ch.exchange_declare(name, exchange_type=kind, arguments=arguments, durable=durable)
    except pika.exceptions.ChannelClosedByBroker as e:
        if e.reply_code == 503:
            pytest.skip(f"broker has no '{kind}' exchange type")
        raise
    cleanup(lambda c: c.exchange_delete(name))
    return ch, name


def bound_queue(ch, cleanup, exchange, key=""):
    q = uniq("extq")
    ch.queue_declare(q)
    ch.queue_bind(q, exchange, key)
    cleanup(lambda c: c.queue_delete(q))
    return q


def count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def wait_count(ch, q, expected, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if count(ch, q) == expected:
            return True
        time.sleep(0.05)
    return count(ch, q) == expected


def test_delayed_message_released_after_its_delay(conn, cleanup):
    ch, ex = declare_or_skip(conn, cleanup, "x-delayed-message", {"x-delayed-type": "direct"})
    q = bound_queue(ch, cleanup, ex, "k")
    ch.confirm_delivery()
    ch.basic_publish(ex, "k", b"later", pika.BasicProperties(headers={"x-delay": 300}))
    ch.basic_publish(ex, "k", b"now")
    assert count(ch, q) == 1
    assert wait_count(ch, q, 2)
    bodies = [ch.basic_get(q, auto_ack=True)[2] for _ in range(2)]
    assert bodies == [b"now", b"later"]


def test_delayed_messages_come_out_in_due_order(conn, cleanup):
    ch, ex = declare_or_skip(conn, cleanup, "x-delayed-message", {"x-delayed-type": "fanout"})
    q = bound_queue(ch, cleanup, ex)
    ch.confirm_delivery()
    for delay in (400, 100, 250):
        ch.basic_publish(ex, "", str(delay).encode(), pika.BasicProperties(headers={"x-delay": delay}))
    assert wait_count(ch, q, 3)
    bodies = [ch.basic_get(q, auto_ack=True)[2] for _ in range(3)]
    assert bodies == [b"100", b"250", b"400"]


def test_consistent_hash_routes_each_message_to_one_queue(conn, cleanup):
    ch, ex = declare_or_skip(conn, cleanup, "x-consistent-hash")
    queues = [bound_queue(ch, cleanup, ex, "10") for _ in range(3)]
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish(ex, f"key-{i}", b"x")
    counts = [count(ch, q) for q in queues]
    assert sum(counts) == 300, counts
    # The same routing key always goes to the same queue.
    before = [count(ch, q) for q in queues]
    for _ in range(5):
        ch.basic_publish(ex, "fixed", b"y")
    after = [count(ch, q) for q in queues]
    assert sorted(a - b for a, b in zip(after, before)) == [0, 0, 5]


# Queues bound with weights 1, 3 and 2 own RabbitMQ's buckets 0, 1-3 and 4-5.
BUCKET_OWNER = [0, 1, 1, 1, 2, 2]
# RabbitMQ's buckets (of six) for the routing keys k0..k39 and for the
# header values "0".."19".
RABBITMQ_KEY_BUCKETS = [1, 3, 5, 1, 2, 4, 1, 3, 5, 2, 4, 4, 2, 2, 1, 0, 0, 5, 0, 1,
                        4, 3, 4, 1, 3, 0, 5, 3, 4, 2, 2, 3, 2, 4, 5, 2, 0, 5, 1, 0]
RABBITMQ_TEXT_BUCKETS = [3, 2, 5, 2, 0, 0, 3, 2, 1, 0, 2, 3, 1, 3, 3, 5, 0, 2, 2, 2]


def placements(conn, cleanup, arguments, messages):
    """Publishes (routing key, properties) pairs, body = index; returns the
    queue index each landed in."""
    ch, ex = declare_or_skip(conn, cleanup, "x-consistent-hash", arguments)
    queues = [bound_queue(ch, cleanup, ex, w) for w in ("1", "3", "2")]
    ch.confirm_delivery()
    for i, (key, props) in enumerate(messages):
        ch.basic_publish(ex, key, str(i).encode(), props)
    placed = [None] * len(messages)
    for index, q in enumerate(queues):
        while True:
            _, _, body = ch.basic_get(q, auto_ack=True)
            if body is None:
                break
            placed[int(body)] = index
    return placed


def test_consistent_hash_places_keys_as_rabbitmq(conn, cleanup):
    """Run against RabbitMQ with its consistent-hash plugin, this passes too."""
    messages = [(f"k{i}", None) for i in range(40)]
    placed = placements(conn, cleanup, None, messages)
    assert placed == [BUCKET_OWNER[b] for b in RABBITMQ_KEY_BUCKETS]


def test_consistent_hash_on_a_header_and_a_property_as_rabbitmq(conn, cleanup):
    """RabbitMQ 4's hashing of header and property values (RabbitMQ 3 hashed
    the header's type along with its value)."""
    props = conn._impl.server_properties
    if props.get("product") == "RabbitMQ" and str(props.get("version", "")).startswith("3."):
        pytest.skip("RabbitMQ 3 hashes headers differently from RabbitMQ 4")
    expected = [BUCKET_OWNER[b] for b in RABBITMQ_TEXT_BUCKETS]
    by_header = [("same", pika.BasicProperties(headers={"user": str(i)})) for i in range(20)]
    assert placements(conn, cleanup, {"hash-header": "user"}, by_header) == expected
    by_id = [("same", pika.BasicProperties(message_id=str(i))) for i in range(20)]
    assert placements(conn, cleanup, {"hash-property": "message_id"}, by_id) == expected


def test_deduplication_on_an_exchange(conn, cleanup):
    ch, ex = declare_or_skip(conn, cleanup, "fanout", {"x-message-deduplication": True})
    q = bound_queue(ch, cleanup, ex)
    ch.confirm_delivery()
    for msg_id in ("a", "b", "a", "c", "b"):
        ch.basic_publish(ex, "", b"m", pika.BasicProperties(headers={"x-deduplication-header": msg_id}))
    if count(ch, q) == 5:
        pytest.skip("broker does not deduplicate")
    assert count(ch, q) == 3
