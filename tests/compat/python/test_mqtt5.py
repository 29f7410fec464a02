"""MQTT 5.0 (OASIS standard) with paho-mqtt 2.x: CONNACK properties, reason
codes, user/request-response properties, message and session expiry, will
delay, topic aliases, subscription options and identifiers, shared
subscriptions, flow control (Receive Maximum, Maximum Packet Size), malformed
packets, enhanced authentication and MQTT 5 <-> AMQP property mapping.

The MQTT listener comes from MQTT_URL (mqtt://host:port), AMQP from AMQP_URL.
Every client logs in as guest/guest. Every wait is bounded.

The MQTT-only tests follow the spec and also pass against a reference broker
(mosquitto). Tests that use AMQP or rely on behaviour the spec leaves open are
marked with `lavinmq_only`; they are skipped when MQTT5_BROKER_IS_LAVINMQ=0.
"""
import os
import queue
import socket
import struct
import time
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
import pika
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from conftest import connect as amqp_connect
from conftest import drain, uniq

MQTT_URL = os.environ.get("MQTT_URL", "mqtt://127.0.0.1:1883")
IS_LAVINMQ = os.environ.get("MQTT5_BROKER_IS_LAVINMQ", "1") != "0"

# Bound on every single wait for the broker.
TIMEOUT = 10
# How long to watch for something that must not arrive.
QUIET = 0.5

_parts = urlsplit(MQTT_URL)
MQTT_HOST, MQTT_PORT = _parts.hostname or "127.0.0.1", _parts.port or 1883

USERNAME, PASSWORD = "guest", "guest"


def lavinmq_only(why):
    """Marks a test that needs AMQP or checks behaviour beyond the spec."""
    return pytest.mark.skipif(not IS_LAVINMQ, reason=f"LavinMQ-specific: {why}")


def props(packet_type, **values):
    """Properties(packet_type) with the given attributes, e.g.
    props(PacketTypes.PUBLISH, ContentType="text/plain")."""
    p = Properties(packet_type)
    for name, value in values.items():
        setattr(p, name, value)
    return p


def prop(properties, name, default=None):
    return getattr(properties, name, default) if properties is not None else default


def reason(packet_type, name):
    return ReasonCode(packet_type, name)


class Client:
    """A paho MQTT 5 client driven by its network thread, with every callback
    feeding a queue that the test reads with a timeout."""

    def __init__(self, client_id=None, protocol=mqtt.MQTTv5, will=None, manual_ack=False,
                 username=USERNAME, password=PASSWORD):
        self.client_id = uniq("paho5") if client_id is None else client_id
        self.protocol = protocol
        kw = {"clean_session": True} if protocol != mqtt.MQTTv5 else {}
        self.c = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=protocol,
            reconnect_on_failure=False,
            manual_ack=manual_ack,
            **kw,
        )
        if username is not None:
            self.c.username_pw_set(username, password)
        if will is not None:
            # (topic, payload, qos, retain, will properties or None)
            topic, payload, qos, retain, will_props = will
            self.c.will_set(topic, payload, qos=qos, retain=retain, properties=will_props)
        self.connacks = queue.Queue()
        self.messages = queue.Queue()
        self.subacks = queue.Queue()
        self.unsubacks = queue.Queue()
        self.disconnects = queue.Queue()
        self.pubacks = {}
        self.c.on_connect = lambda _c, _u, flags, rc, p: self.connacks.put((flags, rc, p))
        self.c.on_message = lambda _c, _u, msg: self.messages.put(msg)
        self.c.on_subscribe = lambda _c, _u, mid, rcs, p: self.subacks.put((mid, rcs, p))
        self.c.on_unsubscribe = lambda _c, _u, mid, rcs, p: self.unsubacks.put((mid, rcs, p))
        self.c.on_disconnect = lambda _c, _u, fl, rc, p: self.disconnects.put((fl, rc, p))
        self.c.on_publish = lambda _c, _u, mid, rc, p: self.pubacks.__setitem__(mid, (rc, p))
        self.started = False

    def try_connect(self, clean_start=True, properties=None, keepalive=30):
        """Connects and returns (flags, reason code, properties) of the CONNACK."""
        if self.protocol == mqtt.MQTTv5:
            self.c.connect(MQTT_HOST, MQTT_PORT, keepalive=keepalive,
                           clean_start=clean_start, properties=properties)
        else:
            self.c.connect(MQTT_HOST, MQTT_PORT, keepalive=keepalive)
        self.c.loop_start()
        self.started = True
        try:
            return self.connacks.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no CONNACK for {self.client_id!r} within {TIMEOUT} s")

    def connect(self, clean_start=True, properties=None, keepalive=30, **connect_props):
        """Connects (CONNECT properties as keyword arguments) and returns
        (flags, CONNACK properties); the CONNACK must be a success."""
        if connect_props:
            properties = props(PacketTypes.CONNECT, **connect_props)
        flags, rc, p = self.try_connect(clean_start, properties, keepalive)
        assert rc == 0, f"CONNACK of {self.client_id!r}: {rc}"
        return flags, p

    def try_subscribe(self, topic, qos=0, options=None, properties=None):
        """Subscribes; returns the SUBACK reason codes, or None if the
        connection closed instead."""
        if options is not None:
            result, mid = self.c.subscribe(topic, options=options, properties=properties)
        else:
            result, mid = self.c.subscribe(topic, qos, properties=properties)
        assert result == mqtt.MQTT_ERR_SUCCESS, f"subscribe request: {result}"
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                got_mid, rcs, _p = self.subacks.get(timeout=0.05)
            except queue.Empty:
                if not self.disconnects.empty():
                    return None
                continue
            assert got_mid == mid
            return rcs
        pytest.fail(f"no SUBACK for {topic} within {TIMEOUT} s")

    def subscribe(self, topic, qos=0, options=None, properties=None, **sub_props):
        if sub_props:
            properties = props(PacketTypes.SUBSCRIBE, **sub_props)
        rcs = self.try_subscribe(topic, qos, options, properties)
        assert rcs is not None, f"connection closed instead of SUBACK for {topic}"
        assert len(rcs) == 1 and not rcs[0].is_failure, f"SUBACK for {topic}: {rcs}"
        want = options.QoS if options is not None else qos
        assert rcs[0].value == want, f"granted QoS for {topic}: {rcs[0]}"

    def unsubscribe(self, topics):
        result, mid = self.c.unsubscribe(topics)
        assert result == mqtt.MQTT_ERR_SUCCESS, f"unsubscribe request: {result}"
        try:
            got_mid, rcs, _p = self.unsubacks.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no UNSUBACK for {topics} within {TIMEOUT} s")
        assert got_mid == mid
        return rcs

    def publish(self, topic, payload, qos=0, retain=False, properties=None, **pub_props):
        """Publishes and, for QoS 1 and 2, waits for the broker's acknowledgement.
        Returns the PUBACK/PUBREC reason code (None for QoS 0)."""
        if pub_props:
            properties = props(PacketTypes.PUBLISH, **pub_props)
        info = self.c.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, f"publish request: {info.rc}"
        info.wait_for_publish(timeout=TIMEOUT)
        assert info.is_published(), f"publish to {topic!r} (QoS {qos}) not acknowledged within {TIMEOUT} s"
        if qos == 0:
            return None
        rc, _p = self.pubacks[info.mid]
        # 0x10 "No matching subscribers" is a success code too.
        assert not rc.is_failure, f"publish to {topic!r} refused: {rc}"
        return rc

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

    def messages_until_quiet(self, quiet=QUIET):
        out = []
        while True:
            try:
                out.append(self.messages.get(timeout=quiet))
            except queue.Empty:
                return out

    def wait_disconnected(self, timeout=TIMEOUT):
        """Waits for the connection to end; returns (disconnect flags, reason
        code, properties)."""
        try:
            return self.disconnects.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"{self.client_id}: connection still open after {timeout} s")

    def disconnect(self, reasoncode=None, properties=None):
        """Sends DISCONNECT and waits until the network thread has stopped."""
        if not self.started:
            return
        if self.c.is_connected():
            self.c.disconnect(reasoncode=reasoncode, properties=properties)
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
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


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
    """Ends a persistent session: clean start, session expiry 0."""
    c = Client(client_id=client_id)
    try:
        c.connect(clean_start=True)
    finally:
        c.disconnect()


def _user_props(msg):
    return list(prop(msg.properties, "UserProperty", []))


def _sub_ids(msg):
    ids = prop(msg.properties, "SubscriptionIdentifier", [])
    return list(ids) if isinstance(ids, list) else [ids]


# --- connect ----------------------------------------------------------------


def test_connect_v5(clients):
    """CONNACK Success, Session Present 0 on clean start; an empty client id
    gets an Assigned Client Identifier (3.1.3.1, 3.2.2.3.7)."""
    c = clients()
    flags, p = c.connect(clean_start=True)
    assert flags.session_present is False
    assert isinstance(p, Properties)
    assert c.c.is_connected()
    c.disconnect()

    anon = clients(client_id="")
    flags, p = anon.connect(clean_start=True)
    assert flags.session_present is False
    assigned = prop(p, "AssignedClientIdentifier")
    assert assigned, f"no Assigned Client Identifier in CONNACK properties: {p}"


@lavinmq_only("the reference broker accepts any credentials")
def test_bad_password(clients):
    """Wrong credentials: CONNACK 0x86 Bad User Name or Password, then close."""
    c = clients(password="not-the-password")
    flags, rc, _p = c.try_connect()
    assert rc.is_failure
    assert rc.value == 0x86, f"expected 0x86 Bad user name or password, got {rc}"
    assert flags.session_present is False
    c.wait_disconnected()
    assert not c.c.is_connected()


# --- publish / subscribe ------------------------------------------------------


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_round_trip(clients, qos):
    """QoS 0/1/2 delivery; PUBACK/PUBREC reason code Success when matched."""
    topic = f"compat5/{uniq('rt')}/q{qos}"
    sub = clients()
    sub.connect()
    sub.subscribe(topic, qos)
    pub = clients()
    pub.connect()
    payloads = [f"qos{qos}-{i}".encode() for i in range(3)]
    for p in payloads:
        rc = pub.publish(topic, p, qos=qos)
        if qos > 0:
            assert rc.value == 0, f"PUBACK/PUBREC reason: {rc}"
    got = [sub.next_message() for _ in payloads]
    assert [m.payload for m in got] == payloads
    for m in got:
        assert (m.topic, m.qos, m.retain) == (topic, qos, False)
    sub.assert_no_message()


def test_user_properties(clients):
    """User Properties are forwarded unaltered, order kept, repeated names
    kept (3.3.2.3.7)."""
    topic = f"compat5/{uniq('up')}"
    sub = clients()
    sub.connect()
    sub.subscribe(topic, 1)
    pub = clients()
    pub.connect()
    sent = [("b", "1"), ("a", "2"), ("b", "3"), ("zz", ""), ("a", "2")]
    pub.publish(topic, b"x", qos=1, UserProperty=sent)
    m = sub.next_message()
    assert _user_props(m) == sent


def test_request_response_properties(clients):
    """Response Topic, Correlation Data, Content Type and Payload Format
    Indicator are forwarded unaltered (3.3.2.3.2-3.3.2.3.9)."""
    topic = f"compat5/{uniq('rr')}"
    sub = clients()
    sub.connect()
    sub.subscribe(topic, 1)
    pub = clients()
    pub.connect()
    pub.publish(topic, "héllo".encode(), qos=1, ResponseTopic=f"{topic}/reply",
                CorrelationData=b"\x00corr\xff", ContentType="text/plain; charset=utf-8",
                PayloadFormatIndicator=1)
    m = sub.next_message()
    assert m.payload == "héllo".encode()
    assert prop(m.properties, "ResponseTopic") == f"{topic}/reply"
    assert prop(m.properties, "CorrelationData") == b"\x00corr\xff"
    assert prop(m.properties, "ContentType") == "text/plain; charset=utf-8"
    assert prop(m.properties, "PayloadFormatIndicator") == 1


def test_message_expiry(clients):
    """Message Expiry Interval is forwarded as the time left; a message that
    expires while queued for an offline session is not delivered (3.3.2.3.3)."""
    topic = f"compat5/{uniq('exp')}"
    live = clients()
    live.connect()
    live.subscribe(topic, 1)
    pub = clients()
    pub.connect()
    pub.publish(topic, b"live", qos=1, MessageExpiryInterval=60)
    m = live.next_message()
    left = prop(m.properties, "MessageExpiryInterval")
    assert left is not None, "Message Expiry Interval not forwarded"
    assert 0 < left <= 60

    client_id = uniq("exp-sess")
    try:
        off = clients(client_id=client_id)
        off.connect(clean_start=True, SessionExpiryInterval=300)
        off.subscribe(topic, 1)
        off.disconnect()
        pub.publish(topic, b"short-lived", qos=1, MessageExpiryInterval=1)
        pub.publish(topic, b"forever", qos=1)
        time.sleep(3)
        back = clients(client_id=client_id)
        flags, _p = back.connect(clean_start=False, SessionExpiryInterval=300)
        assert flags.session_present is True
        got = back.messages_until_quiet(1.0)
        assert [m.payload for m in got] == [b"forever"]
        assert prop(got[0].properties, "MessageExpiryInterval") is None
    finally:
        _clear_session(client_id)


# --- sessions and wills -----------------------------------------------------


def test_session_expiry(clients):
    """Session Expiry Interval 0 ends the session on disconnect; 300 keeps it
    and its queued messages; 1 lets it expire (3.1.2.11.2)."""
    topic = f"compat5/{uniq('sess')}"
    pub = clients()
    pub.connect()
    for expiry, wait, kept in [(0, 0, False), (300, 0, True), (1, 3, False)]:
        client_id = uniq(f"sess{expiry}")
        try:
            first = clients(client_id=client_id)
            kw = {"SessionExpiryInterval": expiry} if expiry else {}
            flags, _p = first.connect(clean_start=True, **kw)
            assert flags.session_present is False
            first.subscribe(topic, 1)
            first.disconnect()
            pub.publish(topic, f"while-away-{expiry}".encode(), qos=1)
            if wait:
                time.sleep(wait)
            again = clients(client_id=client_id)
            flags, _p = again.connect(clean_start=False, SessionExpiryInterval=300)
            assert flags.session_present is kept, f"session expiry {expiry}: session_present"
            if kept:
                m = again.next_message()
                assert (m.topic, m.payload, m.qos) == (topic, b"while-away-300", 1)
            again.assert_no_message()
            again.disconnect()
        finally:
            _clear_session(client_id)


def test_session_expiry_changes(clients):
    """A reconnect with another Session Expiry Interval replaces the stored
    one (3.1.2.11.2), and so does one in DISCONNECT (3.14.2.2.2)."""
    short, wait = 2, 4.5
    topic = f"compat5/{uniq('sesschg')}"
    # (interval at CONNECT, at the reconnect, in its DISCONNECT, session kept)
    for first_i, second_i, at_disconnect, kept in [
        (300, short, None, False),
        (short, 300, None, True),
        (300, 300, short, False),
        (short, short, 300, True),
    ]:
        client_id = uniq("sesschg")
        try:
            first = clients(client_id=client_id)
            first.connect(clean_start=True, SessionExpiryInterval=first_i)
            first.subscribe(topic, 1)
            first.disconnect()
            second = clients(client_id=client_id)
            flags, _p = second.connect(clean_start=False, SessionExpiryInterval=second_i)
            assert flags.session_present is True
            if at_disconnect is None:
                second.disconnect()
            else:
                second.disconnect(properties=props(PacketTypes.DISCONNECT,
                                                   SessionExpiryInterval=at_disconnect))
            time.sleep(wait)
            third = clients(client_id=client_id)
            flags, _p = third.connect(clean_start=False, SessionExpiryInterval=300)
            case = (first_i, second_i, at_disconnect)
            assert flags.session_present is kept, f"{case}: session_present after {wait} s"
            third.disconnect()
        finally:
            _clear_session(client_id)


def test_will_delay(clients):
    """The Will is published after the Will Delay Interval; not at all if the
    session is resumed in time (3.1.3.2.2); at once on DISCONNECT 0x04."""
    will_topic = f"compat5/{uniq('will')}"
    watcher = clients()
    watcher.connect()
    watcher.subscribe(f"{will_topic}/#", 1)
    will_props = props(PacketTypes.WILLMESSAGE, WillDelayInterval=2)

    # Dropped connection: the will comes after the delay.
    dying_id = uniq("will-late")
    dying = clients(client_id=dying_id, will=(f"{will_topic}/late", b"late", 1, False, will_props))
    dying.connect(SessionExpiryInterval=10)
    dying.drop()
    watcher.assert_no_message(QUIET)
    m = watcher.next_message()
    assert (m.topic, m.payload) == (f"{will_topic}/late", b"late")
    _clear_session(dying_id)

    # Reconnect within the delay: no will at all.
    back_id = uniq("will-back")
    dying = clients(client_id=back_id, will=(f"{will_topic}/back", b"back", 1, False, will_props))
    dying.connect(SessionExpiryInterval=10)
    dying.drop()
    again = clients(client_id=back_id)
    flags, _p = again.connect(clean_start=False)
    assert flags.session_present is True
    watcher.assert_no_message(3)
    again.disconnect()

    # DISCONNECT with reason 0x04: the will is sent (here without delay).
    polite = clients(will=(f"{will_topic}/rc4", b"rc4", 1, False, None))
    polite.connect()
    polite.disconnect(reasoncode=reason(PacketTypes.DISCONNECT, "Disconnect with will message"))
    m = watcher.next_message()
    assert (m.topic, m.payload) == (f"{will_topic}/rc4", b"rc4")
    watcher.assert_no_message()


# --- topic aliases ------------------------------------------------------------


def test_topic_alias(clients):
    """Client-to-server Topic Alias: set with topic + alias, used with an empty
    topic; subscribers see the full topic (3.3.2.3.4)."""
    topic = f"compat5/{uniq('alias')}"
    sub = clients()
    sub.connect()
    sub.subscribe(topic, 1)
    pub = clients()
    _flags, p = pub.connect()
    maximum = prop(p, "TopicAliasMaximum", 0)
    assert maximum > 0, f"CONNACK Topic Alias Maximum: {p}"
    pub.publish(topic, b"first", qos=1, TopicAlias=1)
    pub.publish("", b"second", qos=1, TopicAlias=1)
    got = [sub.next_message() for _ in range(2)]
    assert [(m.topic, m.payload) for m in got] == [(topic, b"first"), (topic, b"second")]
    assert all(prop(m.properties, "TopicAlias") is None for m in got)


# --- subscription options -------------------------------------------------------


def test_no_local(clients):
    """No Local: own publications are not delivered to that subscription;
    other clients still get them (3.8.3.1)."""
    topic = f"compat5/{uniq('nolocal')}"
    me = clients()
    me.connect()
    me.subscribe(topic, options=SubscribeOptions(qos=1, noLocal=True))
    other = clients()
    other.connect()
    other.subscribe(topic, 1)
    me.publish(topic, b"mine", qos=1)
    assert other.next_message().payload == b"mine"
    me.assert_no_message()
    other.publish(topic, b"theirs", qos=1)
    assert me.next_message().payload == b"theirs"


def test_retain_as_published(clients):
    """Retain As Published keeps the RETAIN flag on live deliveries; without it
    the flag is cleared (3.3.1.3, 3.8.3.1)."""
    topic = f"compat5/{uniq('rap')}"
    rap = clients()
    rap.connect()
    rap.subscribe(topic, options=SubscribeOptions(qos=1, retainAsPublished=True))
    plain = clients()
    plain.connect()
    plain.subscribe(topic, options=SubscribeOptions(qos=1, retainAsPublished=False))
    pub = clients()
    pub.connect()
    try:
        pub.publish(topic, b"kept", qos=1, retain=True)
        m = rap.next_message()
        assert (m.payload, m.retain) == (b"kept", True)
        m = plain.next_message()
        assert (m.payload, m.retain) == (b"kept", False)
        pub.publish(topic, b"not retained", qos=1)
        assert rap.next_message().retain is False
    finally:
        pub.publish(topic, b"", qos=1, retain=True)


def test_retain_handling(clients):
    """Retain Handling 0 sends retained messages on every subscribe, 1 only
    for a new subscription, 2 never (3.8.3.1)."""
    topic = f"compat5/{uniq('rh')}"
    pub = clients()
    pub.connect()
    pub.publish(topic, b"state", qos=1, retain=True)
    try:
        for rh, first, again in [(SubscribeOptions.RETAIN_SEND_ON_SUBSCRIBE, True, True),
                                 (SubscribeOptions.RETAIN_SEND_IF_NEW_SUB, True, False),
                                 (SubscribeOptions.RETAIN_DO_NOT_SEND, False, False)]:
            c = clients()
            c.connect()
            for expected in (first, again):
                c.subscribe(topic, options=SubscribeOptions(qos=1, retainHandling=rh))
                if expected:
                    m = c.next_message()
                    assert (m.payload, m.retain) == (b"state", True), f"retain handling {rh}"
                c.assert_no_message()
            c.disconnect()
    finally:
        pub.publish(topic, b"", qos=1, retain=True)


def test_retained_message_keeps_its_properties(clients):
    """A retained message reaches a later subscriber with the properties it
    was published with (3.3.1.3: the stored message is the PUBLISH)."""
    topic = f"compat5/{uniq('retprops')}"
    pub = clients()
    pub.connect()
    pub.publish(topic, b"state", qos=1, retain=True, ContentType="application/json",
                UserProperty=[("k", "v")], ResponseTopic=f"{topic}/reply")
    try:
        c = clients()
        c.connect()
        c.subscribe(topic, 1)
        m = c.next_message()
        assert (m.payload, m.retain) == (b"state", True)
        assert prop(m.properties, "ContentType") == "application/json"
        assert prop(m.properties, "ResponseTopic") == f"{topic}/reply"
        assert _user_props(m) == [("k", "v")]
    finally:
        pub.publish(topic, b"", qos=1, retain=True)


def test_retained_message_expires(clients):
    """A retained message's expiry counts from its publish: once it has
    passed, later subscribers do not get it (3.3.2.3.3)."""
    topic = f"compat5/{uniq('retexp')}"
    pub = clients()
    pub.connect()
    pub.publish(topic, b"short-lived", qos=1, retain=True, MessageExpiryInterval=1)
    try:
        time.sleep(2.5)
        c = clients()
        c.connect()
        c.subscribe(topic, 1)
        c.assert_no_message()
    finally:
        pub.publish(topic, b"", qos=1, retain=True)


def test_subscription_identifiers(clients):
    """Subscription Identifiers of every matching subscription are sent with
    the message, in one PUBLISH or in several (3.3.4)."""
    base = f"compat5/{uniq('subid')}"
    c = clients()
    c.connect()
    c.subscribe(f"{base}/#", 1, SubscriptionIdentifier=7)
    c.subscribe(f"{base}/b", 1, SubscriptionIdentifier=9)
    pub = clients()
    pub.connect()
    pub.publish(f"{base}/b", b"both", qos=1)
    got = c.messages_until_quiet()
    assert got and all((m.topic, m.payload) == (f"{base}/b", b"both") for m in got)
    seen = sorted(i for m in got for i in _sub_ids(m))
    assert seen == [7, 9], f"subscription identifiers for {base}/b: {seen}"
    pub.publish(f"{base}/c", b"one", qos=1)
    m = c.next_message()
    assert (m.topic, _sub_ids(m)) == (f"{base}/c", [7])
    c.assert_no_message()


# --- shared subscriptions -------------------------------------------------------


def test_shared_subscription(clients):
    """$share/{group}/{filter}: each message goes to exactly one member of the
    group; ordinary subscribers get every message (4.8.2)."""
    base = f"compat5/{uniq('share')}"
    group = uniq("g")
    members = [clients(), clients()]
    for m in members:
        m.connect()
        m.subscribe(f"$share/{group}/{base}/#", 1)
    normal = clients()
    normal.connect()
    normal.subscribe(f"{base}/#", 1)
    pub = clients()
    pub.connect()
    sent = [f"m{i}".encode() for i in range(10)]
    for i, p in enumerate(sent):
        pub.publish(f"{base}/{i % 3}", p, qos=1)
    assert sorted(normal.next_message().payload for _ in sent) == sorted(sent)
    shared = [msg.payload for m in members for msg in m.messages_until_quiet()]
    assert sorted(shared) == sorted(sent), "each message must reach exactly one member"
    normal.assert_no_message()


def test_shared_subscription_v311_member(clients):
    """An MQTT 3.1.1 client can join a shared subscription group (4.8.2)."""
    base = f"compat5/{uniq('share311')}"
    group = uniq("g")
    old = clients(protocol=mqtt.MQTTv311)
    old.connect()
    old.subscribe(f"$share/{group}/{base}", 1)
    new = clients()
    new.connect()
    new.subscribe(f"$share/{group}/{base}", 1)
    sent = [f"m{i}".encode() for i in range(6)]
    for p in sent:
        new.publish(base, p, qos=1)
    got = old.messages_until_quiet() + new.messages_until_quiet()
    assert sorted(m.payload for m in got) == sorted(sent)
    # Alone in its group, the 3.1.1 member gets everything.
    new.unsubscribe([f"$share/{group}/{base}"])
    for p in sent:
        new.publish(base, p, qos=1)
    assert [old.next_message().payload for _ in sent] == sent
    old.assert_no_message()


def test_shared_subscription_in_a_stored_session(clients):
    """A shared subscription is part of the session (4.8.2): a resumed
    session is still a member of the group, and a clean start is not."""
    topic = f"compat5/{uniq('sharedsess')}"
    group = uniq("g")
    client_id = uniq("sharedsess")
    try:
        first = clients(client_id=client_id)
        first.connect(clean_start=True, SessionExpiryInterval=300)
        first.subscribe(f"$share/{group}/{topic}", 1)
        first.disconnect()
        again = clients(client_id=client_id)
        flags, _p = again.connect(clean_start=False, SessionExpiryInterval=300)
        assert flags.session_present is True
        pub = clients()
        pub.connect()
        pub.publish(topic, b"to the group", qos=1)
        m = again.next_message()
        assert (m.topic, m.payload) == (topic, b"to the group")
        again.disconnect()
        fresh = clients(client_id=client_id)
        fresh.connect(clean_start=True, SessionExpiryInterval=300)
        pub.publish(topic, b"nobody in the group", qos=1)
        fresh.assert_no_message()
    finally:
        _clear_session(client_id)


@lavinmq_only("redelivery to another member is a SHOULD in 4.8.2")
def test_shared_subscription_redelivery(clients):
    """An unacknowledged QoS 1 message of a member whose session ended goes to
    another member of the group (4.8.2)."""
    topic = f"compat5/{uniq('sharedrop')}"
    group = uniq("g")
    a = clients(manual_ack=True)
    a.connect()
    a.subscribe(f"$share/{group}/{topic}", 1)
    b = clients()
    b.connect()
    b.subscribe(f"$share/{group}/{topic}", 1)
    pub = clients()
    pub.connect()
    held = None
    for i in range(20):
        pub.publish(topic, f"m{i}".encode(), qos=1)
        try:
            held = a.messages.get(timeout=0.2).payload
            break
        except queue.Empty:
            continue
    assert held is not None, "member A never got a message"
    a.drop()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            if b.messages.get(timeout=0.1).payload == held:
                return
        except queue.Empty:
            pass
    pytest.fail(f"{held!r}, unacknowledged by the dropped member, never reached the other member")


def test_unsubscribe(clients):
    """UNSUBACK: Success for an existing subscription, 0x11 No Subscription
    Existed for an unknown filter (3.11.3)."""
    topic = f"compat5/{uniq('unsub')}"
    c = clients()
    c.connect()
    c.subscribe(topic, 1)
    rcs = c.unsubscribe([topic, f"{topic}/never"])
    assert [rc.value for rc in rcs] == [0x00, 0x11], rcs
    pub = clients()
    pub.connect()
    pub.publish(topic, b"after unsubscribe", qos=1)
    c.assert_no_message()


# --- flow control -----------------------------------------------------------------


def test_receive_maximum(clients):
    """The server sends at most Receive Maximum unacknowledged QoS 1/2
    PUBLISH packets to the client (3.3.4, 4.9)."""
    topic = f"compat5/{uniq('recvmax')}"
    c = clients(manual_ack=True)
    c.connect(ReceiveMaximum=2)
    c.subscribe(topic, 1)
    pub = clients()
    pub.connect()
    sent = [f"m{i}".encode() for i in range(5)]
    for p in sent:
        pub.publish(topic, p, qos=1)
    first = [c.next_message(), c.next_message()]
    c.assert_no_message()
    got = list(first)
    for m in first:
        c.c.ack(m.mid, m.qos)
    while len(got) < len(sent):
        m = c.next_message()
        got.append(m)
        c.c.ack(m.mid, m.qos)
    assert [m.payload for m in got] == sent
    c.assert_no_message()


def test_maximum_packet_size(clients):
    """A message larger than the client's Maximum Packet Size is discarded
    for that client; later small ones still arrive (3.1.2.11.4)."""
    topic = f"compat5/{uniq('maxpkt')}"
    c = clients()
    c.connect(MaximumPacketSize=200)
    c.subscribe(topic, 1)
    pub = clients()
    pub.connect()
    pub.publish(topic, b"x" * 1000, qos=1)
    pub.publish(topic, b"small", qos=1)
    assert c.next_message().payload == b"small"
    c.assert_no_message()
    assert c.c.is_connected()


# --- AMQP interop -----------------------------------------------------------------


@lavinmq_only("MQTT 5 <-> AMQP property mapping")
def test_request_response_mqtt_to_amqp(clients):
    """MQTT 5 Response Topic / Correlation Data / Content Type / User
    Properties become AMQP reply_to / correlation_id / content_type / headers."""
    base = uniq("req")
    conn = amqp_connect()
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", routing_key=f"{base}.x")
        pub = clients()
        pub.connect()
        pub.publish(f"{base}/x", b"ping", qos=1, ResponseTopic=f"resp/{base}",
                    CorrelationData=b"c-1", ContentType="text/plain", UserProperty=[("k", "v")])
        got = drain(ch, q, 1, timeout=TIMEOUT)
        assert len(got) == 1, "MQTT publish did not reach the AMQP queue"
        method, p, body = got[0]
        assert (method.routing_key, body) == (f"{base}.x", b"ping")
        assert p.reply_to == f"resp.{base}"
        assert p.correlation_id == "c-1"
        assert p.content_type == "text/plain"
        headers = p.headers or {}
        assert headers.get("k") in ("v", b"v"), headers
    finally:
        conn.close()


@lavinmq_only("MQTT 5 <-> AMQP property mapping")
def test_request_response_amqp_to_mqtt(clients):
    """AMQP reply_to / correlation_id / headers / content_type / expiration
    become MQTT 5 Response Topic / Correlation Data / User Properties /
    Content Type / Message Expiry Interval."""
    base = uniq("resp")
    sub = clients()
    sub.connect()
    sub.subscribe(f"{base}/x", 1)
    conn = amqp_connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", f"{base}.x", b"{}", pika.BasicProperties(
            reply_to="req.y", correlation_id="c-2", headers={"h": "w"},
            content_type="application/json", expiration="60000"))
    finally:
        conn.close()
    m = sub.next_message()
    assert (m.topic, m.payload) == (f"{base}/x", b"{}")
    assert prop(m.properties, "ResponseTopic") == "req/y"
    assert prop(m.properties, "CorrelationData") == b"c-2"
    assert ("h", "w") in _user_props(m), _user_props(m)
    assert prop(m.properties, "ContentType") == "application/json"
    left = prop(m.properties, "MessageExpiryInterval")
    assert left is not None and 0 < left <= 60, left


# --- raw protocol -------------------------------------------------------------------


def _utf8(s):
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def _packet(first_byte, body):
    """Fixed header (remaining length as a variable byte integer) + body."""
    out, n = bytearray([first_byte]), len(body)
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out) + body


def _raw_connect():
    """A TCP socket after a hand-written MQTT 5 CONNECT; returns (socket,
    CONNACK properties as raw bytes)."""
    s = socket.create_connection((MQTT_HOST, MQTT_PORT), timeout=TIMEOUT)
    # Protocol name, level 5, flags: username + password + clean start,
    # keep alive 30, property length 0; payload: client id, username, password.
    var = _utf8("MQTT") + bytes([5, 0xC2]) + struct.pack("!H", 30) + b"\x00"
    s.sendall(_packet(0x10, var + _utf8(uniq("raw5")) + _utf8(USERNAME) + _utf8(PASSWORD)))
    head = s.recv(2)
    assert len(head) == 2 and head[0] == 0x20, f"expected CONNACK, got {head!r}"
    rest = b""
    while len(rest) < head[1]:
        chunk = s.recv(head[1] - len(rest))
        assert chunk, "connection closed during CONNACK"
        rest += chunk
    assert rest[1] == 0x00, f"CONNACK reason {rest[1]:#x}"
    return s, rest[2:]


def _expect_disconnect(s, reasons):
    """The server closes the socket, optionally after a DISCONNECT whose
    reason code is one of `reasons`."""
    received = b""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1024)
        except ConnectionResetError:
            break
        except socket.timeout:
            continue
        if not chunk:
            break
        received += chunk
    else:
        pytest.fail(f"connection still open after {TIMEOUT} s")
    if received:
        assert received[0] == 0xE0, f"expected DISCONNECT, got {received!r}"
        # A DISCONNECT with remaining length 0 means reason 0x00: not an error.
        assert len(received) >= 3, f"DISCONNECT without a reason code: {received!r}"
        assert received[2] in reasons, f"DISCONNECT reason {received[2]:#x}, wanted one of {reasons}"


@pytest.mark.parametrize("kind", ["property-length-overflow", "unknown-property"])
def test_malformed_packet(kind):
    """A malformed PUBLISH: DISCONNECT 0x81 Malformed Packet (or 0x82) and
    close, or just close (4.13)."""
    s, _ = _raw_connect()
    try:
        topic = _utf8("compat5/malformed")
        if kind == "property-length-overflow":
            body = topic + bytes([20]) + b"\x01"  # says 20 property bytes, has 1
        else:
            body = topic + bytes([2, 0x7F, 0x00]) + b"x"  # property id 0x7F does not exist
        s.sendall(_packet(0x30, body))
        _expect_disconnect(s, (0x81, 0x82))
    finally:
        s.close()


def test_enhanced_auth_unknown_method(clients):
    """An unsupported Authentication Method: CONNACK 0x8C Bad Authentication
    Method (3.1.2.11.9, 4.12)."""
    c = clients()
    flags, rc, _p = c.try_connect(properties=props(PacketTypes.CONNECT,
                                                   AuthenticationMethod="SCRAM-SHA-1"))
    assert rc.value == 0x8C, f"expected 0x8C Bad authentication method, got {rc}"
    assert flags.session_present is False
    c.wait_disconnected()


def _connack_topic_alias_maximum(raw_props):
    """Topic Alias Maximum (property 0x22) from raw CONNACK properties."""
    p = Properties(PacketTypes.CONNACK)
    p.unpack(raw_props)
    return prop(p, "TopicAliasMaximum", 0)


@pytest.mark.parametrize("alias", ["zero", "above-maximum"])
def test_topic_alias_invalid(alias):
    """Topic Alias 0 or above the Topic Alias Maximum: DISCONNECT 0x94 Topic
    Alias Invalid (0x81/0x82 tolerated) and close, or just close (3.3.2.3.4).
    Raw socket: paho does not decode a DISCONNECT reason without properties."""
    s, raw_props = _raw_connect()
    try:
        maximum = _connack_topic_alias_maximum(raw_props)
        value = 0 if alias == "zero" else maximum + 1
        body = _utf8(f"compat5/{uniq('badalias')}") + bytes([3, 0x23]) + struct.pack("!H", value) + b"x"
        s.sendall(_packet(0x30, body))
        _expect_disconnect(s, (0x94, 0x81, 0x82))
    finally:
        s.close()


@pytest.mark.parametrize("topic_filter", [
    "$share/g+/x",
    pytest.param("$share/g1", marks=lavinmq_only("mosquitto 2.0.11 grants it, against MQTT-4.8.2-2")),
    pytest.param("$share//x", marks=lavinmq_only("mosquitto 2.0.11 grants it, against MQTT-4.8.2-1")),
])
def test_invalid_shared_filter(topic_filter):
    """An invalid shared subscription filter (ShareName empty or with a
    wildcard, no Topic Filter): SUBACK 0x8F Topic Filter Invalid, or
    DISCONNECT (0x81/0x82/0x8F) and close (4.8.2). Raw socket: paho refuses
    some of these filters itself."""
    s, _ = _raw_connect()
    try:
        # Packet id 1, property length 0, the filter, options QoS 1.
        s.sendall(_packet(0x82, b"\x00\x01\x00" + _utf8(topic_filter) + b"\x01"))
        try:
            head = s.recv(2)
        except ConnectionResetError:
            return
        if not head:
            return  # closed without DISCONNECT
        if head[0] == 0x90:
            body = b""
            while len(body) < head[1]:
                chunk = s.recv(head[1] - len(body))
                assert chunk, "connection closed during SUBACK"
                body += chunk
            # packet id (2), property length (0 here), one reason code
            assert body[:2] == b"\x00\x01"
            assert body[-1] in (0x8F, 0x80, 0x9E), f"SUBACK reason {body[-1]:#x} for {topic_filter!r}"
        else:
            assert head[0] == 0xE0, f"expected SUBACK or DISCONNECT, got {head!r}"
            rest = s.recv(head[1]) if head[1] else b""
            assert rest and rest[0] in (0x81, 0x82, 0x8F), f"DISCONNECT {head + rest!r}"
            _expect_disconnect_close(s)
    finally:
        s.close()


def _expect_disconnect_close(s):
    """After a DISCONNECT the server closes the socket."""
    s.settimeout(TIMEOUT)
    try:
        assert s.recv(1) == b"", "data after DISCONNECT"
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"connection still open {TIMEOUT} s after DISCONNECT")
