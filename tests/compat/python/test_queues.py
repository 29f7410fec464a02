"""queue.declare / bind / purge / delete semantics and their error codes."""
import pika
import pika.exceptions
import pytest

from conftest import channel_error, connect, drain, uniq


def test_server_named_queue_has_amq_gen_prefix(ch):
    ok = ch.queue_declare("", exclusive=True)
    assert ok.method.queue.startswith("amq.gen-"), ok.method.queue
    assert ok.method.message_count == 0
    assert ok.method.consumer_count == 0


def test_server_named_queues_are_unique(ch):
    a = ch.queue_declare("", exclusive=True).method.queue
    b = ch.queue_declare("", exclusive=True).method.queue
    assert a != b


def test_declare_is_idempotent(ch, queue):
    ok = ch.queue_declare(queue)
    assert ok.method.queue == queue


def test_passive_declare_missing_queue_404(ch):
    name = uniq("missing")
    with channel_error(404, "NOT_FOUND"):
        ch.queue_declare(name, passive=True)


def test_passive_declare_existing_returns_counts(conn, ch, queue):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    for i in range(3):
        ch.basic_publish("", queue, b"m%d" % i)
    ch2 = conn.channel()
    ch2.basic_consume(queue, lambda *a: None, auto_ack=False)
    ok = ch.queue_declare(queue, passive=True)
    # The consumer may already hold messages (prefetch unlimited), so the
    # ready count is 0..3; the consumer count must be 1.
    assert ok.method.consumer_count == 1
    assert 0 <= ok.method.message_count <= 3


def test_declare_ok_message_count(ch, queue):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    for i in range(5):
        ch.basic_publish("", queue, b"x")
    ok = ch.queue_declare(queue, passive=True)
    assert ok.method.message_count == 5
    assert ok.method.consumer_count == 0
    # Non-passive redeclare reports the same counts.
    ok = ch.queue_declare(queue)
    assert ok.method.message_count == 5


def test_redeclare_with_different_durable_flag_406(ch, cleanup):
    name = uniq("dur")
    ch.queue_declare(name, durable=True)
    cleanup(lambda c: c.queue_delete(name))
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.queue_declare(name, durable=False)


def test_redeclare_with_different_auto_delete_406(ch, cleanup):
    name = uniq("ad")
    ch.queue_declare(name, auto_delete=False)
    cleanup(lambda c: c.queue_delete(name))
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.queue_declare(name, auto_delete=True)


def test_redeclare_with_different_arguments_406(ch, cleanup):
    name = uniq("args")
    ch.queue_declare(name, arguments={"x-max-length": 10})
    cleanup(lambda c: c.queue_delete(name))
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.queue_declare(name, arguments={"x-max-length": 20})


def test_exclusive_queue_from_other_connection_405(ch):
    name = uniq("excl")
    ch.queue_declare(name, exclusive=True)
    other = connect()
    try:
        och = other.channel()
        with channel_error(405, "RESOURCE_LOCKED"):
            och.queue_declare(name, passive=True)
        och = other.channel()
        with channel_error(405, "RESOURCE_LOCKED"):
            och.basic_consume(name, lambda *a: None)
        och = other.channel()
        with channel_error(405, "RESOURCE_LOCKED"):
            och.queue_delete(name)
    finally:
        other.close()


def test_exclusive_queue_deleted_when_connection_closes():
    name = uniq("excl")
    c1 = connect()
    c1.channel().queue_declare(name, exclusive=True)
    c1.close()
    c2 = connect()
    try:
        with channel_error(404, "NOT_FOUND"):
            c2.channel().queue_declare(name, passive=True)
    finally:
        c2.close()


def test_auto_delete_queue_deleted_after_last_consumer_cancels(conn, ch):
    name = uniq("autodel")
    ch.queue_declare(name, auto_delete=True)
    tag = ch.basic_consume(name, lambda *a: None)
    ch.basic_cancel(tag)
    ch2 = conn.channel()
    with channel_error(404, "NOT_FOUND"):
        ch2.queue_declare(name, passive=True)


def test_purge_returns_count(ch, queue):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    for _ in range(7):
        ch.basic_publish("", queue, b"p")
    ok = ch.queue_purge(queue)
    assert ok.method.message_count == 7
    assert ch.queue_declare(queue, passive=True).method.message_count == 0
    assert ch.queue_purge(queue).method.message_count == 0


def test_purge_missing_queue_404(ch):
    with channel_error(404, "NOT_FOUND"):
        ch.queue_purge(uniq("missing"))


def test_purge_does_not_touch_unacked(conn, ch, queue):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    for _ in range(3):
        ch.basic_publish("", queue, b"u")
    got = drain(ch, queue, 1, auto_ack=False)
    assert len(got) == 1
    ch2 = conn.channel()
    assert ch2.queue_purge(queue).method.message_count == 2
    # Closing the channel requeues the unacked message.
    ch.close()
    assert ch2.queue_declare(queue, passive=True).method.message_count == 1


def test_delete_returns_message_count(ch):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    name = uniq("del")
    ch.queue_declare(name)
    for _ in range(4):
        ch.basic_publish("", name, b"d")
    ok = ch.queue_delete(name)
    assert ok.method.message_count == 4


def test_delete_if_empty_406(ch, queue):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    ch.basic_publish("", queue, b"x")
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.queue_delete(queue, if_empty=True)


def test_delete_if_unused_406(conn, ch, queue):
    ch.basic_consume(queue, lambda *a: None)
    ch2 = conn.channel()
    with channel_error(406, "PRECONDITION_FAILED"):
        ch2.queue_delete(queue, if_unused=True)


def test_delete_if_empty_and_unused_succeeds_when_so(ch):
    name = uniq("del")
    ch.queue_declare(name)
    ok = ch.queue_delete(name, if_unused=True, if_empty=True)
    assert ok.method.message_count == 0


def test_delete_missing_queue_is_ok(ch):
    # RabbitMQ 3.x answers queue.delete of a missing queue with delete-ok (count 0).
    ok = ch.queue_delete(uniq("missing"))
    assert ok.method.message_count == 0


def test_bind_missing_queue_404(ch):
    with channel_error(404, "NOT_FOUND"):
        ch.queue_bind(uniq("missing"), "amq.direct", routing_key="k")


def test_bind_missing_exchange_404(ch, queue):
    with channel_error(404, "NOT_FOUND"):
        ch.queue_bind(queue, uniq("missingx"), routing_key="k")


def test_unbind_then_no_routing(ch, queue):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    ch.queue_bind(queue, "amq.direct", routing_key=queue)
    ch.basic_publish("amq.direct", queue, b"1")
    ch.queue_unbind(queue, "amq.direct", routing_key=queue)
    ch.basic_publish("amq.direct", queue, b"2")
    assert ch.queue_declare(queue, passive=True).method.message_count == 1


def test_unbind_nonexistent_binding_is_ok(ch, queue):
    ch.queue_unbind(queue, "amq.direct", routing_key="never-bound")


def test_default_exchange_routes_by_queue_name(ch, queue):
    ch.basic_publish("", queue, b"hello")
    m, p, b = ch.basic_get(queue, auto_ack=True)
    assert b == b"hello"
    assert m.exchange == ""
    assert m.routing_key == queue


def test_bind_to_default_exchange_403(ch, queue):
    with channel_error(403, "ACCESS_REFUSED"):
        ch.queue_bind(queue, "", routing_key="foo")


def test_declare_amq_prefixed_queue_403(ch):
    with channel_error(403, "ACCESS_REFUSED"):
        ch.queue_declare("amq." + uniq("q"))


def test_max_length_drops_head(ch, cleanup):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    name = uniq("maxlen")
    ch.queue_declare(name, arguments={"x-max-length": 2})
    cleanup(lambda c: c.queue_delete(name))
    for i in range(5):
        ch.basic_publish("", name, b"%d" % i)
    got = [b for _, _, b in drain(ch, name, 2)]
    assert got == [b"3", b"4"]


def test_message_ttl_expires(conn, ch, cleanup):
    name = uniq("ttl")
    ch.queue_declare(name, arguments={"x-message-ttl": 50})
    cleanup(lambda c: c.queue_delete(name))
    ch.basic_publish("", name, b"x")
    conn.sleep(0.3)
    m, _, _ = ch.basic_get(name, auto_ack=True)
    assert m is None


def test_dead_letter_on_reject(ch, cleanup):
    ch.confirm_delivery()  # publishes are confirmed => enqueued before counting
    dlq = uniq("dlq")
    q = uniq("src")
    ch.queue_declare(dlq)
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    cleanup(lambda c: c.queue_delete(q))
    cleanup(lambda c: c.queue_delete(dlq))
    ch.basic_publish("", q, b"dead")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    got = drain(ch, dlq, 1)
    assert len(got) == 1
    _, props, body = got[0]
    assert body == b"dead"
    death = props.headers["x-death"][0]
    assert death["queue"] == q
    assert death["reason"] == "rejected"
    assert death["count"] == 1
