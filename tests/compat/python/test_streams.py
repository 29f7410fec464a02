"""Stream queues (x-queue-type: stream) over AMQP 0-9-1.

Every behaviour asserted here was checked against RabbitMQ 3.10.8 unless the
test is marked as a LavinMQ extension (those skip on RabbitMQ). Reply texts
RabbitMQ 3.10.8 sent are recorded in comments; the asserts pin the reply code
(and for 406s the symbolic prefix and the argument name) only.

Things to know about RabbitMQ's streams when reading these tests:

* A stream consumer must have a consumer (non-global) prefetch and must ack
  manually. Deliveries carry an `x-stream-offset` header ('l', signed 64-bit)
  added to the message's own headers; redelivered is false, exchange and
  routing key are the published ones.
* Offsets of a fresh stream start at 0 and are contiguous while the stream
  stays in one segment. (With tiny segments RabbitMQ's offsets have gaps: each
  new segment starts with a tracking snapshot chunk that takes an offset.)
* "last" and timestamps address osiris *chunks*; every message here is
  published on a confirm channel (one message per chunk), so "last" is the
  newest message.
* queue.declare-ok of a stream reports the message count from the periodic
  queue metrics (every ~5 s on RabbitMQ 3.10, so it lags), and the consumer
  count is always 0.
* RabbitMQ < 3.13 closes the connection (540) on basic.nack / basic.reject;
  3.13+ accepts both and ignores requeue (the message is not redelivered).
* basic.recover on a stream consumer's channel makes RabbitMQ 3.10 close the
  connection with 541 INTERNAL_ERROR (a crash, not tested). So do
  x-stream-offset "First"/"bogus" (any unknown string) and x-max-age "bogus".
"""
import datetime
import time

import pika
import pika.exceptions
import pytest

from conftest import channel_error, connection_error, uniq

# --- helpers ---------------------------------------------------------------


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def server(conn):
    """(product, version tuple) from the connection's server properties."""
    props = conn._impl.server_properties or {}
    product = _s(props.get("product")) or ""
    version = []
    for part in (_s(props.get("version")) or "").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        version.append(int(digits))
    return product, tuple(version)


def is_rabbitmq(conn):
    return server(conn)[0] == "RabbitMQ"


def lavinmq_extension(conn, what):
    if is_rabbitmq(conn):
        pytest.skip(f"LavinMQ extension ({what}); RabbitMQ 3.10 lacks it")


def declare_stream(ch, cleanup, arguments=None, prefix="stream"):
    name = uniq(prefix)
    args = {"x-queue-type": "stream"}
    args.update(arguments or {})
    ch.queue_declare(name, durable=True, arguments=args)
    cleanup(lambda c: c.queue_delete(name))
    return name


@pytest.fixture
def pub(conn):
    """A publisher channel in confirm mode (one message per stream chunk)."""
    c = conn.channel()
    c.confirm_delivery()
    return c


def publish(pub, queue, bodies, headers=None):
    for b in bodies:
        body = b if isinstance(b, bytes) else b.encode()
        props = pika.BasicProperties(headers=dict(headers)) if headers else None
        pub.basic_publish("", queue, body, props)


def offset_of(d):
    headers = d.props.headers or {}
    assert "x-stream-offset" in headers, headers
    off = headers["x-stream-offset"]
    assert isinstance(off, int), (type(off), off)
    return off


class Delivery:
    def __init__(self, method, props, body):
        self.method, self.props, self.body = method, props, body


class Reader:
    """A stream consumer on its own channel, collecting deliveries."""

    def __init__(self, conn, queue, arguments=None, prefetch=100, consumer_tag=None):
        self.conn = conn
        self.ch = conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.got = []
        kw = {"consumer_tag": consumer_tag} if consumer_tag else {}
        self.tag = self.ch.basic_consume(
            queue, lambda _c, m, p, b: self.got.append(Delivery(m, p, b)), arguments=arguments, **kw
        )

    def wait(self, n, timeout=5.0):
        """Pump until at least n deliveries arrived; returns all so far."""
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.02)
        return list(self.got)

    def settle(self, duration=0.4):
        """Pump for `duration` seconds (to see that nothing more arrives)."""
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.02)
        return list(self.got)

    def offsets(self):
        return [offset_of(d) for d in self.got]

    def bodies(self):
        return [d.body for d in self.got]


def message_count(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


# --- declaring -------------------------------------------------------------


def test_declare_requires_durable(ch):
    # RabbitMQ: "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'Q' in vhost '/'"
    name = uniq("stream")
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        ch.queue_declare(name, durable=False, arguments={"x-queue-type": "stream"})
    assert "non-durable" in ei.value.reply_text


@pytest.mark.parametrize(
    "flags,prop",
    [({"exclusive": True}, "exclusive-owner"), ({"auto_delete": True}, "auto-delete")],
    ids=["exclusive", "auto-delete"],
)
def test_declare_refuses_exclusive_and_auto_delete(ch, flags, prop):
    # RabbitMQ: "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'Q' in vhost '/'"
    #           "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'Q' in vhost '/'"
    name = uniq("stream")
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"}, **flags)
    assert prop in ei.value.reply_text


def test_redeclare_and_passive_declare(conn, ch, cleanup):
    q = declare_stream(ch, cleanup)
    ok = ch.queue_declare(q, durable=True, arguments={"x-queue-type": "stream"})
    assert ok.method.queue == q
    assert ok.method.message_count == 0
    ok = ch.queue_declare(q, passive=True)
    assert ok.method.queue == q
    # Without x-queue-type the declaration is not equivalent.
    # RabbitMQ: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'Q' in
    #            vhost '/': received none but current is the value 'stream' of type 'longstr'"
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        ch.queue_declare(q, durable=True)
    assert "x-queue-type" in ei.value.reply_text
    # RabbitMQ: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'Q' in
    #            vhost '/': received 'classic' but current is 'stream'"
    ch = conn.channel()
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        ch.queue_declare(q, durable=True, arguments={"x-queue-type": "classic"})
    assert "x-queue-type" in ei.value.reply_text
    # RabbitMQ: "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'Q' in vhost '/':
    #            received 'false' but current is 'true'"
    ch = conn.channel()
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        ch.queue_declare(q, durable=False, arguments={"x-queue-type": "stream"})
    assert "durable" in ei.value.reply_text


@pytest.mark.parametrize(
    "arg,value",
    [
        ("x-max-priority", 5),
        ("x-dead-letter-exchange", "dlx"),
        ("x-expires", 1000),
        ("x-overflow", "drop-head"),
        ("x-delivery-limit", 3),
        ("x-message-ttl", 1000),
    ],
)
def test_declare_refuses_unsupported_arguments(ch, arg, value):
    # (x-single-active-consumer, which RabbitMQ refuses too, is taken: the
    # consumers of a tag take turns.)
    # RabbitMQ: "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'Q' in vhost '/'
    #            of queue type rabbit_stream_queue" (same wording for each argument)
    name = uniq("stream")
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", arg: value})
    assert arg in ei.value.reply_text


# --- reading from an offset ------------------------------------------------


def test_consume_from_first(conn, ch, pub, cleanup):
    q = declare_stream(ch, cleanup)
    for i in range(5):
        publish(pub, q, [f"m{i}"], headers={"h": i})
    r = Reader(conn, q, {"x-stream-offset": "first"})
    got = r.wait(5)
    assert [d.body for d in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert r.offsets() == [0, 1, 2, 3, 4]
    for i, d in enumerate(got):
        # The message's own headers are kept; x-stream-offset is added.
        assert d.props.headers == {"h": i, "x-stream-offset": i}
        assert d.method.redelivered is False
        assert d.method.exchange == ""
        assert d.method.routing_key == q
    # Nothing more, and acking does not change what the stream holds.
    assert len(r.settle(0.3)) == 5
    r.ch.basic_ack(got[-1].method.delivery_tag, multiple=True)
    r2 = Reader(conn, q, {"x-stream-offset": "first"})
    assert [d.body for d in r2.wait(5)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_consume_from_integer_offset(conn, ch, pub, cleanup):
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(6)])
    r = Reader(conn, q, {"x-stream-offset": 2})
    r.wait(4)
    assert r.offsets() == [2, 3, 4, 5]
    assert r.bodies() == [b"m2", b"m3", b"m4", b"m5"]
    assert len(r.settle(0.3)) == 4


def test_consume_from_last(conn, ch, pub, cleanup):
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(4)])
    r = Reader(conn, q, {"x-stream-offset": "last"})
    r.wait(1)
    assert r.settle(0.3) and r.offsets() == [3]
    assert r.bodies() == [b"m3"]
    publish(pub, q, ["m4"])
    r.wait(2)
    assert r.offsets() == [3, 4]


@pytest.mark.parametrize("arguments", [{"x-stream-offset": "next"}, None], ids=["next", "default"])
def test_consume_next_and_default_start_after_the_end(conn, ch, pub, cleanup, arguments):
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"old{i}" for i in range(3)])
    r = Reader(conn, q, arguments)
    assert r.settle(0.4) == []
    publish(pub, q, ["new"])
    got = r.wait(1)
    assert [(offset_of(d), d.body) for d in got] == [(3, b"new")]


def test_consume_from_timestamp(conn, ch, pub, cleanup):
    q = declare_stream(ch, cleanup)
    publish(pub, q, ["before"])
    time.sleep(1.1)
    # A whole second after "before" was stored, and not after "after".
    since = datetime.datetime.fromtimestamp(int(time.time()), datetime.timezone.utc)
    publish(pub, q, ["after"])
    r = Reader(conn, q, {"x-stream-offset": since})  # AMQP timestamp ('T', seconds)
    got = r.wait(1)
    assert [(offset_of(d), d.body) for d in got] == [(1, b"after")]
    assert len(r.settle(0.3)) == 1
    # A timestamp before everything starts at the first message ...
    old = Reader(conn, q, {"x-stream-offset": datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)})
    old.wait(2)
    assert old.bodies() == [b"before", b"after"]
    # ... one in the future waits for new messages (like "next").
    future = Reader(conn, q, {"x-stream-offset": datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)})
    assert future.settle(0.3) == []
    publish(pub, q, ["third"])
    future.wait(1)
    assert [(offset_of(d), d.body) for d in future.got] == [(2, b"third")]


def test_offset_past_the_end_waits_for_that_offset(conn, ch, pub, cleanup):
    """RabbitMQ 3.10: a consumer asking for an offset beyond the end gets
    nothing until the stream reaches that offset, then reads from it: the
    messages published in between (offsets 3..9 here) are skipped.
    (LavinMQ upstream instead starts such a consumer at "next".)"""
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(3)])
    r = Reader(conn, q, {"x-stream-offset": 10})
    assert r.settle(0.3) == []
    publish(pub, q, [f"m{i}" for i in range(3, 13)])
    r.wait(3)
    r.settle(0.2)
    assert r.offsets() == [10, 11, 12]
    assert r.bodies() == [b"m10", b"m11", b"m12"]


def test_negative_offset_starts_at_first(conn, ch, pub, cleanup):
    # RabbitMQ 3.10 accepts a negative integer offset and starts at the first message.
    q = declare_stream(ch, cleanup)
    publish(pub, q, ["m0", "m1"])
    r = Reader(conn, q, {"x-stream-offset": -1})
    r.wait(2)
    assert r.offsets() == [0, 1]


def test_offset_as_numeric_string_refused_406(conn, ch, cleanup):
    # RabbitMQ: "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'Q' in vhost '/':
    #            {invalid_stream_offset_arg,{longstr,<<\"10\">>}}"
    # (Unknown words such as "First" or "bogus" crash RabbitMQ 3.10's channel: 541.)
    q = declare_stream(ch, cleanup)
    c = conn.channel()
    c.basic_qos(prefetch_count=10)
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        c.basic_consume(q, lambda *a: None, arguments={"x-stream-offset": "10"})
    assert "x-stream-offset" in ei.value.reply_text


def test_two_consumers_read_the_same_messages(conn, ch, pub, cleanup):
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(10)])
    a = Reader(conn, q, {"x-stream-offset": "first"})
    b = Reader(conn, q, {"x-stream-offset": "first"})
    a.wait(10)
    b.wait(10)
    expected = [f"m{i}".encode() for i in range(10)]
    assert a.bodies() == expected and b.bodies() == expected
    assert a.offsets() == list(range(10)) and b.offsets() == list(range(10))
    # A third one on the same channel as the first, from the middle.
    got_c = []
    a.ch.basic_consume(
        q, lambda _c, m, p, body: got_c.append(Delivery(m, p, body)), arguments={"x-stream-offset": 5}
    )
    deadline = time.monotonic() + 5
    while len(got_c) < 5 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.02)
    assert [offset_of(d) for d in got_c] == [5, 6, 7, 8, 9]
    # A new message reaches every consumer.
    publish(pub, q, ["m10"])
    a.wait(11)
    b.wait(11)
    deadline = time.monotonic() + 5
    while len(got_c) < 6 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.02)
    assert a.offsets()[-1] == 10 and b.offsets()[-1] == 10 and offset_of(got_c[-1]) == 10


def test_message_count_via_passive_declare(conn, ch, pub, cleanup):
    """Reading (and acking) does not remove messages from a stream. RabbitMQ
    3.10 takes the count from its periodic queue metrics, so it lags by up
    to ~5 s; the consumer count of a stream is always 0 there (not asserted)."""
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(7)])
    r = Reader(conn, q, {"x-stream-offset": "first"})
    got = r.wait(7)
    assert len(got) == 7
    r.ch.basic_ack(got[-1].method.delivery_tag, multiple=True)
    deadline = time.monotonic() + 10
    n = message_count(ch, q)
    while n != 7 and time.monotonic() < deadline:
        conn.sleep(0.1)
        n = message_count(ch, q)
    assert n == 7


# --- consumer rules ----------------------------------------------------------


def test_prefetch_limits_unacked_deliveries(conn, ch, pub, cleanup):
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(6)])
    r = Reader(conn, q, {"x-stream-offset": "first"}, prefetch=2)
    r.wait(2)
    assert r.settle(0.3) and r.offsets() == [0, 1]
    r.ch.basic_ack(r.got[0].method.delivery_tag)
    r.wait(3)
    assert r.settle(0.3) and r.offsets() == [0, 1, 2]
    r.ch.basic_ack(r.got[2].method.delivery_tag, multiple=True)
    r.wait(5)
    assert r.settle(0.3) and r.offsets() == [0, 1, 2, 3, 4]


def test_consume_with_prefetch_zero_refused_406(conn, ch, cleanup):
    # RabbitMQ: "PRECONDITION_FAILED - consumer prefetch count is not set for
    #            'queue 'Q' in vhost '/''"
    q = declare_stream(ch, cleanup)
    c = conn.channel()
    c.basic_qos(prefetch_count=0)
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        c.basic_consume(q, lambda *a: None, arguments={"x-stream-offset": "first"})
    assert "prefetch" in ei.value.reply_text


def test_consume_with_only_global_prefetch_refused_406(conn, ch, cleanup):
    # A channel-wide (global) prefetch does not count: same 406 as above.
    q = declare_stream(ch, cleanup)
    c = conn.channel()
    c.basic_qos(prefetch_count=0)
    c.basic_qos(prefetch_count=5, global_qos=True)
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        c.basic_consume(q, lambda *a: None)
    assert "prefetch" in ei.value.reply_text


def test_consume_without_basic_qos_refused_406(conn, ch, cleanup):
    # RabbitMQ has no default consumer prefetch: same 406 as with basic.qos 0.
    if not is_rabbitmq(conn):
        pytest.skip("LavinMQ applies its default_consumer_prefetch when basic.qos was not sent")
    q = declare_stream(ch, cleanup)
    c = conn.channel()
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        c.basic_consume(q, lambda *a: None)
    assert "prefetch" in ei.value.reply_text


@pytest.mark.parametrize("auto_ack", [False, True], ids=["manual-ack", "auto-ack"])
def test_basic_get_refused_540(conn, ch, pub, cleanup, auto_ack):
    # RabbitMQ closes the connection:
    # 540 "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 'Q' in vhost '/'"
    q = declare_stream(ch, cleanup)
    publish(pub, q, ["m0"])
    with connection_error(540, "NOT_IMPLEMENTED") as ei:
        ch.basic_get(q, auto_ack=auto_ack)
    assert "basic.get" in ei.value.reply_text


def test_auto_ack_consume_refused_540(conn, ch, cleanup):
    # RabbitMQ closes the connection:
    # 540 "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues
    #      queue 'Q' in vhost '/'"
    q = declare_stream(ch, cleanup)
    c = conn.channel()
    c.basic_qos(prefetch_count=10)
    with connection_error(540, "NOT_IMPLEMENTED") as ei:
        c.basic_consume(q, lambda *a: None, auto_ack=True)
    assert "automatic acknowledgement" in ei.value.reply_text


def test_consumer_priority_refused_406(conn, ch, cleanup):
    # RabbitMQ: "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'Q' in vhost '/'
    #            of queue type rabbit_stream_queue"
    q = declare_stream(ch, cleanup)
    c = conn.channel()
    c.basic_qos(prefetch_count=10)
    with channel_error(406, "PRECONDITION_FAILED") as ei:
        c.basic_consume(q, lambda *a: None, arguments={"x-priority": 5})
    assert "x-priority" in ei.value.reply_text


@pytest.mark.parametrize(
    "how",
    ["nack-requeue", "nack-discard", "reject-requeue"],
)
def test_nack_and_reject(conn, ch, pub, cleanup, how):
    """RabbitMQ < 3.13 (checked: 3.10.8) closes the connection:
    540 "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream
    queues queue 'Q' in vhost '/'".
    RabbitMQ 3.13+ (and LavinMQ) accept them as a settlement: requeue is
    ignored, the message is not redelivered, the consumer gets credit back."""
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(4)])
    r = Reader(conn, q, {"x-stream-offset": "first"}, prefetch=2)
    r.wait(2)
    assert r.offsets() == [0, 1]
    tag = r.got[0].method.delivery_tag

    def settle():
        if how == "nack-requeue":
            r.ch.basic_nack(tag, requeue=True)
        elif how == "nack-discard":
            r.ch.basic_nack(tag, requeue=False)
        else:
            r.ch.basic_reject(tag, requeue=True)

    product, version = server(conn)
    if product == "RabbitMQ" and version < (3, 13):
        with connection_error(540, "NOT_IMPLEMENTED") as ei:
            settle()
            r.settle(2.0)
        assert "basic.nack and basic.reject" in ei.value.reply_text
        return
    settle()
    r.wait(3)
    r.settle(0.4)
    assert r.offsets() == [0, 1, 2]
    assert all(d.method.redelivered is False for d in r.got)


# --- retention ---------------------------------------------------------------

BIG = 64 * 1024  # bytes per message in the retention tests
# Enough data to fill more than one 8 MiB segment (LavinMQ's default segment
# size); RabbitMQ gets small segments through x-stream-max-segment-size-bytes.
RETENTION_MESSAGES = 160


def _big_bodies(n):
    return [b"%05d:" % i + b"x" * (BIG - 6) for i in range(n)]


def _check_trimmed(conn, q, published, at_least=1):
    """Consume from "first" until the oldest segments are gone (the first
    message is no longer message 0); return the kept message indexes."""
    deadline = time.monotonic() + 5
    while True:
        r = Reader(conn, q, {"x-stream-offset": "first"}, prefetch=1000)
        r.wait(1, timeout=2)
        first = r.got[0] if r.got else None
        if first is not None and int(first.body[:5]) > 0:
            break
        r.ch.close()
        assert time.monotonic() < deadline, "nothing trimmed"
        conn.sleep(0.2)
    first_index = int(first.body[:5])
    r.wait(published - first_index, timeout=10)
    kept = [int(d.body[:5]) for d in r.got]
    assert offset_of(first) > 0
    assert kept == list(range(first_index, published)), kept[:5]
    offs = r.offsets()
    assert offs == sorted(set(offs))
    assert at_least <= len(kept) < published
    r.ch.close()
    return kept


def test_retention_by_max_length_bytes(conn, ch, pub, cleanup):
    """Whole segments are removed, oldest first, once over x-max-length-bytes;
    the rest keep their offsets. RabbitMQ 3.10 trims on segment roll-over:
    with 256 KiB segments the first message is gone right after publishing."""
    q = declare_stream(
        ch,
        cleanup,
        {"x-max-length-bytes": 1024 * 1024, "x-stream-max-segment-size-bytes": 256 * 1024},
    )
    publish(pub, q, _big_bodies(RETENTION_MESSAGES))
    _check_trimmed(conn, q, RETENTION_MESSAGES)


def test_max_length_argument(conn, ch, pub, cleanup):
    """RabbitMQ 3.10 refuses x-max-length on a stream:
    406 "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'Q' in vhost '/'
    of queue type rabbit_stream_queue".
    LavinMQ accepts it (extension) as retention by message count."""
    if is_rabbitmq(conn):
        with channel_error(406, "PRECONDITION_FAILED") as ei:
            ch.queue_declare(
                uniq("stream"), durable=True, arguments={"x-queue-type": "stream", "x-max-length": 10}
            )
        assert "x-max-length" in ei.value.reply_text
        return
    q = declare_stream(ch, cleanup, {"x-max-length": 10})
    publish(pub, q, _big_bodies(RETENTION_MESSAGES))
    kept = _check_trimmed(conn, q, RETENTION_MESSAGES, at_least=10)
    assert message_count(ch, q) == len(kept)


# --- LavinMQ extensions --------------------------------------------------------


def test_offset_tracking_by_consumer_tag(conn, ch, pub, cleanup):
    """LavinMQ remembers, per explicit consumer tag, the offset up to which
    everything delivered was acked; a consumer with that tag and no
    x-stream-offset resumes after it. RabbitMQ 3.10 starts it at "next"."""
    lavinmq_extension(conn, "offset tracking by consumer tag")
    q = declare_stream(ch, cleanup)
    publish(pub, q, [f"m{i}" for i in range(6)])
    tag = uniq("tracker")
    r = Reader(conn, q, {"x-stream-offset": "first"}, consumer_tag=tag)
    got = r.wait(6)
    assert r.offsets() == [0, 1, 2, 3, 4, 5]
    # Ack 0, 1, 2 and 4; 3 stays unacked, so the tracked offset stops at 2.
    for d in got:
        if offset_of(d) in (0, 1, 2, 4):
            r.ch.basic_ack(d.method.delivery_tag)
    r.ch.basic_cancel(tag)
    r.ch.close()
    again = Reader(conn, q, None, consumer_tag=tag)
    again.wait(3)
    assert again.settle(0.3) and again.offsets() == [3, 4, 5]
    # Another tag is not affected: it starts at "next".
    other = Reader(conn, q, None, consumer_tag=uniq("other"))
    assert other.settle(0.3) == []


def _publish_filtered(pub, q):
    for body, value in [("r1", "red"), ("b1", "blue"), ("n1", None), ("r2", "red,big")]:
        publish(pub, q, [body], headers={"x-stream-filter-value": value} if value else None)


def test_stream_filter_by_value(conn, ch, pub, cleanup):
    """LavinMQ: x-stream-filter on the consumer selects messages by their
    x-stream-filter-value header (comma-separated values); with
    x-stream-match-unfiltered messages without a value pass too. RabbitMQ 3.10
    ignores both (everything is delivered)."""
    lavinmq_extension(conn, "x-stream-filter")
    q = declare_stream(ch, cleanup)
    _publish_filtered(pub, q)
    red = Reader(conn, q, {"x-stream-offset": "first", "x-stream-filter": "red"})
    red.wait(2)
    assert red.settle(0.3) and red.bodies() == [b"r1", b"r2"]
    assert red.offsets() == [0, 3]
    blue = Reader(
        conn,
        q,
        {"x-stream-offset": "first", "x-stream-filter": "blue", "x-stream-match-unfiltered": True},
    )
    blue.wait(2)
    assert blue.settle(0.3) and blue.bodies() == [b"b1", b"n1"]


def test_stream_filter_match_type(conn, ch, pub, cleanup):
    lavinmq_extension(conn, "x-stream-filter / x-filter-match-type")
    q = declare_stream(ch, cleanup)
    _publish_filtered(pub, q)
    both = Reader(conn, q, {"x-stream-offset": "first", "x-stream-filter": ["red", "big"]})
    both.wait(1)
    assert both.settle(0.3) and both.bodies() == [b"r2"]
    any_ = Reader(
        conn,
        q,
        {"x-stream-offset": "first", "x-stream-filter": ["blue", "big"], "x-filter-match-type": "any"},
    )
    any_.wait(2)
    assert any_.settle(0.3) and any_.bodies() == [b"b1", b"r2"]
