"""MQTT 3.1.1 with paho-mqtt 2.x: connect, QoS 0/1/2, retained messages, wills,
persistent sessions, MQTT <-> AMQP through amq.topic, refused logins and MQTT
over WebSocket on the HTTP port.

The MQTT listener comes from MQTT_URL (mqtt://host:port), the WebSocket
endpoint from the host and port of MGMT_URL. Every wait is bounded.
"""
import os
import queue
import socket
import time
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from conftest import connect as amqp_connect
from conftest import drain, uniq

MQTT_URL = os.environ.get("MQTT_URL", "mqtt://127.0.0.1:1883")
MGMT_URL = os.environ.get("MGMT_URL", "http://guest:guest@127.0.0.1:15672")

# Bound on every single wait for the broker.
TIMEOUT = 10
# How long to watch for something that must not arrive.
QUIET = 0.5


def _host_port(url, default_port):
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


MQTT_HOST, MQTT_PORT = _host_port(MQTT_URL, 1883)
WS_HOST, WS_PORT = _host_port(MGMT_URL, 15672)

SUCCESS = ReasonCode(PacketTypes.CONNACK, "Success")
BAD_CREDENTIALS = ReasonCode(PacketTypes.CONNACK, "Bad user name or password")


class Client:
    """A paho client driven by its network thread, with every callback
    feeding a queue that the test reads with a timeout."""

    def __init__(self, client_id=None, clean_session=True, username=None, password=None,
                 transport="tcp", ws_path=None, will=None):
        self.client_id = uniq("paho") if client_id is None else client_id
        self.c = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=clean_session,
            protocol=mqtt.MQTTv311,
            transport=transport,
            reconnect_on_failure=False,
        )
        if transport == "websockets":
            self.c.ws_set_options(path=ws_path or "/mqtt")
            self.host, self.port = WS_HOST, WS_PORT
        else:
            self.host, self.port = MQTT_HOST, MQTT_PORT
        if username is not None:
            self.c.username_pw_set(username, password)
        if will is not None:
            topic, payload, qos, retain = will
            self.c.will_set(topic, payload, qos=qos, retain=retain)
        self.connacks = queue.Queue()
        self.messages = queue.Queue()
        self.subacks = queue.Queue()
        self.disconnects = queue.Queue()
        self.c.on_connect = lambda _c, _u, flags, rc, _p: self.connacks.put((flags, rc))
        self.c.on_message = lambda _c, _u, msg: self.messages.put(msg)
        self.c.on_subscribe = lambda _c, _u, mid, rcs, _p: self.subacks.put((mid, rcs))
        self.c.on_disconnect = lambda _c, _u, _f, rc, _p: self.disconnects.put(rc)
        self.started = False

    def try_connect(self, keepalive=30):
        """Connects and returns (flags, reason code) of the CONNACK."""
        self.c.connect(self.host, self.port, keepalive=keepalive)
        self.c.loop_start()
        self.started = True
        try:
            return self.connacks.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no CONNACK for {self.client_id} within {TIMEOUT} s")

    def connect(self, keepalive=30):
        flags, rc = self.try_connect(keepalive)
        assert rc == SUCCESS, f"CONNACK of {self.client_id}: {rc}"
        return flags

    def subscribe(self, topic, qos=0):
        result, mid = self.c.subscribe(topic, qos)
        assert result == mqtt.MQTT_ERR_SUCCESS, f"subscribe request: {result}"
        try:
            got_mid, rcs = self.subacks.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no SUBACK for {topic} within {TIMEOUT} s")
        assert got_mid == mid
        assert len(rcs) == 1 and not rcs[0].is_failure, f"SUBACK for {topic}: {rcs}"
        assert rcs[0].value == qos, f"granted QoS for {topic}: {rcs[0]}"

    def publish(self, topic, payload, qos=0, retain=False):
        """Publishes and, for QoS 1 and 2, waits for the broker's acknowledgement."""
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, f"publish request: {info.rc}"
        info.wait_for_publish(timeout=TIMEOUT)
        assert info.is_published(), f"publish to {topic} (QoS {qos}) not acknowledged within {TIMEOUT} s"

    def next_message(self, timeout=TIMEOUT):
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"{self.client_id}: no message within {timeout} s")

    def assert_no_message(self, quiet=QUIET):
        try:
            msg = self.messages.get(timeout=quiet)
        except queue.Empty:
            return
        pytest.fail(f"{self.client_id}: unexpected message on {msg.topic!r}: {msg.payload!r}")

    def disconnect(self):
        """Sends DISCONNECT and waits until the network thread has stopped."""
        if not self.started:
            return
        if self.c.is_connected():
            self.c.disconnect()
            try:
                self.disconnects.get(timeout=TIMEOUT)
            except queue.Empty:
                pass
        self.c.loop_stop()
        self.started = False

    def drop(self):
        """Closes the socket without DISCONNECT (an abnormal disconnect)."""
        self.c.loop_stop()
        self.started = False
        sock = self.c.socket()
        assert sock is not None, "client has no socket"
        # Over WebSocket, the wrapper's TCP socket: no close frame is sent.
        raw = getattr(sock, "_socket", sock)
        try:
            raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raw.close()


@pytest.fixture
def clients():
    """Creates clients and stops each of them at teardown."""
    made = []

    def make(**kw):
        c = Client(**kw)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.disconnect()
        except Exception:
            pass


def _clear_session(client_id):
    """Removes a persistent session by connecting once with a clean session."""
    c = Client(client_id=client_id, clean_session=True)
    try:
        c.connect()
    finally:
        c.disconnect()


def test_connect_connack(clients):
    c = clients()
    flags = c.connect()
    assert flags.session_present is False
    assert c.c.is_connected()
    c.disconnect()
    assert not c.c.is_connected()


def test_connect_anonymous_without_client_id(clients):
    # An empty client id with a clean session gets one made up by the broker.
    c = clients(client_id="")
    flags = c.connect()
    assert flags.session_present is False


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_round_trip(clients, qos):
    topic = f"compat/{uniq('rt')}/q{qos}"
    sub = clients()
    sub.connect()
    sub.subscribe(topic, qos)
    pub = clients()
    pub.connect()
    payloads = [f"qos{qos}-{i}".encode() for i in range(5)]
    for p in payloads:
        pub.publish(topic, p, qos=qos)
    got = [sub.next_message() for _ in payloads]
    assert [m.payload for m in got] == payloads
    for m in got:
        assert m.topic == topic
        assert m.qos == qos
        assert m.retain is False
    sub.assert_no_message()


def test_qos_downgraded_to_subscription(clients):
    topic = f"compat/{uniq('down')}"
    sub = clients()
    sub.connect()
    sub.subscribe(topic, 0)
    pub = clients()
    pub.connect()
    pub.publish(topic, b"at least once", qos=1)
    m = sub.next_message()
    assert (m.payload, m.qos) == (b"at least once", 0)


def test_wildcard_subscription(clients):
    base = f"compat/{uniq('wild')}"
    sub = clients()
    sub.connect()
    sub.subscribe(f"{base}/+/temp", 1)
    sub.subscribe(f"{base}/all/#", 1)
    pub = clients()
    pub.connect()
    pub.publish(f"{base}/kitchen/temp", b"21", qos=1)
    pub.publish(f"{base}/kitchen/humidity", b"40", qos=1)
    pub.publish(f"{base}/all/a/b/c", b"deep", qos=1)
    got = sorted((m.topic, m.payload) for m in (sub.next_message(), sub.next_message()))
    assert got == [(f"{base}/all/a/b/c", b"deep"), (f"{base}/kitchen/temp", b"21")]
    sub.assert_no_message()


def test_retained_message_on_later_subscribe(clients):
    topic = f"compat/{uniq('retain')}/state"
    live = clients()
    live.connect()
    live.subscribe(topic, 1)
    pub = clients()
    pub.connect()
    try:
        pub.publish(topic, b"on", qos=1, retain=True)
        # Subscribers present at publish time get it without the retain flag.
        m = live.next_message()
        assert (m.payload, m.retain) == (b"on", False)

        later = clients()
        later.connect()
        later.subscribe(topic, 1)
        m = later.next_message()
        assert m.topic == topic
        assert m.payload == b"on"
        assert m.retain is True
        later.assert_no_message()

        # A newer retained message replaces the old one.
        pub.publish(topic, b"off", qos=1, retain=True)
        third = clients()
        third.connect()
        third.subscribe(topic, 1)
        m = third.next_message()
        assert (m.payload, m.retain) == (b"off", True)
        third.assert_no_message()
    finally:
        # An empty retained message clears the topic.
        pub.publish(topic, b"", qos=1, retain=True)
    fresh = clients()
    fresh.connect()
    fresh.subscribe(topic, 1)
    fresh.assert_no_message()


def test_will_on_abnormal_disconnect(clients):
    will_topic = f"compat/{uniq('will')}/status"
    watcher = clients()
    watcher.connect()
    watcher.subscribe(will_topic, 1)
    dying = clients(will=(will_topic, b"gone", 1, False))
    dying.connect()
    dying.drop()
    m = watcher.next_message()
    assert (m.topic, m.payload, m.qos) == (will_topic, b"gone", 1)
    watcher.assert_no_message()


def test_no_will_on_clean_disconnect(clients):
    will_topic = f"compat/{uniq('nowill')}/status"
    watcher = clients()
    watcher.connect()
    watcher.subscribe(will_topic, 1)
    polite = clients(will=(will_topic, b"gone", 1, False))
    polite.connect()
    polite.disconnect()
    watcher.assert_no_message()


def test_persistent_session_gets_messages_published_while_offline(clients):
    client_id = uniq("persist")
    topic = f"compat/{client_id}/inbox"
    try:
        first = clients(client_id=client_id, clean_session=False)
        flags = first.connect()
        assert flags.session_present is False
        first.subscribe(topic, 1)
        first.disconnect()

        pub = clients()
        pub.connect()
        for i in range(3):
            pub.publish(topic, f"offline-{i}".encode(), qos=1)

        again = clients(client_id=client_id, clean_session=False)
        flags = again.connect()
        assert flags.session_present is True
        got = [again.next_message() for _ in range(3)]
        assert [m.payload for m in got] == [b"offline-0", b"offline-1", b"offline-2"]
        assert all(m.topic == topic and m.qos == 1 for m in got)
        again.assert_no_message()
        again.disconnect()
    finally:
        _clear_session(client_id)

    # After a clean session the subscription is gone.
    pub = clients()
    pub.connect()
    pub.publish(topic, b"after clean", qos=1)
    back = clients(client_id=client_id, clean_session=False)
    try:
        flags = back.connect()
        assert flags.session_present is False
        back.assert_no_message()
        back.disconnect()
    finally:
        _clear_session(client_id)


def test_mqtt_to_amqp(clients):
    conn = amqp_connect()
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", routing_key="sensors.*.temp")
        pub = clients()
        pub.connect()
        pub.publish("sensors/1/temp", b"22.5", qos=1)
        pub.publish("sensors/1/humidity", b"40", qos=1)
        got = drain(ch, q, 1, timeout=TIMEOUT)
        assert len(got) == 1, "MQTT publish did not reach the AMQP queue"
        method, _props, body = got[0]
        assert method.exchange == "amq.topic"
        assert method.routing_key == "sensors.1.temp"
        assert body == b"22.5"
        # The humidity reading matches no binding.
        assert ch.basic_get(q, auto_ack=True)[0] is None
    finally:
        conn.close()


def test_amqp_to_mqtt(clients):
    base = uniq("fromamqp")
    sub = clients()
    sub.connect()
    sub.subscribe(f"{base}/+/temp", 1)
    conn = amqp_connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", f"{base}.kitchen.temp", b"from amqp")
    finally:
        conn.close()
    m = sub.next_message()
    assert m.topic == f"{base}/kitchen/temp"
    assert m.payload == b"from amqp"


def test_bad_password_refused(clients):
    c = clients(username="guest", password="not-the-password")
    flags, rc = c.try_connect()
    assert rc.is_failure
    assert rc == BAD_CREDENTIALS, f"expected 'Bad user name or password' (CONNACK 4), got {rc}"
    assert str(rc) == "Bad user name or password"
    assert flags.session_present is False
    # The broker closes the connection after the refusal.
    try:
        c.disconnects.get(timeout=TIMEOUT)
    except queue.Empty:
        pytest.fail("broker did not close the refused connection")
    assert not c.c.is_connected()


def test_unknown_user_refused(clients):
    c = clients(username=uniq("nobody"), password="x")
    _flags, rc = c.try_connect()
    assert rc == BAD_CREDENTIALS, f"got {rc}"


def test_vhost_prefixed_username(clients):
    # "vhost:user" picks the vhost; guest's default vhost is "/".
    c = clients(username="/:guest", password="guest")
    c.connect()
    topic = f"compat/{uniq('vhost')}"
    c.subscribe(topic, 1)
    c.publish(topic, b"same vhost", qos=1)
    assert c.next_message().payload == b"same vhost"


@pytest.mark.parametrize("path", ["/mqtt", "/ws/mqtt", "/"])
def test_websocket_round_trip(clients, path):
    topic = f"compat/{uniq('ws')}/t"
    ws_sub = clients(transport="websockets", ws_path=path)
    flags = ws_sub.connect()
    assert flags.session_present is False
    ws_sub.subscribe(topic, 1)
    tcp_pub = clients()
    tcp_pub.connect()
    tcp_pub.publish(topic, b"tcp to ws", qos=1)
    m = ws_sub.next_message()
    assert (m.topic, m.payload, m.qos) == (topic, b"tcp to ws", 1)

    # And the other way round, QoS 2 from the WebSocket client.
    tcp_pub.subscribe(topic + "/back", 2)
    ws_sub.publish(topic + "/back", b"ws to tcp", qos=2)
    m = tcp_pub.next_message()
    assert (m.topic, m.payload, m.qos) == (topic + "/back", b"ws to tcp", 2)


def test_websocket_bad_password_refused(clients):
    c = clients(transport="websockets", username="guest", password="wrong")
    _flags, rc = c.try_connect()
    assert rc == BAD_CREDENTIALS, f"got {rc}"


def test_websocket_will(clients):
    will_topic = f"compat/{uniq('wswill')}"
    watcher = clients()
    watcher.connect()
    watcher.subscribe(will_topic, 1)
    dying = clients(transport="websockets", will=(will_topic, b"ws gone", 1, False))
    dying.connect()
    dying.drop()
    m = watcher.next_message()
    assert (m.topic, m.payload) == (will_topic, b"ws gone")


def test_keepalive_ping(clients):
    # A short keep alive: the client pings and the broker keeps the connection.
    c = clients()
    c.connect(keepalive=1)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert c.disconnects.empty(), "broker dropped a client that pings"
        time.sleep(0.1)
    topic = f"compat/{uniq('ka')}"
    c.subscribe(topic, 0)
    c.publish(topic, b"still here", qos=1)
    assert c.next_message().payload == b"still here"
