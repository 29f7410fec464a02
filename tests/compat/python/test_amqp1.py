"""AMQP 1.0 on the AMQP port, as RabbitMQ 4 serves it, with real Python AMQP 1.0
clients:

* rabbitmq-amqp-python-client (RabbitMQ 4's own client): topology through the
  /management node (queues, exchanges, bindings, purge, queue info, raw status
  codes), publishing outcomes (accepted / released / rejected) and consumer
  outcomes (accept, requeue, discard into a dead-letter exchange).
* python-qpid-proton (BlockingConnection): v2 and v1 addresses, a sender
  without target and the per-message `to`, multi-frame messages, amqp-value
  and amqp-sequence bodies, application property types, the released /
  modified / rejected outcomes, link credit and drain, settled links, TTL and
  priority, heartbeats, vhost selection through open.hostname, permissions and
  refused logins, vhosts and attaches.
* Interop: AMQP 1.0 <-> AMQP 0-9-1 (pika) property and header mapping, and
  MQTT (paho) -> amq.topic -> an AMQP 1.0 receiver.
* The management HTTP API listing an AMQP 1.0 connection.

Two client quirks shape the helpers:
python-qpid-proton sends a bytes body as an amqp-value unless inferred=True
(data_message), and hands out binary values as memoryviews that do not keep
their message alive (receive copies them).

The broker comes from AMQP_URL (the AMQP 1.0 clients connect to the same host
and port), the HTTP API from MGMT_URL, MQTT from MQTT_URL. Every wait is
bounded; every queue and exchange is uniquely named and removed at teardown.
"""
import collections
import contextlib
import os
import time
import uuid
from urllib.parse import quote, urlsplit

import paho.mqtt.client as mqtt
import pika
import pytest
import requests
from paho.mqtt.enums import CallbackAPIVersion
from proton import Delivery as ProtonDelivery
from proton import Message as ProtonMessage
from proton import (
    ConnectionException,
    Timeout,
    byte,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached
from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    AmqpMessageRejectedException,
    ClassicQueueSpecification,
    Disposition,
    Environment,
    ExchangeSpecification,
    ExchangeToQueueBindingSpecification,
    ExchangeType,
    Message,
    MessageProperties,
    QueueType,
    OffsetSpecification,
    QuorumQueueSpecification,
    StreamConsumerOptions,
    StreamFilterOptions,
    StreamSpecification,
    ValidationCodeException,
)
from rabbitmq_amqp_python_client.qpid.proton.utils import SendException as RmqSendException

from conftest import AMQP_URL, connect, drain, families, sample_value, uniq

MGMT_URL = os.environ.get("MGMT_URL")
MQTT_URL = os.environ.get("MQTT_URL", "mqtt://127.0.0.1:1883")

# Bound on every single wait for the broker.
TIMEOUT = 10
# How long to watch for something that must not arrive.
QUIET = 0.5

_parts = urlsplit(AMQP_URL)
HOST = _parts.hostname or "127.0.0.1"
PORT = _parts.port or 5672
USER = _parts.username or "guest"
PASSWORD = _parts.password or "guest"


def amqp1_url(user=USER, password=PASSWORD):
    """The broker's AMQP port as an AMQP 1.0 URL (the vhost travels in open.hostname)."""
    return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{HOST}:{PORT}"


# --- python-qpid-proton helpers --------------------------------------------


def proton_connect(user=USER, password=PASSWORD, vhost=None):
    """A proton BlockingConnection with SASL PLAIN; vhost=None means the default one."""
    kw = {}
    if vhost is not None:
        kw["virtual_host"] = f"vhost:{vhost}"
    return BlockingConnection(
        amqp1_url(user, password), timeout=TIMEOUT, allowed_mechs="PLAIN", **kw
    )


@pytest.fixture
def pconn():
    """A proton connection to the default vhost, closed at teardown."""
    c = proton_connect()
    yield c
    with contextlib.suppress(Exception):
        c.close()


def data_message(body, **kw):
    """A message whose body is one data section (proton's default, inferred=False,
    would send bytes as an amqp-value of type binary)."""
    return ProtonMessage(body=body, inferred=True, **kw)


def send(conn, address, message):
    """Sends one message on a fresh sender link; returns the settled delivery
    (its remote_state is the broker's outcome)."""
    sender = conn.create_sender(address)
    try:
        return sender.send(message, timeout=TIMEOUT, error_states=[])
    finally:
        sender.close()


def _owned(value):
    """python-qpid-proton hands out binary values as memoryviews into the
    message's C storage, which do not keep the message alive: copy them."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        for k, v in value.items():
            value[k] = _owned(v)
    elif isinstance(value, list):
        value[:] = [_owned(v) for v in value]
    return value


def receive(receiver, timeout=TIMEOUT):
    try:
        m = receiver.receive(timeout=timeout)
    except Timeout:
        pytest.fail(f"no message on {receiver.link.source.address} within {timeout} s")
    m.body = _owned(m.body)
    m.properties = _owned(m.properties)
    m.annotations = _owned(m.annotations)
    return m


def assert_nothing(receiver, quiet=QUIET):
    try:
        m = receiver.receive(timeout=quiet)
    except Timeout:
        return
    pytest.fail(f"unexpected message on {receiver.link.source.address}: {m}")


def body_bytes(body):
    """A data section as bytes (proton hands out memoryview/bytes)."""
    assert isinstance(body, (bytes, memoryview)), f"body is {type(body)}: {body!r}"
    return bytes(body)


# --- pika helpers -----------------------------------------------------------


def declare_queue(cleanup, prefix="a1q", arguments=None, durable=False):
    """Declares a queue with pika and registers its removal."""
    name = uniq(prefix)
    c = connect()
    try:
        c.channel().queue_declare(name, durable=durable, arguments=arguments)
    finally:
        c.close()
    cleanup(lambda ch: ch.queue_delete(name))
    return name


def bind(queue, exchange, key):
    c = connect()
    try:
        c.channel().queue_bind(queue, exchange, routing_key=key)
    finally:
        c.close()


def get_one(queue, timeout=TIMEOUT):
    """basic_get one message with pika: (method, properties, body)."""
    c = connect()
    try:
        got = drain(c.channel(), queue, 1, timeout=timeout)
    finally:
        c.close()
    assert got, f"no message in {queue} within {timeout} s"
    return got[0]


def message_count(queue):
    c = connect()
    try:
        return c.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        c.close()


def wait_count(queue, expected, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        n = message_count(queue)
        if n == expected or time.monotonic() >= deadline:
            return n
        time.sleep(0.05)


# --- rabbitmq-amqp-python-client helpers -----------------------------------


@pytest.fixture
def rmq():
    """A dialed rabbitmq-amqp-python-client connection, closed at teardown."""
    env = Environment(amqp1_url() + "/")
    c = env.connection()
    c.dial()
    # The client waits on its BlockingConnection (60 s by default): make a
    # broken broker fail a test quickly instead.
    c._conn.timeout = TIMEOUT
    yield c
    with contextlib.suppress(BaseException):
        env.close()


@pytest.fixture
def mgmt(rmq):
    return rmq.management()


class _Done(Exception):
    """Raised from a handler to leave Consumer.run()."""


class _TimedOut(Exception):
    pass


class _Deadline:
    """A timer task that stops Consumer.run() once. (An exception leaves its
    event in the reactor's queue, so the event comes again on the next
    processing round: only the first one raises.)"""

    def __init__(self):
        self.fired = False

    def on_timer_task(self, _event):
        if not self.fired:
            self.fired = True
            raise _TimedOut()


Received = collections.namedtuple("Received", "body delivery_count first_acquirer annotations")


def marked_redelivered(first, again):
    """Whether the second delivery of a message (a Received or a proton
    Message) is marked as a redelivery compared with the first: RabbitMQ 4
    sets first-acquirer on the first delivery only (see
    test_proton_first_acquirer); a higher delivery-count says so as well."""
    return (again.delivery_count or 0) > (first.delivery_count or 0) or (
        bool(first.first_acquirer) and not again.first_acquirer
    )


class _Collect(AMQPMessagingHandler):
    """Records a Received for each message and settles it with
    decide(index, message) -> "accept" | "requeue" | "discard" |
    ("discard_with_annotations" | "requeue_with_annotations", annotations);
    stops after n messages."""

    def __init__(self, n, decide):
        super().__init__()
        self.n = n
        self.decide = decide
        self.got = []

    def on_amqp_message(self, event):
        if len(self.got) >= self.n:
            return  # after _Done: left for the broker to requeue at detach
        m = event.message
        self.got.append(Received(body_bytes(m.body), m.delivery_count, m.first_acquirer, dict(m.annotations or {})))
        action = self.decide(len(self.got) - 1, m)
        if isinstance(action, tuple):
            getattr(self.delivery_context, action[0])(event, action[1])
        else:
            getattr(self.delivery_context, action)(event)
        if len(self.got) >= self.n:
            raise _Done()


def consume(rmq, queue, n, decide=lambda i, m: "accept", timeout=TIMEOUT, options=None):
    """Runs a consumer on the queue until n messages were handled or the
    timeout passed; returns what the handler recorded."""
    handler = _Collect(n, decide)
    consumer = rmq.consumer(
        AddressHelper.queue_address(queue), message_handler=handler, consumer_options=options
    )
    # Consumer.run() blocks until a handler raises: a timer bounds it.
    task = rmq._conn.container.schedule(timeout, _Deadline())
    try:
        consumer.run()
    except (_Done, _TimedOut):
        pass
    finally:
        task.cancel()
        consumer.close()
    return handler.got


def wait_info_count(mgmt, queue, expected, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        n = mgmt.queue_info(queue).message_count
        if n == expected or time.monotonic() >= deadline:
            return n
        time.sleep(0.05)


def rmq_queue(mgmt, cleanup, prefix="rmq-q", **spec):
    name = uniq(prefix)
    spec.setdefault("is_durable", False)
    mgmt.declare_queue(ClassicQueueSpecification(name=name, **spec))
    cleanup(lambda ch: ch.queue_delete(name))
    return name


def rmq_exchange(mgmt, cleanup, prefix="rmq-x", kind=ExchangeType.direct):
    name = uniq(prefix)
    mgmt.declare_exchange(ExchangeSpecification(name=name, exchange_type=kind))
    cleanup(lambda ch: ch.exchange_delete(name))
    return name


# ========================================================================
# 1. rabbitmq-amqp-python-client
# ========================================================================


def test_rmq_client_accepts_broker_as_rabbitmq_4(rmq):
    # dial() already refused anything that is not RabbitMQ >= 4.0.0.
    props = rmq._conn.conn.remote_properties
    assert props["product"] == "RabbitMQ"
    assert int(props["version"].split(".")[0]) >= 4


def test_rmq_client_declare_queue_and_redeclare(mgmt, cleanup):
    q = uniq("rmq-decl")
    cleanup(lambda ch: ch.queue_delete(q))
    mgmt.declare_queue(ClassicQueueSpecification(name=q, is_durable=False, max_len=100))
    info = mgmt.queue_info(q)
    assert info.name == q
    assert info.is_durable is False
    assert info.is_auto_delete is False
    assert info.is_exclusive is False
    assert info.queue_type == QueueType.classic
    assert info.message_count == 0
    assert info.consumer_count == 0
    assert info.arguments.get("x-max-length") == 100
    # The queue is there for AMQP 0-9-1 too.
    assert message_count(q) == 0
    # The same declaration again is fine; a different durable flag is not.
    mgmt.declare_queue(ClassicQueueSpecification(name=q, is_durable=False, max_len=100))
    with pytest.raises(ValidationCodeException):
        mgmt.declare_queue(ClassicQueueSpecification(name=q, is_durable=True, max_len=100))
    # The mismatch did not change the queue (nor break the management link).
    assert mgmt.queue_info(q).is_durable is False


def test_rmq_client_quorum_queue(mgmt, cleanup):
    q = uniq("rmq-qq")
    cleanup(lambda ch: ch.queue_delete(q))
    try:
        mgmt.declare_queue(QuorumQueueSpecification(name=q))
    except ValidationCodeException as e:
        pytest.skip(f"broker refuses quorum queues here: {e}")
    info = mgmt.queue_info(q)
    assert info.queue_type == QueueType.quorum
    assert info.is_durable is True


def test_rmq_client_exchange_bind_publish_unbind(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    x = rmq_exchange(mgmt, cleanup)
    # Redeclaring the same exchange is fine.
    mgmt.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.direct))
    spec = ExchangeToQueueBindingSpecification(source_exchange=x, destination_queue=q, binding_key="k1")
    path = mgmt.bind(spec)
    assert path == f"/bindings/src={x};dstq={q};key=k1;args="

    publisher = rmq.publisher(AddressHelper.exchange_address(x, "k1"))
    try:
        for i in range(3):
            d = publisher.publish(Message(body=f"m{i}".encode()))
            assert d.remote_state == Disposition.ACCEPTED
        assert wait_info_count(mgmt, q, 3) == 3
        # AMQP 0-9-1 sees the messages with the exchange and key they took.
        method, _props, body = get_one(q)
        assert (method.exchange, method.routing_key, body) == (x, "k1", b"m0")

        mgmt.unbind(path)
        # Nothing routes the message any more: RabbitMQ 4 releases it, which
        # the client reports by raising.
        with pytest.raises(RmqSendException) as ei:
            publisher.publish(Message(body=b"unroutable"))
        assert ei.value.state == Disposition.RELEASED
        assert mgmt.queue_info(q).message_count == 2
    finally:
        publisher.close()


def test_rmq_client_management_raw_requests(rmq, mgmt, cleanup):
    """The /management node's status codes and bodies, as RabbitMQ 4 answers
    them (Management.request sends the HTTP-like request over AMQP 1.0)."""
    q = uniq("rmq-raw")
    cleanup(lambda ch: ch.queue_delete(q))
    body = {"durable": False, "exclusive": False, "auto_delete": False, "arguments": {}}
    r = mgmt.request(body, AddressHelper.queue_address(q), "PUT", [200, 201])
    assert r.subject == "201"
    assert r.body["name"] == q
    assert r.body["durable"] is False
    r = mgmt.request(body, AddressHelper.queue_address(q), "PUT", [200, 201])
    assert r.subject == "200"
    x = rmq_exchange(mgmt, cleanup, kind=ExchangeType.topic)
    mgmt.bind(ExchangeToQueueBindingSpecification(source_exchange=x, destination_queue=q, binding_key="a.*"))
    r = mgmt.request(None, f"/bindings?src={x}&dstq={q}&key=a.*", "GET", [200])
    assert len(r.body) == 1, r.body
    b = r.body[0]
    assert (b["source"], b["destination_queue"], b["binding_key"]) == (x, q, "a.*")
    # A topic pattern routes as over AMQP 0-9-1.
    publisher = rmq.publisher(AddressHelper.exchange_address(x, "a.b"))
    try:
        assert publisher.publish(Message(body=b"topic")).remote_state == Disposition.ACCEPTED
    finally:
        publisher.close()
    assert wait_info_count(mgmt, q, 1) == 1
    # The binding's location deletes it.
    mgmt.request(None, b["location"], "DELETE", [204])
    r = mgmt.request(None, f"/bindings?src={x}&dstq={q}&key=a.*", "GET", [200])
    assert r.body == []
    # A missing queue: 404.
    with pytest.raises(ValidationCodeException) as ei:
        mgmt.request(None, AddressHelper.queue_address(uniq("missing")), "GET", [200])
    assert "404" in str(ei.value)


def test_rmq_client_publish_to_queue_and_purge(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        for i in range(5):
            assert publisher.publish(Message(body=b"p%d" % i)).remote_state == Disposition.ACCEPTED
    finally:
        publisher.close()
    assert wait_info_count(mgmt, q, 5) == 5
    assert mgmt.purge_queue(q) == 5
    assert mgmt.queue_info(q).message_count == 0
    assert mgmt.purge_queue(q) == 0


def test_rmq_client_publish_per_message_address(rmq, mgmt, cleanup):
    q1 = rmq_queue(mgmt, cleanup)
    q2 = rmq_queue(mgmt, cleanup)
    publisher = rmq.publisher()  # no target: each message names its address
    try:
        for q in (q1, q2):
            m = AddressHelper.message_to_address_helper(Message(body=q.encode()), AddressHelper.queue_address(q))
            assert publisher.publish(m).remote_state == Disposition.ACCEPTED
    finally:
        publisher.close()
    assert get_one(q1)[2] == q1.encode()
    assert get_one(q2)[2] == q2.encode()


def test_rmq_client_reject_publish_at_max_length(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup, max_len=1, overflow_behaviour="reject-publish")
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        assert publisher.publish(Message(body=b"fits")).remote_state == Disposition.ACCEPTED
        with pytest.raises(AmqpMessageRejectedException):
            publisher.publish(Message(body=b"refused"))
    finally:
        publisher.close()
    assert mgmt.queue_info(q).message_count == 1


def test_rmq_client_consume_accept(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        for i in range(3):
            publisher.publish(Message(body=b"c%d" % i))
    finally:
        publisher.close()
    got = consume(rmq, q, 3)
    assert [g.body for g in got] == [b"c0", b"c1", b"c2"]
    assert all(not g.delivery_count for g in got), got
    for g in got:
        assert g.annotations.get("x-exchange") == ""
        assert g.annotations.get("x-routing-key") == q
    info = mgmt.queue_info(q)
    assert info.message_count == 0
    assert info.consumer_count == 0


def rmq_stream(rmq, mgmt, cleanup, messages):
    """A stream holding `messages`: (body, annotations, application properties)."""
    name = uniq("rmq-s")
    mgmt.declare_queue(StreamSpecification(name=name))
    cleanup(lambda ch: ch.queue_delete(name))
    publisher = rmq.publisher(AddressHelper.queue_address(name))
    try:
        for body, annotations, props in messages:
            d = publisher.publish(
                Message(body=body, inferred=True, annotations=annotations, application_properties=props)
            )
            assert d.remote_state == Disposition.ACCEPTED
    finally:
        publisher.close()
    return name


def test_rmq_client_stream_offsets(rmq, mgmt, cleanup):
    s = rmq_stream(rmq, mgmt, cleanup, [(b"s%d" % i, {}, {}) for i in range(10)])
    got = consume(rmq, s, 10, options=StreamConsumerOptions(offset_specification=OffsetSpecification.first))
    assert [g.body for g in got] == [b"s%d" % i for i in range(10)]
    assert [g.annotations.get("x-stream-offset") for g in got] == list(range(10))
    got = consume(rmq, s, 3, options=StreamConsumerOptions(offset_specification=6))
    assert [g.body for g in got] == [b"s6", b"s7", b"s8"]
    got = consume(rmq, s, 1, options=StreamConsumerOptions(offset_specification=OffsetSpecification.last))
    assert [g.body for g in got] == [b"s9"]
    # The stream keeps what its readers settled.
    assert mgmt.queue_info(s).message_count == 10


def test_rmq_client_stream_filter_values(rmq, mgmt, cleanup):
    messages = [(b"f%d" % i, {"x-stream-filter-value": "even" if i % 2 == 0 else "odd"}, {}) for i in range(8)]
    messages.append((b"plain", {}, {}))
    s = rmq_stream(rmq, mgmt, cleanup, messages)
    first = OffsetSpecification.first
    got = consume(rmq, s, 4, options=StreamConsumerOptions(first, StreamFilterOptions(values=["odd"])))
    assert [g.body for g in got] == [b"f1", b"f3", b"f5", b"f7"]
    got = consume(
        rmq, s, 5, options=StreamConsumerOptions(first, StreamFilterOptions(values=["odd"], match_unfiltered=True))
    )
    assert [g.body for g in got] == [b"f1", b"f3", b"f5", b"f7", b"plain"]
    got = consume(rmq, s, 8, options=StreamConsumerOptions(first, StreamFilterOptions(values=["odd", "even"])))
    assert len(got) == 8


def test_rmq_client_stream_application_properties_filter(rmq, mgmt, cleanup):
    regions = ["eu", "us", "eu", "ap", "eu"]
    s = rmq_stream(rmq, mgmt, cleanup, [(b"r%d" % i, {}, {"region": r}) for i, r in enumerate(regions)])
    options = StreamConsumerOptions(
        OffsetSpecification.first, StreamFilterOptions(application_properties={"region": "eu"})
    )
    got = consume(rmq, s, 3, options=options)
    assert [g.body for g in got] == [b"r0", b"r2", b"r4"]


def test_rmq_client_stream_application_properties_prefix_and_suffix(rmq, mgmt, cleanup):
    # RabbitMQ's string forms: "&p:" matches a prefix, "&s:" a suffix, "&&" a leading "&".
    files = ["eu-west/a.png", "eu-north/b.jpg", "us-east/c.png", "eu-west/d.png", "&p:literal"]
    s = rmq_stream(rmq, mgmt, cleanup, [(b"f%d" % i, {}, {"file": f, "n": i}) for i, f in enumerate(files)])

    def read(props, n):
        options = StreamConsumerOptions(OffsetSpecification.first, StreamFilterOptions(application_properties=props))
        return [g.body for g in consume(rmq, s, n, options=options)]

    assert read({"file": "&p:eu-"}, 3) == [b"f0", b"f1", b"f3"]
    assert read({"file": "&s:.png"}, 3) == [b"f0", b"f2", b"f3"]
    assert read({"file": "&&p:literal"}, 1) == [b"f4"]
    assert read({"file": "&s:.png", "n": 3}, 1) == [b"f3"]


def test_rmq_client_stream_properties_filter(rmq, mgmt, cleanup):
    # RabbitMQ 4.1's amqp:properties-filter on fields only AMQP 1.0 has
    # (subject, group-id), with the "&p:" form for a prefix.
    name = uniq("rmq-s")
    mgmt.declare_queue(StreamSpecification(name=name))
    cleanup(lambda ch: ch.queue_delete(name))
    subjects = ["order.created", "order.paid", "invoice.sent", "order.created"]
    publisher = rmq.publisher(AddressHelper.queue_address(name))
    try:
        for i, subject in enumerate(subjects):
            m = Message(body=b"p%d" % i, subject=subject, group_id="g%d" % (i % 2))
            assert publisher.publish(m).remote_state == Disposition.ACCEPTED
    finally:
        publisher.close()

    def read(props, n):
        options = StreamConsumerOptions(OffsetSpecification.first, StreamFilterOptions(message_properties=props))
        return [g.body for g in consume(rmq, name, n, options=options)]

    assert read(MessageProperties(subject="order.created"), 2) == [b"p0", b"p3"]
    assert read(MessageProperties(subject="&p:order."), 3) == [b"p0", b"p1", b"p3"]
    assert read(MessageProperties(subject="&p:order.", group_id="g1"), 2) == [b"p1", b"p3"]


def test_rmq_client_queue_info_counts_amqp1_consumers(mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    c = proton_connect()
    try:
        # Distinct link names: proton names links after the address.
        receivers = [c.create_receiver(f"/queues/{q}", credit=1, name=uniq("rcv")) for _ in range(2)]
        deadline = time.monotonic() + TIMEOUT
        while mgmt.queue_info(q).consumer_count != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mgmt.queue_info(q).consumer_count == 2
        receivers[0].close()
        deadline = time.monotonic() + TIMEOUT
        while mgmt.queue_info(q).consumer_count != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mgmt.queue_info(q).consumer_count == 1
    finally:
        c.close()
    deadline = time.monotonic() + TIMEOUT
    while mgmt.queue_info(q).consumer_count != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mgmt.queue_info(q).consumer_count == 0


def test_rmq_client_consume_requeue_redelivers(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        publisher.publish(Message(body=b"again"))
    finally:
        publisher.close()
    # The first delivery is requeued (released), the second accepted.
    got = consume(rmq, q, 2, decide=lambda i, m: "requeue" if i == 0 else "accept")
    assert [g.body for g in got] == [b"again", b"again"]
    assert not got[0].delivery_count, "first delivery already counted as a failed attempt"
    assert marked_redelivered(got[0], got[1]), f"redelivery not marked: {got}"
    assert wait_info_count(mgmt, q, 0) == 0


def test_rmq_client_requeue_with_annotations_redelivers(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        publisher.publish(Message(body=b"modified"))
    finally:
        publisher.close()
    # modified{delivery-failed=false, undeliverable-here=false}: requeued.
    got = consume(
        rmq, q, 2,
        decide=lambda i, m: ("requeue_with_annotations", {"x-opt-why": "later"}) if i == 0 else "accept",
    )
    assert [g.body for g in got] == [b"modified", b"modified"]
    assert wait_info_count(mgmt, q, 0) == 0


@pytest.mark.parametrize("how", ["discard", "discard_with_annotations"])
def test_rmq_client_discard_dead_letters(rmq, mgmt, cleanup, how):
    dlx = rmq_exchange(mgmt, cleanup, prefix="rmq-dlx")
    dlq = rmq_queue(mgmt, cleanup, prefix="rmq-dlq")
    mgmt.bind(ExchangeToQueueBindingSpecification(source_exchange=dlx, destination_queue=dlq, binding_key="dead"))
    q = rmq_queue(mgmt, cleanup, dead_letter_exchange=dlx, dead_letter_routing_key="dead")
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        publisher.publish(Message(body=b"poison"))
    finally:
        publisher.close()
    # rejected, or modified{delivery-failed, undeliverable-here}: dead-lettered.
    action = "discard" if how == "discard" else ("discard_with_annotations", {"x-opt-why": "bad"})
    got = consume(rmq, q, 1, decide=lambda i, m: action)
    assert [g.body for g in got] == [b"poison"]
    assert wait_info_count(mgmt, dlq, 1) == 1
    assert mgmt.queue_info(q).message_count == 0
    dead = consume(rmq, dlq, 1)
    assert [g.body for g in dead] == [b"poison"]
    assert dead[0].annotations.get("x-exchange") == dlx
    assert dead[0].annotations.get("x-routing-key") == "dead"
    assert dead[0].annotations.get("x-first-death-reason") == "rejected"
    assert dead[0].annotations.get("x-first-death-queue") == q


def test_rmq_client_discard_without_dlx_drops(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    publisher = rmq.publisher(AddressHelper.queue_address(q))
    try:
        publisher.publish(Message(body=b"drop me"))
    finally:
        publisher.close()
    assert len(consume(rmq, q, 1, decide=lambda i, m: "discard")) == 1
    assert wait_info_count(mgmt, q, 0) == 0
    assert consume(rmq, q, 1, timeout=QUIET) == []


def test_rmq_client_delete_queue_and_exchange(rmq, mgmt, cleanup):
    q = rmq_queue(mgmt, cleanup)
    x = rmq_exchange(mgmt, cleanup)
    mgmt.bind(ExchangeToQueueBindingSpecification(source_exchange=x, destination_queue=q, binding_key="k"))
    mgmt.delete_queue(q)
    with pytest.raises(ValidationCodeException):
        mgmt.queue_info(q)
    # The exchange stays (its binding went with the queue): publishing to it
    # is released now.
    publisher = rmq.publisher(AddressHelper.exchange_address(x, "k"))
    try:
        with pytest.raises(RmqSendException) as ei:
            publisher.publish(Message(body=b"nobody"))
        assert ei.value.state == Disposition.RELEASED
    finally:
        publisher.close()
    mgmt.delete_exchange(x)
    c = connect()
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
            c.channel().exchange_declare(x, passive=True)
        assert ei.value.reply_code == 404
    finally:
        if c.is_open:
            c.close()


# ========================================================================
# 2. python-qpid-proton
# ========================================================================


def test_proton_open_announces_rabbitmq(pconn):
    props = pconn.conn.remote_properties
    assert props[symbol("product")] == "RabbitMQ"
    assert props[symbol("version")] == "4.1.0"


def test_proton_v2_queue_round_trip(pconn, cleanup):
    q = declare_queue(cleanup)
    d = send(pconn, f"/queues/{q}", data_message(b"v2"))
    assert d.remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    r.accept()
    assert body_bytes(m.body) == b"v2"
    assert m.annotations[symbol("x-exchange")] == ""
    assert m.annotations[symbol("x-routing-key")] == q
    assert_nothing(r)
    r.close()
    assert wait_count(q, 0) == 0


def test_proton_v2_exchange_addresses(pconn, cleanup):
    q = declare_queue(cleanup)
    bind(q, "amq.direct", q)
    # /exchanges/X/KEY: the key is fixed by the address.
    assert send(pconn, f"/exchanges/amq.direct/{q}", data_message(b"fixed")).remote_state == ProtonDelivery.ACCEPTED
    # /exchanges/X: each message's subject is its routing key.
    assert send(pconn, "/exchanges/amq.direct", data_message(b"subject", subject=q)).remote_state == ProtonDelivery.ACCEPTED
    # A subject nothing is bound to: released.
    assert send(pconn, "/exchanges/amq.direct", data_message(b"x", subject=uniq("nokey"))).remote_state == ProtonDelivery.RELEASED
    r = pconn.create_receiver(f"/queues/{q}", credit=2)
    got = []
    for _ in range(2):
        got.append(receive(r))
        r.accept()
    assert [body_bytes(m.body) for m in got] == [b"fixed", b"subject"]
    assert all(m.annotations[symbol("x-exchange")] == "amq.direct" for m in got)
    assert all(m.annotations[symbol("x-routing-key")] == q for m in got)
    r.close()


def test_proton_v2_percent_encoded_queue_name(pconn, cleanup):
    q = declare_queue(cleanup, prefix="a1 q/ü")
    address = AddressHelper.queue_address(q)
    assert "%2F" in address and "%20" in address
    assert send(pconn, address, data_message(b"encoded")).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(address, credit=1)
    assert body_bytes(receive(r).body) == b"encoded"
    r.accept()
    r.close()


def test_proton_v1_addresses(pconn, cleanup):
    q = declare_queue(cleanup)
    topic_key = f"{q}.t"
    bind(q, "amq.direct", q)
    bind(q, "amq.topic", topic_key)
    assert send(pconn, f"/queue/{q}", data_message(b"queue")).remote_state == ProtonDelivery.ACCEPTED
    assert send(pconn, f"/exchange/amq.direct/{q}", data_message(b"exchange")).remote_state == ProtonDelivery.ACCEPTED
    assert send(pconn, f"/topic/{topic_key}", data_message(b"topic")).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queue/{q}", credit=3)
    got = []
    for _ in range(3):
        m = receive(r)
        r.accept()
        got.append((body_bytes(m.body), m.annotations[symbol("x-exchange")], m.annotations[symbol("x-routing-key")]))
    assert got == [
        (b"queue", "", q),
        (b"exchange", "amq.direct", q),
        (b"topic", "amq.topic", topic_key),
    ]
    assert_nothing(r)
    r.close()


def test_proton_null_target_per_message_to(pconn, cleanup):
    q1 = declare_queue(cleanup)
    q2 = declare_queue(cleanup)
    bind(q2, "amq.direct", q2)
    sender = pconn.create_sender(None)
    try:
        def outcome(address, body=b"x"):
            d = sender.send(data_message(body, address=address), timeout=TIMEOUT, error_states=[])
            return d.remote_state, d.remote.condition

        assert outcome(f"/queues/{q1}", b"to q1") == (ProtonDelivery.ACCEPTED, None)
        assert outcome(f"/exchanges/amq.direct/{q2}", b"to q2") == (ProtonDelivery.ACCEPTED, None)
        # Nothing bound to the key: released.
        assert outcome(f"/exchanges/amq.direct/{uniq('nokey')}") == (ProtonDelivery.RELEASED, None)
        # A missing exchange or queue: rejected with amqp:not-found, and the
        # link stays usable.
        state, cond = outcome(f"/exchanges/{uniq('nox')}/k")
        assert state == ProtonDelivery.REJECTED
        assert cond is not None and cond.name == "amqp:not-found", cond
        state, cond = outcome(f"/queues/{uniq('noq')}")
        assert state == ProtonDelivery.REJECTED
        assert cond is not None and cond.name == "amqp:not-found", cond
        # A message without `to` cannot go anywhere.
        d = sender.send(data_message(b"nowhere"), timeout=TIMEOUT, error_states=[])
        assert d.remote_state == ProtonDelivery.REJECTED
        assert outcome(f"/queues/{q1}", b"still works") == (ProtonDelivery.ACCEPTED, None)
    finally:
        sender.close()
    assert get_one(q1)[2] == b"to q1"
    assert get_one(q1)[2] == b"still works"
    assert get_one(q2)[2] == b"to q2"


@pytest.mark.parametrize("size", [3 * 1024 * 1024])
def test_proton_large_message_multi_frame(pconn, cleanup, size):
    """A body larger than the broker's 1 MiB max frame (and far larger than
    proton's 32 KiB) travels in several transfer frames each way."""
    q = declare_queue(cleanup)
    body = bytes((i * 7 + i // 251) % 256 for i in range(size))
    assert send(pconn, f"/queues/{q}", data_message(body)).remote_state == ProtonDelivery.ACCEPTED
    assert send(pconn, f"/queues/{q}", data_message(body[::-1])).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r, timeout=30)
    r.accept()
    assert body_bytes(m.body) == body
    r.close()
    # AMQP 1.0 -> AMQP 0-9-1: the same bytes.
    assert get_one(q)[2] == body[::-1]
    # AMQP 0-9-1 -> AMQP 1.0.
    c = connect()
    try:
        c.channel().basic_publish("", q, body[1:] + b"!")
    finally:
        c.close()
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r, timeout=30)
    r.accept()
    assert body_bytes(m.body) == body[1:] + b"!"
    r.close()


@pytest.mark.parametrize(
    "body",
    ["héllo wörld", {"k": "v", "n": 42}, ["a", 1, True], 12345],
    ids=["str", "map", "list", "int"],
)
def test_proton_amqp_value_round_trip(pconn, cleanup, body):
    q = declare_queue(cleanup)
    sent = ProtonMessage(body=body, inferred=False)  # an amqp-value section
    assert send(pconn, f"/queues/{q}", sent).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    r.accept()
    r.close()
    assert m.inferred is False, "an amqp-value body came back as data"
    assert type(m.body) is type(body)
    assert m.body == body
    # The encoding marker is the broker's business, not the consumer's.
    assert m.content_type != "message/vnd.rabbitmq.amqp"


def test_proton_amqp_sequence_round_trip(pconn, cleanup):
    q = declare_queue(cleanup)
    sent = ProtonMessage(body=["one", 2, 3.5], inferred=True)  # an amqp-sequence section
    assert send(pconn, f"/queues/{q}", sent).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    r.accept()
    r.close()
    assert m.body == ["one", 2, 3.5]


def test_proton_application_properties_round_trip(pconn, cleanup):
    """Application properties of every simple AMQP type come back with the
    same values (through the 0-9-1 header table the broker stores)."""
    q = declare_queue(cleanup)
    props = {
        "str": "zoë",
        "sym": symbol("a-symbol"),
        "long": -(2**40),
        "int": int32(-7),
        "short": short(-300),
        "byte": byte(-5),
        "ubyte": ubyte(200),
        "ushort": ushort(60000),
        "uint": uint(4000000000),
        "float": float32(0.5),
        "double": 2.5,
        "bool": False,
        "bin": b"\x00\xff",
        "null": None,
        "ts": timestamp(1700000000000),
    }
    assert send(pconn, f"/queues/{q}", data_message(b"props", properties=props)).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    r.accept()
    r.close()
    got = dict(m.properties)
    assert set(got) == set(props), got
    for k, v in props.items():
        assert got[k] == v, (k, got[k], v)


def test_proton_released_modified_rejected(pconn, cleanup):
    q = declare_queue(cleanup)
    for i in range(2):
        send(pconn, f"/queues/{q}", data_message(b"o%d" % i))
    # No standing credit: each receive() grants one, so o1 is not delivered
    # ahead of the requeued o0.
    r = pconn.create_receiver(f"/queues/{q}", credit=0)
    first = receive(r)
    assert (body_bytes(first.body), first.delivery_count) == (b"o0", 0)
    r.release(delivered=False)  # released: back to the queue
    m = receive(r)
    assert body_bytes(m.body) == b"o0"
    assert marked_redelivered(first, m), "a released message came back as a first delivery"
    r.release(delivered=True)  # modified{}: back to the queue as well
    m = receive(r)
    assert body_bytes(m.body) == b"o0"
    r.reject()  # rejected without a dead-letter exchange: dropped
    m = receive(r)
    assert body_bytes(m.body) == b"o1"
    r.accept()
    assert_nothing(r)
    r.close()
    assert wait_count(q, 0) == 0


def test_proton_modified_undeliverable_dead_letters(pconn, cleanup):
    dlq = declare_queue(cleanup, prefix="a1-dlq")
    q = declare_queue(cleanup, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    send(pconn, f"/queues/{q}", data_message(b"not here"))
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    assert body_bytes(m.body) == b"not here"
    # modified{undeliverable-here=true}: dead-lettered, not requeued.
    r.fetcher.unsettled[0].local.undeliverable = True
    r.release(delivered=True)
    assert_nothing(r)
    r.close()
    method, props, body = get_one(dlq)
    assert body == b"not here"
    assert wait_count(q, 0) == 0


def test_proton_many_messages_with_link_credit(pconn, cleanup):
    """More messages than either side's link credit: the broker keeps granting
    the sender credit and honours the receiver's, in order."""
    q = declare_queue(cleanup)
    n = 600
    sender = pconn.create_sender(f"/queues/{q}")
    try:
        for i in range(n):
            d = sender.send(data_message(b"%d" % i), timeout=TIMEOUT, error_states=[])
            assert d.remote_state == ProtonDelivery.ACCEPTED, i
    finally:
        sender.close()
    r = pconn.create_receiver(f"/queues/{q}", credit=50)
    got = []
    for _ in range(n):
        got.append(int(body_bytes(receive(r).body)))
        r.accept()
    assert got == list(range(n))
    assert_nothing(r)
    r.close()
    assert wait_count(q, 0) == 0


def test_proton_pipelined_publish_to_durable_queue(pconn, cleanup):
    """Many unsettled durable messages in flight at once to a durable queue:
    each is accepted (once stored), none twice, none lost."""
    q = declare_queue(cleanup, durable=True)
    n = 300
    sender = pconn.create_sender(f"/queues/{q}")
    try:
        deliveries = [data_message(b"%d" % i, durable=True).send(sender.link) for i in range(n)]
        pconn.wait(lambda: all(d.settled for d in deliveries), timeout=30, msg="outcomes of pipelined publishes")
        states = collections.Counter(d.remote_state for d in deliveries)
        assert states == {ProtonDelivery.ACCEPTED: n}, states
    finally:
        sender.close()
    assert wait_count(q, n) == n
    method, props, body = get_one(q)
    assert (body, props.delivery_mode) == (b"0", 2)


def test_proton_heartbeats(cleanup):
    """A client asking for a 1 s idle timeout gets frames often enough to keep
    its connection (proton closes it after 1 s of silence otherwise)."""
    q = declare_queue(cleanup)
    c = BlockingConnection(amqp1_url(), timeout=TIMEOUT, allowed_mechs="PLAIN", heartbeat=1)
    try:
        with pytest.raises(Timeout):
            c.wait(lambda: False, timeout=3.5, msg="idle")
        assert send(c, f"/queues/{q}", data_message(b"still here")).remote_state == ProtonDelivery.ACCEPTED
    finally:
        with contextlib.suppress(Exception):
            c.close()


def test_proton_drain(pconn, cleanup):
    """A drain with more credit than messages: the messages there are, then
    the credit used up (delivery-count advanced) and the drain answered."""
    q = declare_queue(cleanup)
    for i in range(2):
        send(pconn, f"/queues/{q}", data_message(b"d%d" % i))
    r = pconn.create_receiver(f"/queues/{q}", credit=0)
    link = r.link
    link.drain(5)
    pconn.wait(lambda: len(r.fetcher.incoming) == 2 and link.credit == 0, timeout=TIMEOUT, msg="drain")
    assert link.drained() == 3
    # Straight from the fetcher: receive() would grant a credit of 1 first.
    got = []
    for _ in range(2):
        m = r.fetcher.pop()
        got.append(bytes(m.body))
        r.accept()
    assert got == [b"d0", b"d1"]
    assert link.credit == 0
    # Draining an empty queue answers at once.
    link.drain(4)
    pconn.wait(lambda: link.credit == 0, timeout=TIMEOUT, msg="drain of an empty queue")
    assert link.drained() == 4
    r.close()


def test_proton_ttl_expires_message(pconn, cleanup):
    q = declare_queue(cleanup)
    send(pconn, f"/queues/{q}", data_message(b"short-lived", ttl=0.1))
    send(pconn, f"/queues/{q}", data_message(b"long-lived", ttl=60))
    time.sleep(0.4)
    r = pconn.create_receiver(f"/queues/{q}", credit=2)
    m = receive(r)
    r.accept()
    assert body_bytes(m.body) == b"long-lived"
    assert_nothing(r)
    r.close()


def test_proton_priority_queue(pconn, cleanup):
    q = declare_queue(cleanup, arguments={"x-max-priority": 10})
    for prio in (1, 9, 5):
        send(pconn, f"/queues/{q}", data_message(b"p%d" % prio, priority=prio))
    r = pconn.create_receiver(f"/queues/{q}", credit=3)
    got = []
    for _ in range(3):
        m = receive(r)
        r.accept()
        got.append((body_bytes(m.body), m.priority))
    r.close()
    assert got == [(b"p9", 9), (b"p5", 5), (b"p1", 1)]


def test_proton_unsettled_return_on_connection_close(cleanup):
    q = declare_queue(cleanup)
    c = proton_connect()
    try:
        send(c, f"/queues/{q}", data_message(b"in flight"))
        r = c.create_receiver(f"/queues/{q}", credit=1)
        assert body_bytes(receive(r).body) == b"in flight"
        assert message_count(q) == 0
        # Neither settled nor detached: the connection goes.
    finally:
        c.close()
    assert wait_count(q, 1) == 1
    method, _props, body = get_one(q)
    assert body == b"in flight"
    assert method.redelivered is True


def test_proton_queue_deleted_under_receiver(pconn, cleanup):
    """Deleting a queue detaches its consumers with amqp:resource-deleted; the
    connection goes on."""
    q = declare_queue(cleanup)
    other = declare_queue(cleanup)
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    c = connect()
    try:
        c.channel().queue_delete(q)
    finally:
        c.close()
    with pytest.raises(LinkDetached) as ei:
        r.receive(timeout=TIMEOUT)
    assert ei.value.condition == "amqp:resource-deleted"
    with contextlib.suppress(LinkDetached):
        r.close()
    assert send(pconn, f"/queues/{other}", data_message(b"after")).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{other}", credit=1)
    assert body_bytes(receive(r).body) == b"after"
    r.accept()
    r.close()


def test_proton_auto_delete_queue_goes_with_last_receiver(pconn, cleanup):
    q = uniq("a1-ad")
    c = connect()
    try:
        c.channel().queue_declare(q, auto_delete=True)
    finally:
        c.close()
    cleanup(lambda ch: ch.queue_delete(q))
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    r.close()
    deadline = time.monotonic() + TIMEOUT
    gone = False
    while not gone and time.monotonic() < deadline:
        c = connect()
        try:
            c.channel().queue_declare(q, passive=True)
        except pika.exceptions.ChannelClosedByBroker as e:
            assert e.reply_code == 404
            gone = True
        finally:
            if c.is_open:
                c.close()
        if not gone:
            time.sleep(0.05)
    assert gone, "auto-delete queue still there after its only AMQP 1.0 consumer detached"


def test_proton_presettled_send_and_receive(pconn, cleanup):
    """Links in at-most-once mode: settled transfers both ways."""
    q = declare_queue(cleanup)
    sender = pconn.create_sender(f"/queues/{q}", options=AtMostOnce())
    try:
        for i in range(3):
            sender.send(data_message(b"s%d" % i))
    finally:
        sender.close()  # processes I/O: the settled transfers go out first
    assert wait_count(q, 3) == 3
    r = pconn.create_receiver(f"/queues/{q}", credit=3, options=AtMostOnce())
    got = []
    for _ in range(3):
        m = receive(r)
        got.append(body_bytes(m.body))
    assert got == [b"s0", b"s1", b"s2"]
    r.close()
    # Delivered settled: nothing waits for an outcome, nothing comes back.
    assert wait_count(q, 0) == 0


def test_proton_first_acquirer(pconn, cleanup):
    """RabbitMQ 4 marks a message's first delivery with header first-acquirer
    = true and a redelivery (here after released) with false, leaving
    delivery-count alone (released is not a failed delivery attempt)."""
    q = declare_queue(cleanup)
    send(pconn, f"/queues/{q}", data_message(b"fa"))
    r = pconn.create_receiver(f"/queues/{q}", credit=0)
    m = receive(r)
    assert (m.first_acquirer, m.delivery_count) == (True, 0)
    r.release(delivered=False)
    m = receive(r)
    r.accept()
    r.close()
    assert (m.first_acquirer, m.delivery_count) == (False, 0)


def test_proton_exclusive_queue_of_another_connection(pconn, cleanup):
    """An exclusive queue is consumed only by its own connection: RabbitMQ 4
    refuses the attach with amqp:resource-locked."""
    c = connect()
    try:
        q = uniq("a1-excl")
        c.channel().queue_declare(q, exclusive=True)
        with pytest.raises(LinkDetached) as ei:
            pconn.create_receiver(f"/queues/{q}", credit=0)
        assert ei.value.condition == "amqp:resource-locked", ei.value
    finally:
        c.close()


def test_proton_permissions(cleanup):
    """Attaches are checked against the user's permissions: reading a queue
    needs read, publishing to an exchange needs write on it, declaring
    through /management needs configure."""
    if not MGMT_URL:
        pytest.skip("MGMT_URL not set")
    vhost = make_vhost(cleanup)
    user, password = uniq("a1-user"), uniq("pw")
    r = _api("PUT", f"/api/users/{quote(user, safe='')}", json={"password": password, "tags": ""})
    assert r.status_code in (201, 204), r.text
    cleanup(lambda _ch: _api("DELETE", f"/api/users/{quote(user, safe='')}"))
    r = _api(
        "PUT",
        f"/api/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}",
        json={"configure": "^$", "write": "^amq\\.default$", "read": "^$"},
    )
    assert r.status_code in (201, 204), r.text
    q = uniq("a1-perm")
    c = connect(vhost=quote(vhost, safe=""))
    try:
        c.channel().queue_declare(q)
    finally:
        c.close()
    pc = proton_connect(user, password, vhost=vhost)
    try:
        with pytest.raises(LinkDetached) as ei:
            pc.create_receiver(f"/queues/{q}", credit=0)
        assert ei.value.condition == "amqp:unauthorized-access"
        with pytest.raises(LinkDetached) as ei:
            pc.create_sender("/exchanges/amq.topic/k")
        assert ei.value.condition == "amqp:unauthorized-access"
        # Write on the default exchange is enough to publish to the queue.
        assert send(pc, f"/queues/{q}", data_message(b"allowed")).remote_state == ProtonDelivery.ACCEPTED
    finally:
        pc.close()
    # RabbitMQ 4's client names the vhost in the URI path.
    env = Environment(f"{amqp1_url(user, password)}/{vhost}")
    try:
        conn = env.connection()
        conn.dial()
        conn._conn.timeout = TIMEOUT
        with pytest.raises(ValidationCodeException) as ei:
            conn.management().declare_queue(ClassicQueueSpecification(name=uniq("a1-denied"), is_durable=False))
        assert "403" in str(ei.value)
    finally:
        with contextlib.suppress(BaseException):
            env.close()


def test_proton_vhost_selection(cleanup):
    if not MGMT_URL:
        pytest.skip("MGMT_URL not set")
    vhost = make_vhost(cleanup)
    q = uniq("a1-vhq")
    c = connect(vhost=quote(vhost, safe=""))
    try:
        c.channel().queue_declare(q)
    finally:
        c.close()
    # The same name in the default vhost: must not get the message.
    default_q = declare_queue(cleanup, prefix="unused")
    pc = proton_connect(vhost=vhost)
    try:
        assert send(pc, f"/queues/{q}", data_message(b"in vhost")).remote_state == ProtonDelivery.ACCEPTED
        r = pc.create_receiver(f"/queues/{q}", credit=1)
        assert body_bytes(receive(r).body) == b"in vhost"
        r.accept()
        r.close()
        # A queue of the default vhost does not exist in this one.
        with pytest.raises(LinkDetached) as ei:
            pc.create_receiver(f"/queues/{default_q}", credit=0)
        assert ei.value.condition == "amqp:not-found"
    finally:
        pc.close()
    # The AMQP 0-9-1 side of the vhost saw the queue drained.
    c = connect(vhost=quote(vhost, safe=""))
    try:
        assert c.channel().queue_declare(q, passive=True).method.message_count == 0
    finally:
        c.close()
    # RabbitMQ 4's client names the vhost in the URI path (open.hostname
    # "vhost:NAME" again): its management requests act on that vhost.
    env = Environment(f"{amqp1_url()}/{vhost}")
    try:
        conn = env.connection()
        conn.dial()
        conn._conn.timeout = TIMEOUT
        q2 = uniq("a1-vhq2")
        conn.management().declare_queue(ClassicQueueSpecification(name=q2, is_durable=False))
        assert conn.management().queue_info(q).message_count == 0
    finally:
        with contextlib.suppress(BaseException):
            env.close()
    c = connect(vhost=quote(vhost, safe=""))
    try:
        assert c.channel().queue_declare(q2, passive=True).method.message_count == 0
    finally:
        c.close()
    c = connect()
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            c.channel().queue_declare(q2, passive=True)
    finally:
        if c.is_open:
            c.close()


def test_proton_wrong_password_refused():
    with pytest.raises(ConnectionException) as ei:
        proton_connect(password="not-the-password")
    assert "unauthorized-access" in str(ei.value) or "auth" in str(ei.value).lower(), ei.value


def test_proton_unknown_vhost_refused():
    # The broker answers the open with an open and a close (as RabbitMQ
    # does): the error shows at the connect or at the first use.
    with pytest.raises(ConnectionException) as ei:
        c = proton_connect(vhost=uniq("no-such-vhost"))
        try:
            c.create_sender(None)
        finally:
            with contextlib.suppress(Exception):
                c.close()
    assert "not-found" in str(ei.value) or "vhost" in str(ei.value), ei.value


def test_proton_attach_missing_queue_refused():
    c = proton_connect()
    try:
        with pytest.raises(LinkDetached) as ei:
            # Default credit: none granted before the attach is answered (see
            # test_proton_refused_receiver_with_eager_credit_keeps_connection).
            c.create_receiver(f"/queues/{uniq('missing')}")
        assert ei.value.condition == "amqp:not-found"
    finally:
        with contextlib.suppress(Exception):
            c.close()


def test_proton_refused_links_keep_connection_usable(pconn, cleanup):
    """After refused attaches (the broker's attach + detach with an error,
    answered by the client's detach), the connection goes on: no detach is
    echoed back for a handle the client already released."""
    q = declare_queue(cleanup)
    for address in (f"/queues/{uniq('missing')}", f"/queue/{uniq('missing')}"):
        with pytest.raises(LinkDetached) as ei:
            pconn.create_receiver(address, credit=0)
        assert ei.value.condition == "amqp:not-found"
    with pytest.raises(LinkDetached) as ei:
        pconn.create_sender(f"/exchanges/{uniq('missing')}")
    assert ei.value.condition == "amqp:not-found"
    # Unknown address syntax.
    with pytest.raises(LinkDetached):
        pconn.create_sender("/nowhere/at/all")
    # The same connection still publishes and consumes.
    assert send(pconn, f"/queues/{q}", data_message(b"alive")).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    assert body_bytes(receive(r).body) == b"alive"
    r.accept()
    r.close()


def test_proton_refused_receiver_with_eager_credit_keeps_connection(pconn, cleanup):
    q = declare_queue(cleanup)
    with pytest.raises(LinkDetached) as ei:
        pconn.create_receiver(f"/queues/{uniq('missing')}", credit=1)
    assert ei.value.condition == "amqp:not-found"
    assert send(pconn, f"/queues/{q}", data_message(b"alive")).remote_state == ProtonDelivery.ACCEPTED


def test_proton_consume_from_exchange_refused(pconn):
    # Consuming only from queues.
    with pytest.raises(LinkDetached):
        pconn.create_receiver("/exchanges/amq.direct", credit=0)


# ========================================================================
# 3. Interop with AMQP 0-9-1 (pika)
# ========================================================================


def test_amqp1_to_pika_properties_and_headers(pconn, cleanup):
    q = declare_queue(cleanup)
    body = bytes(range(256)) * 4
    m = data_message(
        body,
        id="msg-1",
        correlation_id="corr-1",
        content_type="application/octet-stream",
        content_encoding="gzip",
        reply_to="/queues/replies",
        user_id=USER.encode(),
        creation_time=1700000000.0,
        priority=7,
        durable=True,
        ttl=60.0,
        properties={
            "str": "zoë",
            "long": 2**40,
            "int": int32(-7),
            "bool": True,
            "double": 2.5,
            "bin": b"\x00\xff",
        },
    )
    assert send(pconn, f"/queues/{q}", m).remote_state == ProtonDelivery.ACCEPTED
    # A second, non-durable message without properties.
    assert send(pconn, f"/queues/{q}", data_message(b"plain", durable=False)).remote_state == ProtonDelivery.ACCEPTED

    _method, p, got = get_one(q)
    assert got == body
    assert p.message_id == "msg-1"
    assert p.correlation_id == "corr-1"
    assert p.content_type == "application/octet-stream"
    assert p.content_encoding == "gzip"
    assert p.reply_to == "/queues/replies"
    assert p.user_id == USER
    assert p.timestamp == 1700000000
    assert p.priority == 7
    assert p.delivery_mode == 2
    assert p.expiration == "60000"
    h = p.headers
    assert h["str"] == "zoë"
    assert h["long"] == 2**40
    assert h["int"] == -7
    assert h["bool"] is True
    # pika 1.3.2 decodes 'd' (and 'f') header values with long(): 2.5 reads
    # as 2. test_proton_application_properties_round_trip checks the value.
    assert "double" in h
    assert h["bin"] == b"\x00\xff"

    _method, p, got = get_one(q)
    assert got == b"plain"
    assert p.delivery_mode == 1
    assert not p.headers
    assert p.content_type is None


def test_amqp1_bare_message_kept_between_amqp1_clients(pconn, cleanup):
    """The bare message is immutable (AMQP 1.0 3.2); RabbitMQ 4 stores an AMQP
    1.0 message as sent, so an AMQP 1.0 consumer gets every property with its
    type: subject, to, group fields, absolute-expiry-time, a ulong message-id,
    a uuid correlation-id, a creation-time in milliseconds, symbol and uint
    application properties."""
    q = declare_queue(cleanup)
    corr = uuid.UUID("12345678-1234-5678-1234-567812345678")
    sent = data_message(
        b"bare",
        address=f"/queues/{q}",
        subject="the-subject",
        id=ulong(42),
        correlation_id=corr,
        group_id="group",
        group_sequence=3,
        reply_to_group_id="reply-group",
        creation_time=1700000000.123,
        expiry_time=1900000000.0,
        properties={"sym": symbol("s"), "u": uint(5)},
    )
    # Proton reads a ulong message-id back as a plain int, whoever sent it:
    # the type to expect is the one its own decoder gives the sent message.
    local = ProtonMessage()
    local.decode(sent.encode())
    assert send(pconn, f"/queues/{q}", sent).remote_state == ProtonDelivery.ACCEPTED
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    r.accept()
    r.close()
    got = {
        "to": m.address,
        "subject": m.subject,
        "id": (type(m.id), m.id),
        "correlation_id": (type(m.correlation_id), m.correlation_id),
        "group_id": m.group_id,
        "group_sequence": m.group_sequence,
        "reply_to_group_id": m.reply_to_group_id,
        "creation_time": m.creation_time,
        "expiry_time": m.expiry_time,
        "sym": (type(m.properties.get("sym")), m.properties.get("sym")),
        "u": (type(m.properties.get("u")), m.properties.get("u")),
    }
    assert got == {
        "to": f"/queues/{q}",
        "subject": "the-subject",
        "id": (type(local.id), 42),
        "correlation_id": (uuid.UUID, corr),
        "group_id": "group",
        "group_sequence": 3,
        "reply_to_group_id": "reply-group",
        "creation_time": 1700000000.123,
        "expiry_time": 1900000000.0,
        "sym": (symbol, "s"),
        "u": (uint, 5),
    }


def test_amqp1_wrong_user_id_rejected(pconn, cleanup):
    q = declare_queue(cleanup)
    d = send(pconn, f"/queues/{q}", data_message(b"x", user_id=b"somebody-else"))
    assert d.remote_state == ProtonDelivery.REJECTED
    assert wait_count(q, 0, timeout=QUIET) == 0


def test_amqp1_without_header_is_durable(pconn, cleanup):
    """A message without a header section is durable for RabbitMQ 4."""
    q = declare_queue(cleanup)
    # proton always writes a header; build the payload by hand: one data section.
    sender = pconn.create_sender(f"/queues/{q}")
    try:
        dlv = sender.link.delivery(str(uuid.uuid4()))
        sender.link.send(b"\x00\x53\x75\xa0\x04bare")
        sender.link.advance()
        pconn.wait(lambda: dlv.settled, msg="waiting for the outcome")
        assert dlv.remote_state == ProtonDelivery.ACCEPTED
    finally:
        sender.close()
    _method, p, body = get_one(q)
    assert body == b"bare"
    assert p.delivery_mode == 2


def test_pika_to_amqp1_properties_and_headers(pconn, cleanup):
    q = declare_queue(cleanup)
    c = connect()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish(
            "",
            q,
            b"\x00from pika\xff",
            pika.BasicProperties(
                message_id="pika-1",
                correlation_id="pika-corr",
                content_type="text/plain",
                content_encoding="utf-8",
                reply_to="replies",
                user_id=USER,
                timestamp=1700000001,
                priority=3,
                delivery_mode=2,
                expiration="60000",
                headers={"count": 7, "big": 2**40, "flag": True, "name": "zoë", "x-custom": "hdr"},
            ),
        )
        ch.basic_publish("", q, b"transient", pika.BasicProperties(delivery_mode=1))
    finally:
        c.close()
    r = pconn.create_receiver(f"/queues/{q}", credit=2)
    m = receive(r)
    r.accept()
    assert body_bytes(m.body) == b"\x00from pika\xff"
    assert m.id == "pika-1"
    assert m.correlation_id == "pika-corr"
    assert m.content_type == "text/plain"
    assert m.content_encoding == "utf-8"
    assert m.reply_to == "replies"
    assert m.user_id == USER.encode()
    assert m.creation_time == 1700000001
    assert m.priority == 3
    assert m.durable is True
    assert m.ttl == 60
    props = m.properties
    assert props["count"] == 7
    assert props["big"] == 2**40
    assert props["flag"] is True
    assert props["name"] == "zoë"
    # RabbitMQ's own headers (x-...) travel as message annotations.
    assert m.annotations[symbol("x-custom")] == "hdr"
    assert "x-custom" not in props
    assert m.annotations[symbol("x-exchange")] == ""
    assert m.annotations[symbol("x-routing-key")] == q
    m = receive(r)
    r.accept()
    assert body_bytes(m.body) == b"transient"
    assert m.durable is False
    r.close()


def test_amqp_value_body_seen_by_pika(pconn, cleanup):
    q = declare_queue(cleanup)
    send(pconn, f"/queues/{q}", ProtonMessage(body="a string", inferred=False, properties={"k": "v"}))
    _method, p, body = get_one(q)
    assert p.content_type == "message/vnd.rabbitmq.amqp"
    # The body is the encoded amqp-value section: 0x00 0x53 0x77, then the string.
    assert body.startswith(b"\x00\x53\x77"), body
    assert b"a string" in body
    assert p.headers["k"] == "v"
    # A 0-9-1 client re-publishing it as it got it: AMQP 1.0 consumers see
    # the amqp-value again.
    c = connect()
    try:
        c.channel().basic_publish("", q, body, pika.BasicProperties(content_type=p.content_type))
    finally:
        c.close()
    r = pconn.create_receiver(f"/queues/{q}", credit=1)
    m = receive(r)
    r.accept()
    r.close()
    assert m.body == "a string"


# ========================================================================
# 4. MQTT -> AMQP 1.0
# ========================================================================


def test_mqtt_publish_reaches_amqp1_receiver(pconn, cleanup):
    mparts = urlsplit(MQTT_URL)
    q = declare_queue(cleanup)
    base = uniq("a1mqtt").replace("-", "")
    bind(q, "amq.topic", f"{base}.a.b")
    r = pconn.create_receiver(f"/queues/{q}", credit=2)

    connacks = []
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=uniq("a1paho"),
        protocol=mqtt.MQTTv311,
        reconnect_on_failure=False,
    )
    client.username_pw_set(USER, PASSWORD)
    client.on_connect = lambda _c, _u, _f, rc, _p: connacks.append(rc)
    client.connect(mparts.hostname or "127.0.0.1", mparts.port or 1883, keepalive=30)
    client.loop_start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not connacks and time.monotonic() < deadline:
            time.sleep(0.02)
        assert connacks and not connacks[0].is_failure, f"CONNACK: {connacks}"
        info = client.publish(f"{base}/a/b", b"\x01from mqtt", qos=1)
        info.wait_for_publish(timeout=TIMEOUT)
        assert info.is_published()
        client.publish(f"{base}/a/c", b"not bound", qos=1).wait_for_publish(timeout=TIMEOUT)
    finally:
        client.disconnect()
        client.loop_stop()
    m = receive(r)
    r.accept()
    assert body_bytes(m.body) == b"\x01from mqtt"
    assert m.annotations[symbol("x-exchange")] == "amq.topic"
    assert m.annotations[symbol("x-routing-key")] == f"{base}.a.b"
    assert_nothing(r)
    r.close()


# ========================================================================
# 5. The management HTTP API
# ========================================================================


def _api(method, path, **kw):
    parts = urlsplit(MGMT_URL)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    kw.setdefault("timeout", TIMEOUT)
    return requests.request(method, base + path, auth=(parts.username or "guest", parts.password or "guest"), **kw)


def _metric(family):
    """The value of a metric family without labels, from the Prometheus endpoint."""
    r = _api("GET", "/metrics")
    assert r.status_code == 200, r.text
    return sample_value(families(r.text)[family])


def make_vhost(cleanup):
    """A fresh vhost the AMQP user may use; deleted at teardown."""
    name = uniq("a1-vh")
    r = _api("PUT", f"/api/vhosts/{quote(name, safe='')}")
    assert r.status_code in (201, 204), r.text
    r = _api(
        "PUT",
        f"/api/permissions/{quote(name, safe='')}/{quote(USER, safe='')}",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    )
    assert r.status_code in (201, 204), r.text
    cleanup(lambda _ch: _api("DELETE", f"/api/vhosts/{quote(name, safe='')}"))
    return name


def test_http_api_lists_amqp1_connection(cleanup):
    if not MGMT_URL:
        pytest.skip("MGMT_URL not set")
    vhost = make_vhost(cleanup)
    opened_before = _metric("lavinmq_connections_opened")
    pc = proton_connect(vhost=vhost)
    try:
        deadline = time.monotonic() + 15
        conns = []
        while time.monotonic() < deadline:
            r = _api("GET", f"/api/vhosts/{quote(vhost, safe='')}/connections")
            assert r.status_code == 200, r.text
            conns = r.json()
            if conns:
                break
            time.sleep(0.1)
        assert len(conns) == 1, conns
        c = conns[0]
        assert c["protocol"] == "AMQP 1.0"
        assert c["vhost"] == vhost
        assert c["user"] == USER
        r = _api("GET", f"/api/connections/{quote(c['name'], safe='')}")
        assert r.status_code == 200, r.text
        assert r.json()["protocol"] == "AMQP 1.0"
        # The Prometheus endpoint counts it as 0-9-1 connections are counted.
        assert _metric("lavinmq_connections") >= 1
        assert _metric("lavinmq_connections_opened") >= opened_before + 1
    finally:
        pc.close()
    # Closing it removes it from the list.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not _api("GET", f"/api/vhosts/{quote(vhost, safe='')}/connections").json():
            break
        time.sleep(0.1)
    assert _api("GET", f"/api/vhosts/{quote(vhost, safe='')}/connections").json() == []
