"""RabbitMQ's stream protocol (the binary protocol of streams, port 5552 by
default) with the real Python client, rstream.

Covered: creating and deleting streams and their errors, publishing with
confirms and consuming from every offset specification (first, last, next,
offset, timestamp), AMQP 1.0 message sections surviving the round trip,
sub-entry batches (uncompressed and gzip), server-side consumer offset
tracking, publisher deduplication, interop with
AMQP 0-9-1 (pika) in both directions, server-side filtering, and refused
logins.

Every behaviour asserted here was checked against RabbitMQ 3.10.8 with its
rabbitmq_stream plugin, except filtering (RabbitMQ 3.13+; the test skips on
older RabbitMQ). Payloads are opaque bytes, as RabbitMQ treats them: AMQP 1.0
or not, a stream consumer gets back exactly what was published.

The stream port comes from STREAM_HOST / STREAM_PORT, the AMQP 0-9-1 port
from AMQP_URL (see conftest.py). Every network wait is bounded (at most 10 s
each, 60 s per test); every stream is uniquely named and removed at teardown.

Things to know about RabbitMQ's streams when reading these tests:

* Offsets of a fresh stream start at 0 and are contiguous.
* Messages travel in chunks; "last" and timestamps address chunks. rstream's
  send_wait publishes one message and waits for its confirm, so each message
  is its own chunk. A Deliver frame may start before a requested numeric
  offset (chunk granularity): rstream drops the entries below it.
* Filtering is chunk-granular too (a Bloom filter per chunk): the tests
  publish each filter value in its own confirmed batches so that the result
  does not depend on how a broker cuts chunks.
"""
import asyncio
import contextlib
import os
import socket
import time

import pika
import pytest

from conftest import connect, uniq
from rstream import (
    AMQPMessage,
    CompressionType,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    OffsetType,
    Producer,
    Properties,
    RawMessage,
    amqp_decoder,
    exceptions,
)

STREAM_HOST = os.environ.get("STREAM_HOST", "127.0.0.1")
STREAM_PORT = int(os.environ.get("STREAM_PORT", "5552"))
USER, PASSWORD, VHOST = "guest", "guest", "/"

# Upper bound of any single network wait, and of one whole test.
WAIT = 10
TEST_TIMEOUT = 60


# --- helpers ---------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def stream_port_ready():
    """The stream listener may come up a moment after the AMQP one."""
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((STREAM_HOST, STREAM_PORT), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"stream port {STREAM_HOST}:{STREAM_PORT} does not accept connections")
            time.sleep(0.1)


# Exceptions that ended one of the client's background tasks (its frame
# reader above all: a frame it cannot decode stops it, and nothing more
# arrives on that connection). Waits fail at once when there is one.
_background_errors = []


def run(coro):
    """Run one test body on a fresh event loop, bounded as a whole."""

    async def main():
        loop = asyncio.get_running_loop()

        def on_error(loop, context):
            _background_errors.append(context.get("exception") or context.get("message"))
            loop.default_exception_handler(context)

        loop.set_exception_handler(on_error)
        return await asyncio.wait_for(coro, TEST_TIMEOUT)

    _background_errors.clear()
    return asyncio.run(main())


def w(aw, timeout=WAIT):
    return asyncio.wait_for(aw, timeout)


async def until(pred, what, timeout=WAIT):
    """Poll pred() (no I/O of its own) until true; fail after timeout."""
    deadline = time.monotonic() + timeout
    while not pred():
        if _background_errors:
            err = _background_errors[0]
            cause = getattr(err, "__cause__", None)
            raise AssertionError(f"client failed while waiting for {what}: {err!r} (cause: {cause!r})")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def _s(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else v


def body_of(msg):
    """The payload of an AMQPMessage decoded by amqp_decoder (data section(s))."""
    body = msg.body
    if isinstance(body, list):
        body = b"".join(bytes(b) for b in body)
    return bytes(body) if body is not None else None


def app_props(msg):
    return {_s(k): _s(v) for k, v in (msg.application_properties or {}).items()}


@contextlib.asynccontextmanager
async def producer(**kw):
    kw.setdefault("username", USER)
    kw.setdefault("password", PASSWORD)
    kw.setdefault("vhost", VHOST)
    p = Producer(STREAM_HOST, STREAM_PORT, **kw)
    await w(p.start())
    try:
        yield p
    finally:
        with contextlib.suppress(Exception):
            await w(p.close())


@contextlib.asynccontextmanager
async def consumer(**kw):
    kw.setdefault("username", USER)
    kw.setdefault("password", PASSWORD)
    kw.setdefault("vhost", VHOST)
    c = Consumer(STREAM_HOST, STREAM_PORT, **kw)
    try:
        yield c
    finally:
        # Unsubscribing waits up to 5 s for a reply that a failed
        # connection never reads.
        with contextlib.suppress(Exception):
            await w(c.close(), 1 if _background_errors else WAIT)


class Collector:
    """A subscription callback that keeps (message, offset, chunk timestamp)."""

    def __init__(self):
        self.got = []

    def __call__(self, msg, ctx):
        self.got.append((msg, ctx.offset, ctx.timestamp))

    def messages(self):
        return [m for m, _, _ in self.got]

    def offsets(self):
        return [o for _, o, _ in self.got]

    def bodies(self):
        return [body_of(m) if isinstance(m, AMQPMessage) else bytes(m) for m in self.messages()]

    async def wait(self, n, timeout=WAIT):
        await until(lambda: len(self.got) >= n, f"{n} deliveries (got {len(self.got)})", timeout)
        return self.messages()

    async def settle(self, duration=0.5):
        """Let the event loop run a while (to see that nothing more arrives)."""
        await asyncio.sleep(duration)
        return self.messages()


async def subscribe(c, stream, offset_type=OffsetType.FIRST, offset=None, decoder=amqp_decoder, **kw):
    col = Collector()
    await w(
        c.subscribe(
            stream,
            col,
            decoder=decoder,
            offset_specification=ConsumerOffsetSpecification(offset_type, offset),
            **kw,
        )
    )
    return col


def amqp_messages(prefix, n):
    return [AMQPMessage(body=f"{prefix}-{i}".encode()) for i in range(n)]


async def publish_each(p, stream, messages, **kw):
    """One send_wait per message: each is confirmed (and its own chunk) before the next."""
    ids = []
    for m in messages:
        ids.append(await w(p.send_wait(stream, m, **kw)))
    return ids


async def publish_batch(p, stream, messages, **kw):
    """One send_batch (a single Publish frame); returns once every message is confirmed."""
    confirms = []

    def on_confirm(status: ConfirmationStatus):
        confirms.append(status)

    ids = await w(p.send_batch(stream, messages, on_publish_confirm=on_confirm, **kw))
    await until(lambda: len(confirms) >= len(messages), f"{len(messages)} publish confirms")
    assert all(s.is_confirmed for s in confirms), [(s.message_id, s.response_code) for s in confirms]
    assert sorted(s.message_id for s in confirms) == sorted(ids)
    return ids


@pytest.fixture
def stream_name(cleanup):
    """A unique stream name, deleted at teardown (over AMQP 0-9-1) if it exists."""
    name = uniq("sp")
    cleanup(lambda c: c.queue_delete(name))
    return name


async def create(stream):
    async with producer() as p:
        await w(p.create_stream(stream))


def server_properties(client):
    """The broker's peer properties (product, version, ...) of an rstream client."""
    return {_s(k): _s(v) for k, v in (client.server_properties or {}).items()}


# --- creating and deleting -------------------------------------------------


def test_create_and_delete_stream(stream_name):
    async def main():
        async with producer() as p:
            assert not await w(p.stream_exists(stream_name))
            await w(p.create_stream(stream_name))
            assert await w(p.stream_exists(stream_name))
            # Creating it again: STREAM_ALREADY_EXISTS (5) unless exists_ok.
            with pytest.raises(exceptions.StreamAlreadyExists):
                await w(p.create_stream(stream_name, exists_ok=False))
            await w(p.create_stream(stream_name, exists_ok=True))
            # The stream is a stream queue for AMQP 0-9-1 clients too.
            conn = connect()
            try:
                ok = conn.channel().queue_declare(stream_name, passive=True)
                assert ok.method.queue == stream_name
            finally:
                conn.close()
            await w(p.delete_stream(stream_name))
            assert not await w(p.stream_exists(stream_name))
            # Deleting a missing stream: STREAM_DOES_NOT_EXIST (2) unless missing_ok.
            with pytest.raises(exceptions.StreamDoesNotExist):
                await w(p.delete_stream(stream_name))
            await w(p.delete_stream(stream_name, missing_ok=True))

    run(main())


def test_create_stream_with_arguments(stream_name):
    async def main():
        async with producer() as p:
            await w(
                p.create_stream(
                    stream_name,
                    arguments={"max-length-bytes": 10_000_000, "max-age": "1h"},
                )
            )
            assert await w(p.stream_exists(stream_name))

    run(main())


def test_missing_stream_errors(stream_name):
    async def main():
        async with producer() as p:
            with pytest.raises(exceptions.StreamDoesNotExist):
                await w(p.send_wait(stream_name, b"x"))
        async with consumer() as c:
            with pytest.raises(exceptions.StreamDoesNotExist):
                await w(c.subscribe(stream_name, lambda m, ctx: None))

    run(main())


# --- publish and consume ---------------------------------------------------


def test_publish_and_consume_from_first(stream_name):
    n = 100
    bodies = [f"message-{i}".encode() for i in range(n)]

    async def main():
        await create(stream_name)
        msgs = [AMQPMessage(body=b) for b in bodies]
        async with producer() as p:
            # Half as one Publish frame, half one confirmed message at a time.
            ids = await publish_batch(p, stream_name, msgs[: n // 2])
            ids += await publish_each(p, stream_name, msgs[n // 2 :])
            assert ids == list(range(1, n + 1))
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(n)
            await col.settle()
            assert col.bodies() == bodies
            assert col.offsets() == list(range(n))
            now_ms = time.time() * 1000
            for _, _, ts in col.got:
                assert abs(now_ms - ts) < 60_000, (now_ms, ts)

    run(main())


def test_non_amqp_payloads_are_stored(stream_name):
    # The stream protocol carries message payloads as opaque bytes: RabbitMQ
    # stores whatever the publisher sent (rstream's RawMessage), AMQP 1.0
    # encoded or not, and hands exactly those bytes to stream consumers.
    payloads = [b"not an AMQP 1.0 message", b"", bytes(range(256))]

    async def main():
        await create(stream_name)
        async with producer() as p:
            await publish_batch(p, stream_name, [RawMessage(b) for b in payloads])
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST, decoder=None)
            await col.wait(len(payloads))
            await col.settle()
            assert col.bodies() == payloads

    run(main())
    # An AMQP 0-9-1 consumer gets each payload as the body, and none of the
    # broker's private headers.
    got = _pika_read(stream_name, len(payloads))
    assert [b for _, b in got] == payloads
    for props, _ in got:
        assert not any(k.startswith("x-amqp-1.0-") for k in (props.headers or {})), props.headers


def test_amqp_payloads_are_delivered_verbatim(stream_name):
    # A stream consumer gets the bytes the publisher sent: no sections are
    # added, dropped or re-encoded on the way.
    encoded = [
        bytes(
            AMQPMessage(
                body=b"amqp",
                properties=Properties(message_id="verbatim-1", content_type="text/plain"),
                application_properties={"k": "v"},
            )
        ),
        bytes(AMQPMessage(body=b"plain")),
    ]

    async def main():
        await create(stream_name)
        async with producer() as p:
            await publish_batch(p, stream_name, [RawMessage(b) for b in encoded])
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST, decoder=None)
            await col.wait(len(encoded))
            await col.settle()
            assert col.bodies() == encoded

    run(main())


def test_offset_first(stream_name):
    async def main():
        await create(stream_name)
        msgs = amqp_messages("f", 5)
        async with producer() as p:
            await publish_each(p, stream_name, msgs)
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(5)
            await col.settle()
            assert col.bodies() == [body_of(m) for m in msgs]
            assert col.offsets() == [0, 1, 2, 3, 4]

    run(main())


def test_offset_last(stream_name):
    async def main():
        await create(stream_name)
        msgs = amqp_messages("l", 5)
        async with producer() as p:
            await publish_each(p, stream_name, msgs)
            async with consumer() as c:
                col = await subscribe(c, stream_name, OffsetType.LAST)
                await col.wait(1)
                await col.settle()
                # Each message was its own chunk: "last" is the last message.
                assert col.bodies() == [b"l-4"]
                assert col.offsets() == [4]
                # ... and the subscription goes on with what follows.
                await publish_each(p, stream_name, [AMQPMessage(body=b"l-5")])
                await col.wait(2)
                assert col.bodies() == [b"l-4", b"l-5"]
                assert col.offsets() == [4, 5]

    run(main())


def test_offset_next(stream_name):
    async def main():
        await create(stream_name)
        async with producer() as p:
            await publish_each(p, stream_name, amqp_messages("before", 3))
            async with consumer() as c:
                col = await subscribe(c, stream_name, OffsetType.NEXT)
                await col.settle()
                assert col.bodies() == []
                after = amqp_messages("after", 3)
                await publish_batch(p, stream_name, after)
                await col.wait(3)
                await col.settle()
                assert col.bodies() == [b"after-0", b"after-1", b"after-2"]
                assert col.offsets() == [3, 4, 5]

    run(main())


def test_offset_numeric(stream_name):
    async def main():
        await create(stream_name)
        msgs = amqp_messages("o", 10)
        async with producer() as p:
            # Offset 3 lies inside the first chunk (0-4): the delivery may
            # start at the chunk, the consumer gets offsets 3.. only.
            await publish_batch(p, stream_name, msgs[:5])
            await publish_each(p, stream_name, msgs[5:])
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.OFFSET, 3)
            await col.wait(7)
            await col.settle()
            assert col.offsets() == list(range(3, 10))
            assert col.bodies() == [f"o-{i}".encode() for i in range(3, 10)]
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.OFFSET, 7)
            await col.wait(3)
            await col.settle()
            assert col.offsets() == [7, 8, 9]
        # An offset past the end behaves like "next".
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.OFFSET, 1000)
            await col.settle()
            assert col.bodies() == []

    run(main())


def test_offset_timestamp(stream_name):
    async def main():
        await create(stream_name)
        async with producer() as p:
            t0 = int(time.time() * 1000) - 1000
            await publish_each(p, stream_name, amqp_messages("early", 3))
            await asyncio.sleep(1.2)
            middle = int(time.time() * 1000)
            await asyncio.sleep(1.2)
            await publish_each(p, stream_name, amqp_messages("late", 3))
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.TIMESTAMP, middle)
            await col.wait(3)
            await col.settle()
            assert col.bodies() == [b"late-0", b"late-1", b"late-2"]
            assert col.offsets() == [3, 4, 5]
            for _, _, ts in col.got:
                assert ts >= middle, (ts, middle)
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.TIMESTAMP, t0)
            await col.wait(6)
            await col.settle()
            assert col.offsets() == list(range(6))

    run(main())


def test_amqp_sections_round_trip(stream_name):
    async def main():
        await create(stream_name)
        msg = AMQPMessage(
            body=b"payload \x00\xff bytes",
            properties=Properties(
                message_id="msg-1",
                correlation_id="corr-1",
                content_type="application/octet-stream",
            ),
            application_properties={"region": "eu", "count": 42, "flag": True},
        )
        async with producer() as p:
            await publish_each(p, stream_name, [msg])
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            (got,) = await col.wait(1)
            assert body_of(got) == b"payload \x00\xff bytes"
            assert _s(got.properties.message_id) == "msg-1"
            assert _s(got.properties.correlation_id) == "corr-1"
            assert _s(got.properties.content_type) == "application/octet-stream"
            assert app_props(got) == {"region": "eu", "count": 42, "flag": True}

    run(main())


# --- consumer offset tracking ----------------------------------------------


def test_store_and_query_offset(stream_name):
    ref = uniq("tracker")

    async def main():
        await create(stream_name)
        async with producer() as p:
            await publish_batch(p, stream_name, amqp_messages("t", 10))
        async with consumer() as c:
            # Nothing stored yet: OFFSET_NOT_FOUND (19).
            with pytest.raises(exceptions.OffsetNotFound):
                await w(c.query_offset(stream_name, ref))
            await w(c.store_offset(stream_name, ref, 4))
            # store_offset has no reply: poll until the broker shows it.
            seen = []

            async def stored_is(value):
                async def poll():
                    while True:
                        with contextlib.suppress(exceptions.OffsetNotFound):
                            seen.append(await w(c.query_offset(stream_name, ref)))
                            if seen[-1] == value:
                                return
                        await asyncio.sleep(0.05)

                await w(poll())

            await stored_is(4)
            await w(c.store_offset(stream_name, ref, 7))
            await stored_is(7)
            assert await w(c.query_offset(stream_name, ref)) == 7
            # Another reference is tracked apart.
            with pytest.raises(exceptions.OffsetNotFound):
                await w(c.query_offset(stream_name, ref + "-other"))
        # A new connection resumes after the stored offset.
        async with consumer() as c:
            stored = await w(c.query_offset(stream_name, ref))
            assert stored == 7
            col = await subscribe(c, stream_name, OffsetType.OFFSET, stored + 1, subscriber_name=ref)
            await col.wait(2)
            await col.settle()
            assert col.bodies() == [b"t-8", b"t-9"]

    run(main())


# --- deduplication ---------------------------------------------------------


def test_publisher_deduplication(stream_name):
    ref = uniq("publisher")

    def raw(i):
        # An AMQP 1.0 encoded message with an explicit publishing id.
        return RawMessage(bytes(AMQPMessage(body=f"dedup-{i}".encode())), publishing_id=i)

    async def query_sequence(p):
        client = await w(p.default_client)
        return await w(client.query_publisher_sequence(stream=stream_name, reference=ref))

    async def main():
        await create(stream_name)
        async with producer() as p:
            # An unknown publisher reference has sequence 0.
            assert await query_sequence(p) == 0
            ids = await publish_each(p, stream_name, [raw(i) for i in range(1, 6)], publisher_name=ref)
            assert ids == [1, 2, 3, 4, 5]
            assert await query_sequence(p) == 5
            # Ids at or below the last one are dropped, but still confirmed.
            await publish_batch(p, stream_name, [raw(i) for i in (3, 4, 5, 6, 7)], publisher_name=ref)
            await publish_each(p, stream_name, [raw(2)], publisher_name=ref)
            assert await query_sequence(p) == 7
        # A new connection with the same reference: the sequence is the broker's.
        async with producer() as p:
            assert await query_sequence(p) == 7
            await publish_batch(p, stream_name, [raw(i) for i in (6, 7, 8)], publisher_name=ref)
            assert await query_sequence(p) == 8
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(8)
            await col.settle()
            assert col.bodies() == [f"dedup-{i}".encode() for i in range(1, 9)]

    run(main())


def test_publisher_without_reference_is_not_deduplicated(stream_name):
    async def main():
        await create(stream_name)
        async with producer() as p:
            for body in (b"a", b"b"):
                await publish_each(p, stream_name, [RawMessage(bytes(AMQPMessage(body=body)), publishing_id=1)])
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(2)
            await col.settle()
            assert col.bodies() == [b"a", b"b"]

    run(main())


def test_sub_entry_batches(stream_name):
    """Messages sent as sub-entry batches (one publishing id each, compressed
    or not) are confirmed once per batch and read back one by one, each at
    its own offset, by stream and AMQP 0-9-1 consumers alike."""
    batches = [
        (CompressionType.No, [AMQPMessage(body=f"plain-{i}".encode()) for i in range(3)]),
        (CompressionType.Gzip, [AMQPMessage(body=f"gzip-{i}".encode() * 20) for i in range(4)]),
    ]
    want = [bytes(body_of(m)) for _, msgs in batches for m in msgs]

    async def main():
        await create(stream_name)
        confirms = []
        async with producer() as p:
            for compression, msgs in batches:
                await w(
                    p.send_sub_entry(
                        stream_name, msgs, compression_type=compression, on_publish_confirm=confirms.append
                    )
                )
            await until(lambda: len(confirms) >= len(batches), "a confirm per sub-entry batch")
            assert all(s.is_confirmed for s in confirms), [(s.message_id, s.response_code) for s in confirms]
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(len(want))
            await col.settle()
            assert col.bodies() == want
            assert col.offsets() == list(range(len(want)))

    run(main())
    assert [b for _, b in _pika_read(stream_name, len(want))] == want


# --- interop with AMQP 0-9-1 ------------------------------------------------


def _pika_read(stream, n, timeout=WAIT):
    conn = connect()
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        got = []

        def on_message(c, method, props, body):
            got.append((props, body))
            c.basic_ack(method.delivery_tag)

        ch.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.05)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            conn.process_data_events(time_limit=0.05)
        return got
    finally:
        conn.close()


def test_stream_protocol_to_amqp091(stream_name):
    msgs = [
        AMQPMessage(body=f"to-091-{i}".encode(), application_properties={"i": i}) for i in range(10)
    ]

    async def main():
        await create(stream_name)
        async with producer() as p:
            await publish_batch(p, stream_name, msgs[:5])
            await publish_each(p, stream_name, msgs[5:])

    run(main())
    got = _pika_read(stream_name, 10)
    assert [b for _, b in got] == [f"to-091-{i}".encode() for i in range(10)]
    for i, (props, _) in enumerate(got):
        headers = props.headers or {}
        assert headers.get("x-stream-offset") == i, headers
        assert headers.get("i") == i, headers


def test_amqp091_to_stream_protocol(stream_name):
    conn = connect()
    try:
        ch = conn.channel()
        ch.queue_declare(stream_name, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish(
                "",
                stream_name,
                f"from-091-{i}".encode(),
                pika.BasicProperties(
                    content_type="text/plain",
                    message_id=f"id-{i}",
                    correlation_id=f"corr-{i}",
                    headers={"h": f"v{i}"},
                ),
            )
    finally:
        conn.close()

    async def main():
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(5)
            await col.settle()
            assert col.bodies() == [f"from-091-{i}".encode() for i in range(5)]
            assert col.offsets() == list(range(5))
            for i, m in enumerate(col.messages()):
                assert _s(m.properties.content_type) == "text/plain"
                assert _s(m.properties.message_id) == f"id-{i}"
                assert _s(m.properties.correlation_id) == f"corr-{i}"
                assert app_props(m).get("h") == f"v{i}", m.application_properties

    run(main())


# --- filtering -------------------------------------------------------------


async def _region(msg):
    return _s(msg.application_properties["region"])


def test_filtering(stream_name):
    def regional(region, i):
        return AMQPMessage(body=f"{region}-{i}".encode(), application_properties={"region": region})

    async def main():
        async with producer() as p:
            props = server_properties(await w(p.default_client))
            if props.get("product") == "RabbitMQ" and tuple(
                int(x) for x in props.get("version", "0.0").split(".")[:2]
            ) < (3, 13):
                pytest.skip("RabbitMQ < 3.13 has no stream filtering")
            await w(p.create_stream(stream_name))
        async with producer(filter_value_extractor=_region) as p:
            # Each value in its own confirmed batches.
            await publish_batch(p, stream_name, [regional("eu", i) for i in range(3)])
            await publish_batch(p, stream_name, [regional("us", i) for i in range(3)])
            await publish_batch(p, stream_name, [regional("eu", i) for i in range(3, 5)])
            await publish_batch(p, stream_name, [regional("us", i) for i in range(3, 5)])
        # Messages without a filter value.
        async with producer() as p:
            await publish_batch(p, stream_name, [AMQPMessage(body=b"plain-0")])

        async with consumer() as c:
            col = await subscribe(
                c,
                stream_name,
                OffsetType.FIRST,
                filter_input=FilterConfiguration(values_to_filter=["eu"], match_unfiltered=False),
            )
            await col.wait(5)
            await col.settle()
            assert col.bodies() == [f"eu-{i}".encode() for i in range(5)]
            # The filter value is no part of the delivered message.
            assert [app_props(m) for m in col.messages()] == [{"region": "eu"}] * 5
        async with consumer() as c:
            col = await subscribe(
                c,
                stream_name,
                OffsetType.FIRST,
                filter_input=FilterConfiguration(values_to_filter=["us"], match_unfiltered=True),
            )
            await col.wait(6)
            await col.settle()
            assert col.bodies() == [f"us-{i}".encode() for i in range(5)] + [b"plain-0"]
        # Without a filter every message is delivered.
        async with consumer() as c:
            col = await subscribe(c, stream_name, OffsetType.FIRST)
            await col.wait(11)
            await col.settle()
            assert len(col.bodies()) == 11

    run(main())


# --- authentication ----------------------------------------------------------


def test_wrong_password_is_refused():
    async def main():
        p = Producer(STREAM_HOST, STREAM_PORT, username=USER, password="not-the-password", vhost=VHOST)
        try:
            with pytest.raises(exceptions.AuthenticationFailure):
                await w(p.start())
        finally:
            with contextlib.suppress(Exception):
                await w(p.close())

    run(main())


def test_unknown_user_is_refused():
    async def main():
        p = Producer(STREAM_HOST, STREAM_PORT, username=uniq("nobody"), password="x", vhost=VHOST)
        try:
            with pytest.raises(exceptions.AuthenticationFailure):
                await w(p.start())
        finally:
            with contextlib.suppress(Exception):
                await w(p.close())

    run(main())


def test_missing_vhost_is_refused():
    async def main():
        p = Producer(STREAM_HOST, STREAM_PORT, username=USER, password=PASSWORD, vhost=uniq("no-vhost"))
        try:
            with pytest.raises(exceptions.VirtualHostAccessFailure):
                await w(p.start())
        finally:
            with contextlib.suppress(Exception):
                await w(p.close())

    run(main())
