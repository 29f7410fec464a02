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


def test_deduplication_on_an_exchange(conn, cleanup):
    ch, ex = declare_or_skip(conn, cleanup, "fanout", {"x-message-deduplication": True})
    q = bound_queue(ch, cleanup, ex)
    ch.confirm_delivery()
    for msg_id in ("a", "b", "a", "c", "b"):
        ch.basic_publish(ex, "", b"m", pika.BasicProperties(headers={"x-deduplication-header": msg_id}))
    if count(ch, q) == 5:
        pytest.skip("broker does not deduplicate")
    assert count(ch, q) == 3
