"""Topic permissions as RabbitMQ has them (`set_topic_permissions`): per user,
vhost and topic exchange, a write regex for the routing keys published with
and a read regex for the keys bound with. Set through the management API,
enforced on pika publishes and binds and on paho-mqtt publishes and
subscriptions (MQTT topics in their AMQP form, `a/b` as `a.b`).

Needs MGMT_URL (an administrator) and MQTT_URL; skipped without MGMT_URL.
Every test makes its own user and removes it afterwards.
"""
import queue

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest

from conftest import channel_error, connect, uniq
from test_http_api import MGMT_URL, api, enc, get_json
from test_mqtt import TIMEOUT, Client

pytestmark = pytest.mark.skipif(not MGMT_URL, reason="MGMT_URL not set")

ALL = {"configure": ".*", "write": ".*", "read": ".*"}


@pytest.fixture
def user():
    """A user with full permissions on vhost / and no topic permissions."""
    name, password = uniq("tp-user"), uniq("pw")
    r = api("PUT", f"/api/users/{enc(name)}", json={"password": password, "tags": ""})
    assert r.status_code == 201, r.text
    r = api("PUT", f"/api/permissions/%2F/{enc(name)}", json=ALL)
    assert r.status_code in (201, 204), r.text
    yield name, password
    api("DELETE", f"/api/users/{enc(name)}")


def set_topic(name, exchange, write, read):
    r = api("PUT", f"/api/topic-permissions/%2F/{enc(name)}",
            json={"exchange": exchange, "write": write, "read": read})
    assert r.status_code in (201, 204), r.text
    return r.status_code


def test_api_shapes(user):
    name, _ = user
    path = f"/api/topic-permissions/%2F/{enc(name)}"
    assert api("GET", path).status_code == 404
    assert set_topic(name, "amq.topic", "^a", "^b") == 201
    assert set_topic(name, "amq.topic", "^a\\.", "^b") == 204
    # Another exchange: the user's topic permissions in the vhost are updated.
    assert set_topic(name, "logs", ".*", ".*") == 204
    r = api("DELETE", path)
    assert r.status_code == 204, r.text
    set_topic(name, "amq.topic", "^a\\.", "^b")
    assert get_json(path) == [
        {"user": name, "vhost": "/", "exchange": "amq.topic", "write": "^a\\.", "read": "^b"},
    ]
    assert get_json(f"/api/users/{enc(name)}/topic-permissions") == get_json(path)
    assert any(p["user"] == name for p in get_json("/api/vhosts/%2F/topic-permissions"))
    assert any(p["user"] == name for p in get_json("/api/topic-permissions"))
    r = api("PUT", path, json={"exchange": "amq.topic", "write": "(", "read": ".*"})
    assert r.status_code == 400, r.text
    assert api("DELETE", path).status_code == 204
    assert api("GET", path).status_code == 404


def test_pika_publish_is_checked_against_the_routing_key(user):
    name, password = user
    set_topic(name, "amq.topic", "^{username}\\.", ".*")
    with connect(user=name, password=password) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", f"{name}.reading", b"ok")
        # A direct exchange is never restricted by topic permissions.
        ch.basic_publish("amq.direct", "other.reading", b"ok")
        with channel_error(403, "ACCESS_REFUSED") as ei:
            ch.basic_publish("amq.topic", "other.reading", b"no")
        assert ei.value.reply_text == (
            "ACCESS_REFUSED - access to topic 'other.reading' in exchange 'amq.topic' "
            f"in vhost '/' refused for user '{name}'"
        )


def test_pika_bind_is_checked_against_the_binding_key(user):
    name, password = user
    set_topic(name, "amq.topic", ".*", "^public\\.")
    with connect(user=name, password=password) as conn:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", "public.#")
        with channel_error(403, "ACCESS_REFUSED") as ei:
            ch.queue_bind(q, "amq.topic", "secret.#")
        assert "access to topic 'secret.#' in exchange 'amq.topic'" in ei.value.reply_text


def wait_disconnected(client):
    try:
        client.disconnects.get(timeout=TIMEOUT)
    except queue.Empty:
        pytest.fail(f"{client.client_id}: still connected after a refused publish")


def refused_subscription(client, topic):
    """Subscribes to `topic`, which must be refused: a SUBACK with the failure
    code 0x80 (MQTT 3.1.1, RabbitMQ 3.12+ and this broker), or the
    connection closed (older RabbitMQ). Returns True when still connected."""
    result, mid = client.c.subscribe(topic, 1)
    assert result == mqtt.MQTT_ERR_SUCCESS
    try:
        got_mid, rcs = client.subacks.get(timeout=TIMEOUT)
    except queue.Empty:
        assert not client.c.is_connected(), f"no SUBACK for {topic} and still connected"
        return False
    assert got_mid == mid and rcs[0].is_failure, rcs
    return True


def test_paho_subscribe_and_publish_are_checked(user):
    name, password = user
    set_topic(name, "amq.topic", "^sensors\\.{client_id}\\.", "^sensors\\.{client_id}\\.")
    device = uniq("dev")
    c = Client(client_id=device, username=name, password=password)
    try:
        c.connect()
        c.subscribe(f"sensors/{device}/#", qos=1)
        c.publish(f"sensors/{device}/t", b"21.5", qos=1)
        msg = c.next_message()
        assert (msg.topic, msg.payload) == (f"sensors/{device}/t", b"21.5")
        if not refused_subscription(c, "sensors/#"):
            c.disconnect()
            c = Client(client_id=device, username=name, password=password)
            c.connect()
        # MQTT 3.1.1 has no negative PUBACK: the broker closes the connection.
        c.c.publish("sensors/someone-else/t", b"x", qos=1)
        wait_disconnected(c)
    finally:
        c.disconnect()
