"""basic.* semantics: get/consume/ack/nack/reject/qos/recover, confirms, tx,
large bodies, property round-trip, direct reply-to, CC/BCC and error paths."""
import datetime
import decimal
import time

import pika
import pika.exceptions
import pytest
from pika import spec

from conftest import channel_error, connect, connection_error, drain, uniq


def force_roundtrip(ch):
    """basic.publish/ack have no reply: do a synchronous call so that an
    asynchronous channel close from the broker is raised."""
    ch.queue_declare("", exclusive=True, auto_delete=True)


def wait_until(conn, pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        conn.process_data_events(time_limit=0.02)
    return True


def settle(conn, seconds=0.3):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.02)


@pytest.fixture
def cq(ch, queue):
    """Confirmed channel + fresh queue."""
    ch.confirm_delivery()
    return ch, queue


# --- basic.get -------------------------------------------------------------

def test_basic_get_message_count_and_get_empty(cq):
    ch, q = cq
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    counts = []
    bodies = []
    for _ in range(3):
        m, p, b = ch.basic_get(q, auto_ack=True)
        assert isinstance(m, spec.Basic.GetOk)
        counts.append(m.message_count)
        bodies.append(b)
    assert counts == [2, 1, 0]
    assert bodies == [b"0", b"1", b"2"]
    assert ch.basic_get(q, auto_ack=True) == (None, None, None)


def test_basic_get_fields(cq):
    ch, q = cq
    ch.basic_publish("", q, b"x")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    assert m.delivery_tag == 1
    assert m.redelivered is False
    assert m.exchange == ""
    assert m.routing_key == q
    ch.basic_ack(m.delivery_tag)


def test_basic_get_missing_queue_404(ch):
    with channel_error(404, "NOT_FOUND"):
        ch.basic_get(uniq("missing"))


# --- consume / ack ------------------------------------------------------------

def test_consume_and_ack(conn, cq):
    ch, q = cq
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    got = []

    def on_msg(c, m, p, b):
        got.append(b)
        c.basic_ack(m.delivery_tag)

    tag = ch.basic_consume(q, on_msg)
    assert wait_until(conn, lambda: len(got) == 5)
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    ch.basic_cancel(tag)
    ch.close()
    ch2 = conn.channel()
    assert ch2.queue_declare(q, passive=True).method.message_count == 0


def test_consume_delivery_fields(conn, cq):
    ch, q = cq
    ch.basic_publish("", q, b"x")
    got = []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append(m), consumer_tag="my-tag")
    assert tag == "my-tag"
    assert wait_until(conn, lambda: got)
    m = got[0]
    assert m.consumer_tag == "my-tag"
    assert m.delivery_tag == 1
    assert m.redelivered is False
    assert m.routing_key == q


def test_server_generated_consumer_tag(ch, queue):
    # pika always sends its own tag; send a blank one on the wire so that the
    # broker must generate one ("amq.ctag-..." in RabbitMQ).
    ok = []
    ch._impl._rpc(
        spec.Basic.Consume(queue=queue, consumer_tag=""),
        lambda frame: ok.append(frame.method),
        [spec.Basic.ConsumeOk],
    )
    assert wait_until(ch.connection, lambda: ok)
    assert ok[0].consumer_tag.startswith("amq.ctag-"), ok[0].consumer_tag


def test_unacked_requeued_on_channel_close_and_redelivered(conn, cq):
    ch, q = cq
    ch.basic_publish("", q, b"a")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    assert m.redelivered is False
    ch.close()
    ch2 = conn.channel()
    m, _, b = ch2.basic_get(q, auto_ack=True)
    assert b == b"a"
    assert m.redelivered is True


def test_ack_multiple(conn, cq):
    ch, q = cq
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    tags = [m.delivery_tag for m, _, _ in drain(ch, q, 4, auto_ack=False)]
    assert tags == [1, 2, 3, 4]
    ch.basic_ack(3, multiple=True)
    ch.close()
    ch2 = conn.channel()
    got = drain(ch2, q, 1)
    assert [b for _, _, b in got] == [b"3"]


def test_ack_multiple_zero_acks_all(conn, cq):
    ch, q = cq
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    assert len(drain(ch, q, 3, auto_ack=False)) == 3
    ch.basic_ack(0, multiple=True)
    ch.close()
    ch2 = conn.channel()
    assert ch2.queue_declare(q, passive=True).method.message_count == 0


def test_nack_requeue_keeps_order_and_sets_redelivered(cq):
    ch, q = cq
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    got = drain(ch, q, 3, auto_ack=False)
    assert [b for _, _, b in got] == [b"0", b"1", b"2"]
    ch.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)
    again = drain(ch, q, 3, auto_ack=True)
    assert [b for _, _, b in again] == [b"0", b"1", b"2"]
    assert all(m.redelivered for m, _, _ in again)


def test_single_nack_requeues_to_original_position(cq):
    ch, q = cq
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    m0, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_nack(m0.delivery_tag, requeue=True)
    got = drain(ch, q, 3, auto_ack=True)
    assert [b for _, _, b in got] == [b"0", b"1", b"2"]
    assert [m.redelivered for m, _, _ in got] == [True, False, False]


def test_nack_without_requeue_drops(cq):
    ch, q = cq
    ch.basic_publish("", q, b"x")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_nack(m.delivery_tag, requeue=False)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_reject_requeue(cq):
    ch, q = cq
    ch.basic_publish("", q, b"x")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=True)
    m, _, b = ch.basic_get(q, auto_ack=True)
    assert b == b"x" and m.redelivered is True


def test_reject_without_requeue_drops(conn, cq):
    ch, q = cq
    ch.basic_publish("", q, b"x")
    ch.basic_publish("", q, b"y")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    ch.close()
    ch2 = conn.channel()
    got = drain(ch2, q, 1)
    assert [b for _, _, b in got] == [b"y"]
    assert ch2.basic_get(q, auto_ack=True) == (None, None, None)


def test_no_ack_consumer(conn, cq):
    ch, q = cq
    for _ in range(3):
        ch.basic_publish("", q, b"n")
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    assert wait_until(conn, lambda: len(got) == 3)
    ch.close()
    assert conn.channel().queue_declare(q, passive=True).method.message_count == 0


def test_cancel_stops_deliveries(conn, cq):
    ch, q = cq
    got = []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", q, b"1")
    assert wait_until(conn, lambda: len(got) == 1)
    ch.basic_cancel(tag)
    ch.basic_publish("", q, b"2")
    settle(conn, 0.2)
    assert got == [b"1"]
    assert ch.queue_declare(q, passive=True).method.message_count == 1


def test_consume_missing_queue_404(ch):
    with channel_error(404, "NOT_FOUND"):
        ch.basic_consume(uniq("missing"), lambda *a: None)


def test_exclusive_consumer_403(conn, ch, queue):
    ch.basic_consume(queue, lambda *a: None, exclusive=True)
    ch2 = conn.channel()
    with channel_error(403, "ACCESS_REFUSED"):
        ch2.basic_consume(queue, lambda *a: None)


def test_exclusive_consume_on_used_queue_403(conn, ch, queue):
    ch.basic_consume(queue, lambda *a: None)
    ch2 = conn.channel()
    with channel_error(403, "ACCESS_REFUSED"):
        ch2.basic_consume(queue, lambda *a: None, exclusive=True)


# --- qos ----------------------------------------------------------------------

def test_prefetch_one_limits_in_flight(conn, cq):
    ch, q = cq
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=1)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(m))
    assert wait_until(conn, lambda: len(got) == 1)
    settle(conn, 0.3)
    assert len(got) == 1
    ch.basic_ack(got[0].delivery_tag)
    assert wait_until(conn, lambda: len(got) == 2)
    settle(conn, 0.2)
    assert len(got) == 2


def test_prefetch_per_consumer_vs_global(conn, ch, cleanup):
    ch.confirm_delivery()
    qs = []
    for _ in range(2):
        q = uniq("q")
        ch.queue_declare(q)
        cleanup(lambda c, q=q: c.queue_delete(q))
        for _ in range(3):
            ch.basic_publish("", q, b"m")
        qs.append(q)
    # Per-consumer limit (global=False, RabbitMQ's per_consumer_qos): 1 each.
    c1 = conn.channel()
    c1.basic_qos(prefetch_count=1, global_qos=False)
    got1 = []
    for q in qs:
        c1.basic_consume(q, lambda c, m, p, b: got1.append(m))
    assert wait_until(conn, lambda: len(got1) == 2)
    settle(conn, 0.3)
    assert len(got1) == 2
    c1.close()
    # Channel-wide limit (global=True): 1 across both consumers.
    c2 = conn.channel()
    c2.basic_qos(prefetch_count=1, global_qos=True)
    got2 = []
    for q in qs:
        c2.basic_consume(q, lambda c, m, p, b: got2.append(m))
    assert wait_until(conn, lambda: len(got2) == 1)
    settle(conn, 0.3)
    assert len(got2) == 1
    c2.basic_ack(got2[0].delivery_tag)
    assert wait_until(conn, lambda: len(got2) == 2)


def test_prefetch_does_not_limit_basic_get(cq):
    ch, q = cq
    ch.basic_qos(prefetch_count=1)
    for _ in range(3):
        ch.basic_publish("", q, b"g")
    assert len(drain(ch, q, 3, auto_ack=False)) == 3


# --- publisher confirms -----------------------------------------------------

def test_confirm_publish_returns(cq):
    ch, q = cq
    for i in range(10):
        ch.basic_publish("", q, b"%d" % i)  # raises if nacked
    assert ch.queue_declare(q, passive=True).method.message_count == 10


def test_confirm_unroutable_without_mandatory_is_acked(ch):
    ch.confirm_delivery()
    ch.basic_publish("amq.direct", uniq("nobody"), b"lost")


def test_confirm_mandatory_unroutable_raises(ch):
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as ei:
        ch.basic_publish("amq.direct", uniq("nobody"), b"lost", mandatory=True)
    ret = ei.value.messages[0]
    assert ret.method.reply_code == 312
    assert ret.method.reply_text == "NO_ROUTE"
    assert ret.method.exchange == "amq.direct"
    assert ret.body == b"lost"


def test_mandatory_return_without_confirms(conn, ch):
    returned = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m, p, b)))
    key = uniq("nobody")
    ch.basic_publish("amq.direct", key, b"ret", pika.BasicProperties(message_id="r1"), mandatory=True)
    assert wait_until(conn, lambda: returned)
    m, p, b = returned[0]
    assert (m.reply_code, m.reply_text, m.exchange, m.routing_key) == (312, "NO_ROUTE", "amq.direct", key)
    assert p.message_id == "r1" and b == b"ret"


def test_confirm_select_ok_and_tx_conflict(ch):
    ch.confirm_delivery()
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.tx_select()


def test_tx_then_confirm_conflict(ch):
    ch.tx_select()
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.confirm_delivery()


# --- transactions ---------------------------------------------------------------

def test_tx_publish_commit_and_rollback(conn, ch, queue):
    ch.tx_select()
    ch.basic_publish("", queue, b"rolled-back")
    ch.tx_rollback()
    ch.basic_publish("", queue, b"committed")
    check = conn.channel()
    assert check.queue_declare(queue, passive=True).method.message_count == 0
    ch.tx_commit()
    assert check.queue_declare(queue, passive=True).method.message_count == 1
    _, _, b = check.basic_get(queue, auto_ack=True)
    assert b == b"committed"


def test_tx_ack_commit_and_rollback(conn, ch, queue):
    pub = conn.channel()
    pub.confirm_delivery()
    pub.basic_publish("", queue, b"a")
    pub.basic_publish("", queue, b"b")
    ch.tx_select()
    (ma, _, _), (mb, _, _) = drain(ch, queue, 2, auto_ack=False)
    ch.basic_ack(ma.delivery_tag)
    ch.tx_rollback()      # ack discarded: "a" stays unacked
    ch.basic_ack(mb.delivery_tag)
    ch.tx_commit()        # "b" acked
    ch.close()            # "a" requeued
    got = drain(pub, queue, 1)
    assert [b for _, _, b in got] == [b"a"]
    assert pub.basic_get(queue, auto_ack=True) == (None, None, None)


def test_tx_commit_without_select_406(ch):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.tx_commit()


def test_tx_rollback_without_select_406(ch):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.tx_rollback()


# --- recover ---------------------------------------------------------------------

def test_basic_recover_redelivers_unacked(conn, cq):
    ch, q = cq
    ch.basic_publish("", q, b"r")
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(m))
    assert wait_until(conn, lambda: len(got) == 1)
    assert got[0].redelivered is False
    ch.basic_recover(requeue=True)
    assert wait_until(conn, lambda: len(got) == 2)
    assert got[1].redelivered is True
    ch.basic_ack(got[1].delivery_tag)


# --- bodies and properties -----------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 4088, 131072 - 8, 131072, 131072 * 3 + 7])
def test_body_sizes_roundtrip(conn, cq, size):
    ch, q = cq
    body = bytes((i * 7 + 3) % 256 for i in range(size))
    ch.basic_publish("", q, body)
    m, _, b = ch.basic_get(q, auto_ack=True)
    assert m is not None
    assert len(b) == size
    assert b == body
    got = []
    ch.basic_publish("", q, body)
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    assert wait_until(conn, lambda: got)
    assert got[0] == body


def test_all_properties_and_headers_roundtrip(conn, cq):
    ch, q = cq
    ts = datetime.datetime(2024, 1, 2, 3, 4, 5)
    headers = {
        "str": "värde",
        "int": 42,
        "neg": -7,
        "big": 2**40,
        "bool_t": True,
        "bool_f": False,
        "bytes": b"\x00\x01\xff",
        "decimal": decimal.Decimal("3.14"),
        "timestamp": ts,
        "none": None,
        "array": [1, "two", True, [3, 4], {"k": "v"}],
        "nested": {"a": {"b": {"c": 1}}, "list": ["x"]},
        "empty_table": {},
        "empty_array": [],
    }
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="corr-1",
        reply_to="reply-q",
        expiration="600000",
        message_id="msg-1",
        timestamp=1700000000,
        type="my.type",
        user_id="guest",  # must equal the authenticated user
        app_id="compat-tests",
        cluster_id="c1",
    )
    ch.basic_publish("", q, b"{}", props)
    for mode in ("get", "consume"):
        if mode == "get":
            m, p, b = ch.basic_get(q, auto_ack=True)
        else:
            ch.basic_publish("", q, b"{}", props)
            got = []
            ch.basic_consume(q, lambda c, m, p, b: got.append((m, p, b)), auto_ack=True)
            assert wait_until(conn, lambda: got)
            m, p, b = got[0]
        assert b == b"{}"
        for attr in ("content_type", "content_encoding", "delivery_mode", "priority",
                     "correlation_id", "reply_to", "expiration", "message_id",
                     "timestamp", "type", "user_id", "app_id", "cluster_id"):
            assert getattr(p, attr) == getattr(props, attr), attr
        assert p.headers == headers


def test_no_properties_roundtrip(cq):
    ch, q = cq
    ch.basic_publish("", q, b"bare")
    m, p, b = ch.basic_get(q, auto_ack=True)
    assert b == b"bare"
    for attr in ("content_type", "headers", "delivery_mode", "priority", "message_id",
                 "timestamp", "expiration", "user_id"):
        assert getattr(p, attr) is None, attr


def test_priority_queue_orders_by_priority(ch, cleanup):
    ch.confirm_delivery()
    q = uniq("prio")
    ch.queue_declare(q, arguments={"x-max-priority": 10})
    cleanup(lambda c: c.queue_delete(q))
    for prio in [1, 5, None, 9, 5]:
        ch.basic_publish("", q, b"%s" % str(prio).encode(), pika.BasicProperties(priority=prio))
    got = [b for _, _, b in drain(ch, q, 5)]
    assert got == [b"9", b"5", b"5", b"1", b"None"]


def test_per_message_ttl_expires(conn, cq):
    ch, q = cq
    ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="30"))
    ch.basic_publish("", q, b"long", pika.BasicProperties(expiration="600000"))
    conn.sleep(0.2)
    got = drain(ch, q, 1)
    assert [b for _, _, b in got] == [b"long"]
    assert ch.basic_get(q, auto_ack=True) == (None, None, None)


# --- direct reply-to ------------------------------------------------------------------

def test_direct_reply_to(conn, ch, queue):
    server = connect()
    try:
        sch = server.channel()

        def on_request(c, m, p, b):
            assert p.reply_to.startswith("amq.rabbitmq.reply-to."), p.reply_to
            c.basic_publish("", p.reply_to, b"reply:" + b,
                            pika.BasicProperties(correlation_id=p.correlation_id))
            c.basic_ack(m.delivery_tag)

        sch.basic_consume(queue, on_request)
        replies = []
        ch.basic_consume("amq.rabbitmq.reply-to",
                         lambda c, m, p, b: replies.append((m, p, b)), auto_ack=True)
        ch.basic_publish("", queue, b"ping",
                         pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="c42"))
        deadline = time.monotonic() + 5
        while not replies and time.monotonic() < deadline:
            server.process_data_events(time_limit=0.02)
            conn.process_data_events(time_limit=0.02)
        assert replies, "no reply arrived"
        m, p, b = replies[0]
        assert b == b"reply:ping"
        assert p.correlation_id == "c42"
        assert m.routing_key.startswith("amq.rabbitmq.reply-to.")
    finally:
        server.close()


def test_direct_reply_to_passive_declare(ch):
    ch.queue_declare("amq.rabbitmq.reply-to", passive=True)


def test_direct_reply_to_publish_without_consumer_406(ch, queue):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_publish("", queue, b"x", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
        force_roundtrip(ch)


def test_direct_reply_to_consume_with_ack_406(ch):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=False)


# --- CC / BCC ---------------------------------------------------------------------------

def test_cc_bcc_routing(ch, cleanup):
    ch.confirm_delivery()
    x = uniq("x-cc")
    ch.exchange_declare(x, exchange_type="direct")
    cleanup(lambda c: c.exchange_delete(x))
    qs = {}
    for key in ("main", "cc1", "cc2", "bcc1", "other"):
        q = uniq("q-" + key)
        ch.queue_declare(q)
        ch.queue_bind(q, x, routing_key=key)
        cleanup(lambda c, q=q: c.queue_delete(q))
        qs[key] = q
    ch.basic_publish(x, "main", b"hi", pika.BasicProperties(
        headers={"CC": ["cc1", "cc2"], "BCC": ["bcc1"], "keep": 1}))
    for key in ("main", "cc1", "cc2", "bcc1"):
        m, p, b = ch.basic_get(qs[key], auto_ack=True)
        assert b == b"hi", key
        assert m.routing_key == "main", key
        assert "BCC" not in p.headers, key
        assert p.headers["CC"] == ["cc1", "cc2"], key
        assert p.headers["keep"] == 1
    assert ch.basic_get(qs["other"], auto_ack=True) == (None, None, None)


# --- error paths ------------------------------------------------------------------------

def test_user_id_mismatch_406(ch, queue):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_publish("", queue, b"x", pika.BasicProperties(user_id="not-guest"))
        force_roundtrip(ch)


@pytest.mark.parametrize("expiration", ["abc", "-1", "1.5"])
def test_invalid_expiration_406(ch, queue, expiration):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_publish("", queue, b"x", pika.BasicProperties(expiration=expiration))
        force_roundtrip(ch)


def test_consumer_cancel_notification_on_queue_delete(conn, ch):
    q = uniq("q-cancel")
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = ch.basic_consume(q, lambda *a: None)
    other = conn.channel()
    other.queue_delete(q)
    assert wait_until(conn, lambda: cancelled)
    assert isinstance(cancelled[0], spec.Basic.Cancel)
    assert cancelled[0].consumer_tag == tag
    assert tag not in ch.consumer_tags
    assert ch.is_open


def test_duplicate_consumer_tag_530(conn, ch, queue):
    ch.basic_consume(queue, lambda *a: None, consumer_tag="dup")
    # pika refuses duplicates client-side; send the raw method instead.
    ch._impl._send_method(spec.Basic.Consume(queue=queue, consumer_tag="dup"))
    with connection_error(530, "NOT_ALLOWED"):
        force_roundtrip(ch)


def test_ack_unknown_delivery_tag_406(ch):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_ack(99)
        force_roundtrip(ch)


def test_double_ack_406(cq):
    ch, q = cq
    ch.basic_publish("", q, b"x")
    m, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_ack(m.delivery_tag)
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_ack(m.delivery_tag)
        force_roundtrip(ch)


def test_reject_unknown_delivery_tag_406(ch):
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.basic_reject(5)
        force_roundtrip(ch)


def test_publish_to_missing_queue_via_default_exchange_is_dropped(ch):
    ch.confirm_delivery()
    ch.basic_publish("", uniq("missing"), b"x")  # routed nowhere, still acked
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("", uniq("missing"), b"x", mandatory=True)
