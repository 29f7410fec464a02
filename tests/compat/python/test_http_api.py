"""The RabbitMQ-compatible management HTTP API, used the way an operator's
script uses RabbitMQ 3.10's: status codes, JSON shapes and the effect of each
call as seen by AMQP clients (pika).

Needs MGMT_URL=http://user:pass@host:port (run.sh sets it for the broker it
starts; the user must be an administrator); skipped without it. Every test
works in its own uniquely named vhost/user/queue and removes it afterwards.
Against a reference RabbitMQ, enable rabbitmq_management and
rabbitmq_federation (test_vhost_parameters_crud uses federation-upstream).
"""
import base64
import hashlib
import os
import time
from urllib.parse import quote, unquote, urlsplit

import pika
import pika.exceptions
import pytest
import requests

from conftest import AMQP_URL, channel_error, connect, params, uniq

MGMT_URL = os.environ.get("MGMT_URL")
pytestmark = pytest.mark.skipif(not MGMT_URL, reason="MGMT_URL not set")

TIMEOUT = 5
# RabbitMQ refreshes queue/channel statistics every collect_statistics_interval
# (5 s by default): anything read from stats is polled up to this deadline.
STATS_DEADLINE = 15

if MGMT_URL:
    _parts = urlsplit(MGMT_URL)
    BASE = f"{_parts.scheme}://{_parts.hostname}:{_parts.port or 15672}"
    ADMIN = (_parts.username or "guest", _parts.password or "guest")
else:  # pragma: no cover - module is skipped
    BASE, ADMIN = "", ("guest", "guest")
AMQP_USER = urlsplit(AMQP_URL).username or "guest"


def enc(name):
    """A name as one URL path segment ('/' becomes %2F)."""
    return quote(name, safe="")


def api(method, path, auth=ADMIN, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return requests.request(method, BASE + path, auth=auth, **kw)


def get_json(path, **kw):
    r = api("GET", path, **kw)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def wait_for(fn, timeout=STATS_DEADLINE, interval=0.1):
    """Poll fn() until it returns something truthy; returns that (or the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def assert_error_body(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert isinstance(body, dict) and "error" in body and "reason" in body, body
    return body


def rabbit_sha256_hash(password, salt=b"\x90\x8b\x17\x02"):
    """RabbitMQ's rabbit_password_hashing_sha256: base64(salt ++ sha256(salt ++ password))."""
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def vhost():
    """A fresh vhost the AMQP (and admin) user has full permissions on."""
    name = uniq("http-vh")
    r = api("PUT", f"/api/vhosts/{enc(name)}")
    assert r.status_code == 201, r.text
    perms = {"configure": ".*", "write": ".*", "read": ".*"}
    for user in {ADMIN[0], AMQP_USER}:
        r = api("PUT", f"/api/permissions/{enc(name)}/{enc(user)}", json=perms)
        assert r.status_code in (201, 204), r.text
    yield name
    api("DELETE", f"/api/vhosts/{enc(name)}")


@pytest.fixture
def users():
    """users(tags="management", password=...) creates a fresh user, deleted at teardown."""
    made = []

    def make(tags="management", password=None):
        name = uniq("http-user")
        password = password or uniq("pw")
        r = api("PUT", f"/api/users/{enc(name)}", json={"password": password, "tags": tags})
        assert r.status_code == 201, r.text
        made.append(name)
        return name, password

    yield make
    for name in made:
        api("DELETE", f"/api/users/{enc(name)}")


@pytest.fixture
def amqp():
    """amqp(vhost, connection_name=None) opens a pika connection, closed at teardown."""
    conns = []

    def open_(vhost, connection_name=None):
        p = params(vhost=enc(vhost))
        if connection_name:
            p.client_properties = {"connection_name": connection_name}
        c = pika.BlockingConnection(p)
        conns.append(c)
        return c

    yield open_
    for c in conns:
        if c.is_open:
            try:
                c.close()
            except Exception:
                pass


def put_queue(vhost, name, **body):
    r = api("PUT", f"/api/queues/{enc(vhost)}/{enc(name)}", json=body or {"durable": False})
    assert r.status_code == 201, r.text


def message_count(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


# ---------------------------------------------------------------- overview


def test_overview_has_rabbitmq_keys():
    body = get_json("/api/overview")
    missing = [k for k in ("object_totals", "queue_totals", "message_stats", "node", "rabbitmq_version",
                           "management_version", "exchange_types", "listeners") if k not in body]
    assert missing == [], sorted(body)
    totals = body["object_totals"]
    for key in ("connections", "channels", "exchanges", "queues", "consumers"):
        assert isinstance(totals[key], int), (key, totals)
    assert isinstance(body["node"], str) and body["node"]
    assert isinstance(body["rabbitmq_version"], str) and body["rabbitmq_version"]
    assert {"direct", "fanout", "topic", "headers"} <= {t["name"] for t in body["exchange_types"]}
    assert any(listener["protocol"] == "amqp" for listener in body["listeners"])


def test_whoami_names_the_user_and_its_tags():
    body = get_json("/api/whoami")
    assert body["name"] == ADMIN[0]
    assert "administrator" in body["tags"]


def test_aliveness_test(vhost):
    assert get_json("/api/aliveness-test/%2F") == {"status": "ok"}
    assert get_json(f"/api/aliveness-test/{enc(vhost)}") == {"status": "ok"}
    r = api("GET", f"/api/aliveness-test/{enc(uniq('no-such-vhost'))}")
    assert r.status_code == 404


# ---------------------------------------------------------------- vhosts


def test_vhost_create_get_delete():
    name = uniq("http-vh")
    try:
        r = api("PUT", f"/api/vhosts/{enc(name)}")
        assert r.status_code == 201, r.text
        body = get_json(f"/api/vhosts/{enc(name)}")
        assert body["name"] == name
        assert body["tracing"] is False
        assert name in [v["name"] for v in get_json("/api/vhosts")]
        r = api("PUT", f"/api/vhosts/{enc(name)}")
        assert r.status_code == 204, r.text
        r = api("DELETE", f"/api/vhosts/{enc(name)}")
        assert r.status_code == 204, r.text
        assert api("GET", f"/api/vhosts/{enc(name)}").status_code == 404
        assert api("DELETE", f"/api/vhosts/{enc(name)}").status_code == 404
    finally:
        api("DELETE", f"/api/vhosts/{enc(name)}")


def test_vhost_description_and_tags():
    name = uniq("http-vh")
    try:
        r = api("PUT", f"/api/vhosts/{enc(name)}", json={"description": "orders", "tags": "prod,eu"})
        assert r.status_code == 201, r.text
        body = get_json(f"/api/vhosts/{enc(name)}")
        assert body["description"] == "orders"
        assert sorted(body["tags"]) == ["eu", "prod"]
        r = api("PUT", f"/api/vhosts/{enc(name)}", json={"description": "orders v2", "tags": "staging"})
        assert r.status_code == 204, r.text
        body = get_json(f"/api/vhosts/{enc(name)}")
        assert body["description"] == "orders v2"
        assert body["tags"] == ["staging"]
    finally:
        api("DELETE", f"/api/vhosts/{enc(name)}")


def test_missing_vhost_is_404_with_error_body():
    assert_error_body(api("GET", f"/api/vhosts/{enc(uniq('no-such-vhost'))}"), 404)


def test_deleting_a_vhost_closes_its_connections(vhost, amqp):
    conn = amqp(vhost)
    assert api("DELETE", f"/api/vhosts/{enc(vhost)}").status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosed):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)


# ---------------------------------------------------------------- users


def test_user_create_get_update_delete():
    name = uniq("http-user")
    try:
        r = api("PUT", f"/api/users/{enc(name)}", json={"password": "s3cret", "tags": "management"})
        assert r.status_code == 201, r.text
        body = get_json(f"/api/users/{enc(name)}")
        assert body["name"] == name
        assert body["tags"] == ["management"]
        assert body["hashing_algorithm"] == "rabbit_password_hashing_sha256"
        assert body["password_hash"]
        assert "password" not in body
        assert name in [u["name"] for u in get_json("/api/users")]
        assert get_json("/api/whoami", auth=(name, "s3cret"))["name"] == name
        # A PUT on an existing user is an update: 204, and the new password replaces the old.
        r = api("PUT", f"/api/users/{enc(name)}", json={"password": "changed", "tags": "management"})
        assert r.status_code == 204, r.text
        assert api("GET", "/api/whoami", auth=(name, "s3cret")).status_code == 401
        assert api("GET", "/api/whoami", auth=(name, "changed")).status_code == 200
        assert api("DELETE", f"/api/users/{enc(name)}").status_code == 204
        assert api("GET", f"/api/users/{enc(name)}").status_code == 404
        assert api("DELETE", f"/api/users/{enc(name)}").status_code == 404
    finally:
        api("DELETE", f"/api/users/{enc(name)}")


def test_user_tags_as_comma_string_and_as_list():
    a, b = uniq("http-user"), uniq("http-user")
    try:
        r = api("PUT", f"/api/users/{enc(a)}", json={"password": "p", "tags": "management,policymaker"})
        assert r.status_code == 201, r.text
        assert sorted(get_json(f"/api/users/{enc(a)}")["tags"]) == ["management", "policymaker"]
        r = api("PUT", f"/api/users/{enc(b)}", json={"password": "p", "tags": ["monitoring", "management"]})
        assert r.status_code == 201, r.text
        assert sorted(get_json(f"/api/users/{enc(b)}")["tags"]) == ["management", "monitoring"]
        r = api("PUT", f"/api/users/{enc(b)}", json={"password": "p", "tags": ""})
        assert r.status_code == 204, r.text
        assert get_json(f"/api/users/{enc(b)}")["tags"] == []
    finally:
        api("DELETE", f"/api/users/{enc(a)}")
        api("DELETE", f"/api/users/{enc(b)}")


def test_user_with_password_hash(vhost):
    name = uniq("http-user")
    password_hash = rabbit_sha256_hash("hashed-pw")
    try:
        r = api("PUT", f"/api/users/{enc(name)}",
                json={"password_hash": password_hash,
                      "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "management"})
        assert r.status_code == 201, r.text
        body = get_json(f"/api/users/{enc(name)}")
        assert body["password_hash"] == password_hash
        assert body["hashing_algorithm"] == "rabbit_password_hashing_sha256"
        assert get_json("/api/whoami", auth=(name, "hashed-pw"))["name"] == name
        assert api("GET", "/api/whoami", auth=(name, "wrong")).status_code == 401
        # The same credentials work over AMQP.
        r = api("PUT", f"/api/permissions/{enc(vhost)}/{enc(name)}",
                json={"configure": ".*", "write": ".*", "read": ".*"})
        assert r.status_code == 201, r.text
        c = connect(user=name, password="hashed-pw", vhost=enc(vhost))
        c.close()
    finally:
        api("DELETE", f"/api/users/{enc(name)}")


# ---------------------------------------------------------------- permissions


def test_permissions_crud(vhost, users):
    user, _ = users()
    path = f"/api/permissions/{enc(vhost)}/{enc(user)}"
    assert api("GET", path).status_code == 404
    r = api("PUT", path, json={"configure": "^c-", "write": "^w-", "read": "^r-"})
    assert r.status_code == 201, r.text
    assert get_json(path) == {"user": user, "vhost": vhost,
                              "configure": "^c-", "write": "^w-", "read": "^r-"}
    r = api("PUT", path, json={"configure": ".*", "write": ".*", "read": ".*"})
    assert r.status_code == 204, r.text
    assert get_json(path)["configure"] == ".*"
    assert [p["vhost"] for p in get_json(f"/api/users/{enc(user)}/permissions")] == [vhost]
    assert user in [p["user"] for p in get_json(f"/api/vhosts/{enc(vhost)}/permissions")]
    assert any(p["user"] == user and p["vhost"] == vhost for p in get_json("/api/permissions"))
    assert api("DELETE", path).status_code == 204
    assert api("GET", path).status_code == 404
    assert get_json(f"/api/users/{enc(user)}/permissions") == []


def test_permissions_apply_to_amqp(vhost, users):
    user, password = users()
    r = api("PUT", f"/api/permissions/{enc(vhost)}/{enc(user)}",
            json={"configure": "^mine-", "write": ".*", "read": ".*"})
    assert r.status_code == 201, r.text
    c = connect(user=user, password=password, vhost=enc(vhost))
    try:
        ch = c.channel()
        ch.queue_declare("mine-1")
        with channel_error(403, "ACCESS_REFUSED"):
            ch.queue_declare("theirs-1")
    finally:
        if c.is_open:
            c.close()


# ---------------------------------------------------------------- queues


def test_queue_create_get_delete(vhost):
    path = f"/api/queues/{enc(vhost)}/{enc('orders')}"
    body = {"durable": True, "auto_delete": False, "arguments": {"x-max-length": 10}}
    r = api("PUT", path, json=body)
    assert r.status_code == 201, r.text
    q = get_json(path)
    assert q["name"] == "orders"
    assert q["vhost"] == vhost
    assert q["durable"] is True
    assert q["auto_delete"] is False
    assert q["exclusive"] is False
    assert q["arguments"] == {"x-max-length": 10}
    assert "orders" in [x["name"] for x in get_json(f"/api/queues/{enc(vhost)}")]
    assert any(x["name"] == "orders" and x["vhost"] == vhost for x in get_json("/api/queues"))
    # Re-declaring with identical properties is fine.
    r = api("PUT", path, json=body)
    assert r.status_code == 204, r.text
    assert api("DELETE", path).status_code == 204
    assert api("GET", path).status_code == 404


def test_queue_made_over_http_is_usable_over_amqp(vhost, amqp):
    put_queue(vhost, "work", durable=True, arguments={"x-max-length": 1})
    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    ch.basic_publish("", "work", b"a")
    ch.basic_publish("", "work", b"b")
    assert message_count(ch, "work") == 1
    assert ch.basic_get("work", auto_ack=True)[2] == b"b"


def test_queue_with_invalid_argument_is_400(vhost):
    r = api("PUT", f"/api/queues/{enc(vhost)}/bad", json={"arguments": {"x-max-length": "ten"}})
    assert_error_body(r, 400)
    assert api("GET", f"/api/queues/{enc(vhost)}/bad").status_code == 404


def test_queue_redeclared_with_other_arguments_is_400(vhost):
    put_queue(vhost, "q1", durable=True, arguments={"x-max-length": 10})
    r = api("PUT", f"/api/queues/{enc(vhost)}/q1", json={"durable": True, "arguments": {"x-max-length": 20}})
    assert_error_body(r, 400)
    assert get_json(f"/api/queues/{enc(vhost)}/q1")["arguments"] == {"x-max-length": 10}


def test_missing_queue_is_404(vhost):
    assert_error_body(api("GET", f"/api/queues/{enc(vhost)}/nope"), 404)
    assert api("DELETE", f"/api/queues/{enc(vhost)}/nope").status_code == 404
    assert api("GET", f"/api/queues/{enc(uniq('no-such-vhost'))}/nope").status_code == 404
    assert api("GET", f"/api/queues/{enc(uniq('no-such-vhost'))}").status_code == 404


def test_purge_queue_via_delete_contents(vhost, amqp):
    put_queue(vhost, "purge-me")
    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "purge-me", f"m{i}".encode())
    r = api("DELETE", f"/api/queues/{enc(vhost)}/purge-me/contents")
    assert r.status_code == 204, r.text
    assert message_count(ch, "purge-me") == 0
    assert api("DELETE", f"/api/queues/{enc(vhost)}/nope/contents").status_code == 404


def test_delete_queue_if_empty(vhost, amqp):
    put_queue(vhost, "full")
    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    ch.basic_publish("", "full", b"x")
    r = api("DELETE", f"/api/queues/{enc(vhost)}/full", params={"if-empty": "true"})
    assert_error_body(r, 400)
    assert message_count(ch, "full") == 1
    assert api("DELETE", f"/api/queues/{enc(vhost)}/full").status_code == 204


# ---------------------------------------------------------------- exchanges


def test_exchange_create_get_delete(vhost):
    path = f"/api/exchanges/{enc(vhost)}/events"
    body = {"type": "topic", "durable": True, "auto_delete": False, "internal": False,
            "arguments": {"alternate-exchange": "unrouted"}}
    r = api("PUT", path, json=body)
    assert r.status_code == 201, r.text
    e = get_json(path)
    assert e["name"] == "events"
    assert e["vhost"] == vhost
    assert e["type"] == "topic"
    assert e["durable"] is True
    assert e["auto_delete"] is False
    assert e["internal"] is False
    assert e["arguments"] == {"alternate-exchange": "unrouted"}
    assert api("PUT", path, json=body).status_code == 204
    assert api("DELETE", path).status_code == 204
    assert_error_body(api("GET", path), 404)
    assert api("DELETE", path).status_code == 404


def test_exchange_list_has_the_default_exchanges(vhost):
    names = {e["name"]: e for e in get_json(f"/api/exchanges/{enc(vhost)}")}
    # The default exchange is listed with the empty name.
    assert names[""]["type"] == "direct"
    for name, kind in (("amq.direct", "direct"), ("amq.fanout", "fanout"),
                       ("amq.topic", "topic"), ("amq.headers", "headers")):
        assert names[name]["type"] == kind


def test_exchange_with_unknown_type_is_400(vhost):
    r = api("PUT", f"/api/exchanges/{enc(vhost)}/weird", json={"type": "no-such-type"})
    assert_error_body(r, 400)
    assert api("GET", f"/api/exchanges/{enc(vhost)}/weird").status_code == 404


def test_exchange_redeclared_with_other_type_is_400(vhost):
    path = f"/api/exchanges/{enc(vhost)}/ex1"
    assert api("PUT", path, json={"type": "direct"}).status_code == 201
    assert_error_body(api("PUT", path, json={"type": "fanout"}), 400)
    assert get_json(path)["type"] == "direct"


# ---------------------------------------------------------------- bindings


def props_key_from(r):
    """The properties key of a new binding, from the Location header of the 201.

    The header's last path segment is the key URL-encoded (RabbitMQ's
    properties_key "a.%2A" arrives as "a.%252A"); it is decoded here and
    encoded again with enc() wherever it goes into a URL."""
    assert r.status_code == 201, r.text
    location = r.headers.get("Location")
    assert location, r.headers
    return unquote(location.rstrip("/").rsplit("/", 1)[-1])


def test_binding_exchange_to_queue(vhost, amqp):
    v = enc(vhost)
    assert api("PUT", f"/api/exchanges/{v}/ex", json={"type": "direct"}).status_code == 201
    put_queue(vhost, "bq")
    r = api("POST", f"/api/bindings/{v}/e/ex/q/bq", json={"routing_key": "rk", "arguments": {}})
    props = props_key_from(r)
    assert props == "rk"
    listed = get_json(f"/api/bindings/{v}/e/ex/q/bq")
    assert len(listed) == 1
    b = listed[0]
    assert (b["source"], b["destination"], b["destination_type"], b["routing_key"], b["vhost"]) == \
        ("ex", "bq", "queue", "rk", vhost)
    assert b["arguments"] == {}
    assert b["properties_key"] == props
    assert get_json(f"/api/bindings/{v}/e/ex/q/bq/{enc(props)}")["routing_key"] == "rk"
    assert any(x["source"] == "ex" for x in get_json(f"/api/queues/{v}/bq/bindings"))
    assert any(x["destination"] == "bq" for x in get_json(f"/api/exchanges/{v}/ex/bindings/source"))
    assert any(x["source"] == "ex" and x["destination"] == "bq" for x in get_json(f"/api/bindings/{v}"))

    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    ch.basic_publish("ex", "rk", b"routed")
    assert message_count(ch, "bq") == 1

    assert api("DELETE", f"/api/bindings/{v}/e/ex/q/bq/{enc(props)}").status_code == 204
    assert api("GET", f"/api/bindings/{v}/e/ex/q/bq/{enc(props)}").status_code == 404
    assert get_json(f"/api/bindings/{v}/e/ex/q/bq") == []
    assert api("DELETE", f"/api/bindings/{v}/e/ex/q/bq/{enc(props)}").status_code == 404


def test_bindings_that_differ_only_in_arguments_have_distinct_keys(vhost):
    v = enc(vhost)
    assert api("PUT", f"/api/exchanges/{v}/hx", json={"type": "headers"}).status_code == 201
    put_queue(vhost, "hq")
    plain = props_key_from(api("POST", f"/api/bindings/{v}/e/hx/q/hq", json={"routing_key": ""}))
    assert plain == "~"
    with_args = props_key_from(api("POST", f"/api/bindings/{v}/e/hx/q/hq",
                                   json={"routing_key": "", "arguments": {"x-match": "all", "k": "v"}}))
    assert with_args != plain
    listed = get_json(f"/api/bindings/{v}/e/hx/q/hq")
    assert sorted(b["properties_key"] for b in listed) == sorted([plain, with_args])
    assert api("DELETE", f"/api/bindings/{v}/e/hx/q/hq/{enc(with_args)}").status_code == 204
    listed = get_json(f"/api/bindings/{v}/e/hx/q/hq")
    assert [(b["properties_key"], b["arguments"]) for b in listed] == [(plain, {})]


def test_binding_exchange_to_exchange(vhost, amqp):
    v = enc(vhost)
    assert api("PUT", f"/api/exchanges/{v}/src", json={"type": "topic"}).status_code == 201
    assert api("PUT", f"/api/exchanges/{v}/dst", json={"type": "fanout"}).status_code == 201
    put_queue(vhost, "sink")
    assert api("POST", f"/api/bindings/{v}/e/dst/q/sink", json={}).status_code == 201
    props = props_key_from(api("POST", f"/api/bindings/{v}/e/src/e/dst", json={"routing_key": "a.*"}))
    listed = get_json(f"/api/bindings/{v}/e/src/e/dst")
    assert [(b["destination_type"], b["routing_key"], b["properties_key"]) for b in listed] == \
        [("exchange", "a.*", props)]
    assert [b["source"] for b in get_json(f"/api/exchanges/{v}/dst/bindings/destination")] == ["src"]

    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    ch.basic_publish("src", "a.b", b"through")
    assert message_count(ch, "sink") == 1

    assert api("DELETE", f"/api/bindings/{v}/e/src/e/dst/{enc(props)}").status_code == 204
    assert get_json(f"/api/bindings/{v}/e/src/e/dst") == []


def test_binding_to_missing_queue_is_404(vhost):
    v = enc(vhost)
    r = api("POST", f"/api/bindings/{v}/e/amq.direct/q/nope", json={"routing_key": "x"})
    assert r.status_code == 404, r.text
    r = api("POST", f"/api/bindings/{v}/e/nope/q/nope", json={"routing_key": "x"})
    assert r.status_code == 404, r.text


def test_queue_bindings_include_the_default_exchange(vhost):
    put_queue(vhost, "dq")
    listed = get_json(f"/api/queues/{enc(vhost)}/dq/bindings")
    assert {"source": "", "destination": "dq", "routing_key": "dq", "destination_type": "queue"}.items() \
        <= listed[0].items()


# ---------------------------------------------------------------- definitions


def _build_topology(vhost):
    v = enc(vhost)
    assert api("PUT", f"/api/exchanges/{v}/def-x", json={"type": "topic", "durable": True}).status_code == 201
    put_queue(vhost, "def-q", durable=True, arguments={"x-max-length": 5, "x-message-ttl": 60000})
    assert api("POST", f"/api/bindings/{v}/e/def-x/q/def-q", json={"routing_key": "k.#"}).status_code == 201
    r = api("PUT", f"/api/policies/{v}/def-pol",
            json={"pattern": "^def-", "definition": {"max-length": 9}, "apply-to": "queues", "priority": 1})
    assert r.status_code == 201, r.text


def _strip(defs):
    """The vhost-independent part of a definitions document, order-insensitive."""
    def norm(items, keys):
        return sorted(({k: i.get(k) for k in keys} for i in items), key=repr)
    return {
        "queues": norm(defs["queues"], ("name", "durable", "auto_delete", "arguments")),
        "exchanges": norm(defs["exchanges"], ("name", "type", "durable", "auto_delete", "internal", "arguments")),
        "bindings": norm(defs["bindings"], ("source", "destination", "destination_type", "routing_key", "arguments")),
        "policies": norm(defs["policies"], ("name", "pattern", "apply-to", "definition", "priority")),
    }


def test_definitions_round_trip_into_a_fresh_vhost(vhost):
    _build_topology(vhost)
    exported = get_json("/api/definitions")
    for key in ("rabbit_version", "users", "vhosts", "permissions", "queues", "exchanges",
                "bindings", "policies", "parameters", "global_parameters"):
        assert key in exported, key
    mine = {k: [dict(i) for i in exported[k] if i.get("vhost") == vhost]
            for k in ("queues", "exchanges", "bindings", "policies")}
    assert [q["name"] for q in mine["queues"]] == ["def-q"]
    assert [e["name"] for e in mine["exchanges"]] == ["def-x"]

    fresh = uniq("http-vh")
    doc = {"vhosts": [{"name": fresh}],
           "permissions": [{"user": ADMIN[0], "vhost": fresh,
                            "configure": ".*", "write": ".*", "read": ".*"}]}
    for k, items in mine.items():
        for i in items:
            i["vhost"] = fresh
        doc[k] = items
    try:
        r = api("POST", "/api/definitions", json=doc)
        assert r.status_code in (200, 201, 204), r.text
        assert get_json(f"/api/queues/{enc(fresh)}/def-q")["arguments"] == \
            {"x-max-length": 5, "x-message-ttl": 60000}
        assert _strip(get_json(f"/api/definitions/{enc(fresh)}")) == \
            _strip(get_json(f"/api/definitions/{enc(vhost)}"))
    finally:
        api("DELETE", f"/api/vhosts/{enc(fresh)}")


def test_vhost_definitions_export_and_import(vhost):
    _build_topology(vhost)
    exported = get_json(f"/api/definitions/{enc(vhost)}")
    for key in ("rabbit_version", "queues", "exchanges", "bindings", "policies", "parameters"):
        assert key in exported, key
    assert "vhost" not in exported["queues"][0]
    fresh = uniq("http-vh")
    try:
        assert api("PUT", f"/api/vhosts/{enc(fresh)}").status_code == 201
        r = api("POST", f"/api/definitions/{enc(fresh)}", json=exported)
        assert r.status_code in (200, 201, 204), r.text
        assert _strip(get_json(f"/api/definitions/{enc(fresh)}")) == _strip(exported)
    finally:
        api("DELETE", f"/api/vhosts/{enc(fresh)}")


def test_invalid_definitions_are_400():
    r = api("POST", "/api/definitions", data="{not json", headers={"Content-Type": "application/json"})
    assert_error_body(r, 400)


# ---------------------------------------------------------------- policies


def test_policy_crud(vhost):
    v = enc(vhost)
    path = f"/api/policies/{v}/ttl"
    body = {"pattern": "^tmp\\.", "definition": {"message-ttl": 1000}, "apply-to": "queues", "priority": 3}
    r = api("PUT", path, json=body)
    assert r.status_code == 201, r.text
    assert get_json(path) == {"vhost": vhost, "name": "ttl", "pattern": "^tmp\\.",
                              "apply-to": "queues", "definition": {"message-ttl": 1000}, "priority": 3}
    body["definition"] = {"message-ttl": 2000}
    assert api("PUT", path, json=body).status_code == 204
    assert get_json(path)["definition"] == {"message-ttl": 2000}
    assert [p["name"] for p in get_json(f"/api/policies/{v}")] == ["ttl"]
    assert any(p["name"] == "ttl" and p["vhost"] == vhost for p in get_json("/api/policies"))
    assert api("DELETE", path).status_code == 204
    assert_error_body(api("GET", path), 404)
    assert api("DELETE", path).status_code == 404


def test_policy_applies_to_a_queue(vhost, amqp):
    v = enc(vhost)
    put_queue(vhost, "capped")
    r = api("PUT", f"/api/policies/{v}/cap",
            json={"pattern": "^capped$", "definition": {"max-length": 1}, "apply-to": "queues"})
    assert r.status_code == 201, r.text
    q = wait_for(lambda: (lambda q: q if q.get("policy") == "cap" else None)(
        get_json(f"/api/queues/{v}/capped")))
    assert q, get_json(f"/api/queues/{v}/capped")
    assert q["effective_policy_definition"] == {"max-length": 1}
    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    for body in (b"1", b"2", b"3"):
        ch.basic_publish("", "capped", body)
    assert message_count(ch, "capped") == 1
    assert api("DELETE", f"/api/policies/{v}/cap").status_code == 204
    assert wait_for(lambda: not get_json(f"/api/queues/{v}/capped").get("policy"))


def test_invalid_policy_definition_is_400(vhost):
    v = enc(vhost)
    r = api("PUT", f"/api/policies/{v}/bad", json={"pattern": ".*", "definition": {"max-length": "many"}})
    assert_error_body(r, 400)
    r = api("PUT", f"/api/policies/{v}/bad", json={"pattern": ".*", "definition": {"no-such-key": 1}})
    assert_error_body(r, 400)
    assert api("GET", f"/api/policies/{v}/bad").status_code == 404


# ---------------------------------------------------------------- connections, channels, consumers


def _find_connection(connection_name):
    for c in get_json("/api/connections"):
        if (c.get("client_properties") or {}).get("connection_name") == connection_name:
            return c
    return None


def test_connection_listed_and_closed_with_reason(vhost, amqp):
    cname = uniq("http-conn")
    conn = amqp(vhost, connection_name=cname)
    c = wait_for(lambda: _find_connection(cname))
    assert c, "connection not listed in /api/connections"
    assert c["user"] == AMQP_USER
    assert c["vhost"] == vhost
    assert c["protocol"].startswith("AMQP 0-9-1")
    assert get_json(f"/api/connections/{enc(c['name'])}")["name"] == c["name"]
    assert c["name"] in [x["name"] for x in get_json(f"/api/vhosts/{enc(vhost)}/connections")]

    r = api("DELETE", f"/api/connections/{enc(c['name'])}", headers={"X-Reason": "maintenance window"})
    assert r.status_code == 204, r.text
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as ei:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
    assert ei.value.reply_code == 320
    assert ei.value.reply_text == "CONNECTION_FORCED - maintenance window"
    assert wait_for(lambda: api("GET", f"/api/connections/{enc(c['name'])}").status_code == 404)


def test_closing_a_missing_connection_is_404():
    assert api("DELETE", "/api/connections/" + enc("127.0.0.1:1 -> 127.0.0.1:2")).status_code == 404


def test_channels_and_consumers_of_an_active_consumer(vhost, amqp):
    cname, tag = uniq("http-conn"), uniq("ctag")
    put_queue(vhost, "consumed")
    conn = amqp(vhost, connection_name=cname)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=7)
    ch.basic_consume("consumed", lambda *a: None, consumer_tag=tag)

    def my_channel():
        for c in get_json("/api/channels"):
            if c.get("vhost") == vhost and c.get("consumer_count") == 1:
                return c
        return None

    chan = wait_for(my_channel)
    assert chan, get_json("/api/channels")
    assert chan["prefetch_count"] == 7
    assert chan["user"] == AMQP_USER
    assert chan["number"] == ch.channel_number
    assert get_json(f"/api/channels/{enc(chan['name'])}")["name"] == chan["name"]
    conn_name = chan["connection_details"]["name"]
    assert [x["name"] for x in get_json(f"/api/connections/{enc(conn_name)}/channels")] == [chan["name"]]
    assert chan["name"] in [x["name"] for x in get_json(f"/api/vhosts/{enc(vhost)}/channels")]

    consumers = [c for c in get_json("/api/consumers") if c["consumer_tag"] == tag]
    assert len(consumers) == 1
    cons = consumers[0]
    assert cons["queue"] == {"name": "consumed", "vhost": vhost}
    assert cons["channel_details"]["name"] == chan["name"]
    assert cons["ack_required"] is True
    assert cons["exclusive"] is False
    assert cons["prefetch_count"] == 7
    assert [c["consumer_tag"] for c in get_json(f"/api/consumers/{enc(vhost)}")] == [tag]
    assert wait_for(lambda: get_json(f"/api/queues/{enc(vhost)}/consumed")["consumers"] == 1)


# ---------------------------------------------------------------- stats


def test_queue_message_stats_after_publishing(vhost, amqp):
    put_queue(vhost, "counted")
    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "counted", f"m{i}".encode())

    def counted():
        q = get_json(f"/api/queues/{enc(vhost)}/counted")
        ok = q.get("messages") == 3 and q.get("messages_ready") == 3 and \
            (q.get("message_stats") or {}).get("publish") == 3
        return q if ok else None

    q = wait_for(counted)
    assert q, get_json(f"/api/queues/{enc(vhost)}/counted")
    assert q["messages_unacknowledged"] == 0
    assert "rate" in q["message_stats"]["publish_details"]


# ---------------------------------------------------------------- publish / get over HTTP


def test_publish_and_get_over_http(vhost):
    v = enc(vhost)
    put_queue(vhost, "inbox")
    r = api("POST", f"/api/exchanges/{v}/amq.default/publish",
            json={"properties": {"content_type": "text/plain", "headers": {"h": "v"}},
                  "routing_key": "inbox", "payload": "hello", "payload_encoding": "string"})
    assert r.status_code == 200, r.text
    assert r.json() == {"routed": True}
    r = api("POST", f"/api/queues/{v}/inbox/get",
            json={"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"})
    assert r.status_code == 200, r.text
    msgs = r.json()
    assert len(msgs) == 1
    m = msgs[0]
    assert m["payload"] == "hello"
    assert m["payload_encoding"] == "string"
    assert m["payload_bytes"] == 5
    assert m["exchange"] == ""
    assert m["routing_key"] == "inbox"
    assert m["redelivered"] is False
    assert m["message_count"] == 0
    assert m["properties"]["content_type"] == "text/plain"
    assert m["properties"]["headers"] == {"h": "v"}
    # ack_requeue_false removed it.
    r = api("POST", f"/api/queues/{v}/inbox/get", json={"count": 1, "ackmode": "ack_requeue_false",
                                                         "encoding": "auto"})
    assert r.status_code == 200 and r.json() == [], r.text


def test_get_with_requeue_marks_redelivered(vhost):
    v = enc(vhost)
    put_queue(vhost, "peek")
    r = api("POST", f"/api/exchanges/{v}/amq.default/publish",
            json={"properties": {}, "routing_key": "peek", "payload": base64.b64encode(b"\x00\xff").decode(),
                  "payload_encoding": "base64"})
    assert r.json() == {"routed": True}
    get = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "base64"}
    first = api("POST", f"/api/queues/{v}/peek/get", json=get).json()
    second = api("POST", f"/api/queues/{v}/peek/get", json=get).json()
    assert base64.b64decode(first[0]["payload"]) == b"\x00\xff"
    assert first[0]["payload_encoding"] == "base64"
    assert first[0]["redelivered"] is False
    assert second[0]["redelivered"] is True
    assert get_json(f"/api/queues/{v}/peek")["name"] == "peek"


def test_published_message_reaches_a_pika_consumer(vhost, amqp):
    v = enc(vhost)
    put_queue(vhost, "to-pika")
    r = api("POST", f"/api/exchanges/{v}/amq.default/publish",
            json={"properties": {"delivery_mode": 2, "headers": {"n": 1}, "correlation_id": "c1"},
                  "routing_key": "to-pika", "payload": "from http", "payload_encoding": "string"})
    assert r.json() == {"routed": True}
    ch = amqp(vhost).channel()
    method, props, body = ch.basic_get("to-pika", auto_ack=True)
    assert body == b"from http"
    assert props.delivery_mode == 2
    assert props.headers == {"n": 1}
    assert props.correlation_id == "c1"


def test_unroutable_publish_and_missing_exchange(vhost):
    v = enc(vhost)
    r = api("POST", f"/api/exchanges/{v}/amq.default/publish",
            json={"properties": {}, "routing_key": "nobody-home", "payload": "x", "payload_encoding": "string"})
    assert r.status_code == 200, r.text
    assert r.json() == {"routed": False}
    # RabbitMQ 3.10 reports a missing exchange here as a 400 whose reason is the AMQP error.
    r = api("POST", f"/api/exchanges/{v}/no-such-exchange/publish",
            json={"properties": {}, "routing_key": "x", "payload": "x", "payload_encoding": "string"})
    body = assert_error_body(r, 400)
    assert "NOT_FOUND" in body["reason"], body


# ---------------------------------------------------------------- parameters


def test_vhost_parameters_crud(vhost):
    v = enc(vhost)
    path = f"/api/parameters/federation-upstream/{v}/up1"
    value = {"uri": "amqp://127.0.0.1:1", "expires": 3600000}
    r = api("PUT", path, json={"value": value})
    assert r.status_code == 201, r.text
    assert get_json(path) == {"component": "federation-upstream", "vhost": vhost, "name": "up1", "value": value}
    assert [p["name"] for p in get_json(f"/api/parameters/federation-upstream/{v}")] == ["up1"]
    assert any(p["name"] == "up1" and p["vhost"] == vhost for p in get_json("/api/parameters"))
    assert any(p["name"] == "up1" for p in get_json("/api/parameters/federation-upstream"))
    value["expires"] = 1000
    assert api("PUT", path, json={"value": value}).status_code == 204
    assert get_json(path)["value"]["expires"] == 1000
    assert api("DELETE", path).status_code == 204
    assert api("GET", path).status_code == 404


def test_global_parameters_crud():
    name = uniq("http-gp")
    path = f"/api/global-parameters/{enc(name)}"
    try:
        r = api("PUT", path, json={"value": {"region": "eu", "n": 1}})
        assert r.status_code == 201, r.text
        assert get_json(path) == {"name": name, "value": {"region": "eu", "n": 1}}
        assert any(p["name"] == name for p in get_json("/api/global-parameters"))
        assert api("PUT", path, json={"value": "plain"}).status_code == 204
        assert get_json(path)["value"] == "plain"
        assert api("DELETE", path).status_code == 204
        assert api("GET", path).status_code == 404
    finally:
        api("DELETE", path)


# ---------------------------------------------------------------- vhost limits


def test_vhost_limits(vhost, amqp):
    v = enc(vhost)
    assert get_json(f"/api/vhost-limits/{v}") == []
    r = api("PUT", f"/api/vhost-limits/{v}/max-queues", json={"value": 1})
    assert r.status_code == 204, r.text
    assert get_json(f"/api/vhost-limits/{v}") == [{"vhost": vhost, "value": {"max-queues": 1}}]
    assert {"vhost": vhost, "value": {"max-queues": 1}} in get_json("/api/vhost-limits")
    ch = amqp(vhost).channel()
    ch.queue_declare("first")
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.queue_declare("second")
    assert api("DELETE", f"/api/vhost-limits/{v}/max-queues").status_code == 204
    assert get_json(f"/api/vhost-limits/{v}") == []


def test_invalid_vhost_limit_is_400(vhost):
    r = api("PUT", f"/api/vhost-limits/{enc(vhost)}/max-connections", json={"value": "lots"})
    assert_error_body(r, 400)


# ---------------------------------------------------------------- authentication / authorisation


def test_no_credentials_is_401():
    r = requests.get(BASE + "/api/overview", timeout=TIMEOUT)
    assert r.status_code == 401
    assert r.headers.get("WWW-Authenticate", "").startswith("Basic")


def test_wrong_password_is_401_with_error_body():
    r = api("GET", "/api/overview", auth=(ADMIN[0], "definitely-wrong"))
    body = assert_error_body(r, 401)
    assert body["error"] == "not_authorized"
    r = api("GET", "/api/overview", auth=(uniq("nobody"), "x"))
    assert_error_body(r, 401)


# RabbitMQ 3.10 says 401 here; 403 is the status for an authenticated user who is
# not allowed, as the broker's API documents.
FORBIDDEN = 403


def test_non_admin_user_is_refused_on_users(users):
    name, password = users(tags="management")
    assert get_json("/api/overview", auth=(name, password))
    assert get_json("/api/whoami", auth=(name, password))["tags"] == ["management"]
    # RabbitMQ 3.10 answers an authenticated user that lacks the tag with 401;
    # this broker answers 403 (authenticated, not allowed), with the same body.
    r = api("GET", "/api/users", auth=(name, password))
    body = assert_error_body(r, FORBIDDEN)
    assert body == {"error": "not_authorised", "reason": "Not administrator user"}
    r = api("PUT", f"/api/vhosts/{enc(uniq('http-vh'))}", auth=(name, password))
    assert r.status_code == FORBIDDEN


def test_user_without_tags_cannot_use_the_api(users):
    name, password = users(tags="")
    r = api("GET", "/api/overview", auth=(name, password))
    body = assert_error_body(r, 401)
    assert body["reason"] == "Not management user"


def test_management_user_only_sees_its_own_vhosts(vhost, users):
    name, password = users(tags="management")
    assert vhost not in [v["name"] for v in get_json("/api/vhosts", auth=(name, password))]
    assert api("GET", f"/api/queues/{enc(vhost)}", auth=(name, password)).status_code == FORBIDDEN
    r = api("PUT", f"/api/permissions/{enc(vhost)}/{enc(name)}",
            json={"configure": ".*", "write": ".*", "read": ".*"})
    assert r.status_code == 201, r.text
    assert vhost in [v["name"] for v in get_json("/api/vhosts", auth=(name, password))]
    assert get_json(f"/api/queues/{enc(vhost)}", auth=(name, password)) == []


# ---------------------------------------------------------------- listing parameters


@pytest.fixture
def five_queues(vhost, amqp):
    """Queues a..e in a fresh vhost; queue c holds 2 messages, the rest none."""
    for n in "abcde":
        put_queue(vhost, f"lq-{n}")
    ch = amqp(vhost).channel()
    ch.confirm_delivery()
    ch.basic_publish("", "lq-c", b"1")
    ch.basic_publish("", "lq-c", b"2")
    return vhost


def wait_for_lq_c_stats(vhost):
    """Listings show message counts from stats: wait until lq-c's 2 messages show."""
    assert wait_for(lambda: get_json(f"/api/queues/{enc(vhost)}/lq-c").get("messages") == 2)


def test_pagination(five_queues):
    v = enc(five_queues)
    page = get_json(f"/api/queues/{v}", params={"page": 1, "page_size": 2})
    assert set(page) >= {"items", "page", "page_size", "page_count",
                         "filtered_count", "item_count", "total_count"}
    assert [q["name"] for q in page["items"]] == ["lq-a", "lq-b"]
    assert (page["page"], page["page_size"], page["page_count"]) == (1, 2, 3)
    assert (page["filtered_count"], page["item_count"], page["total_count"]) == (5, 2, 5)
    last = get_json(f"/api/queues/{v}", params={"page": 3, "page_size": 2})
    assert [q["name"] for q in last["items"]] == ["lq-e"]
    assert last["item_count"] == 1
    assert_error_body(api("GET", f"/api/queues/{v}", params={"page": 4, "page_size": 2}), 400)


def test_name_filter_with_regex(five_queues):
    v = enc(five_queues)
    page = get_json(f"/api/queues/{v}",
                    params={"page": 1, "page_size": 100, "name": "^lq-(a|c)$", "use_regex": "true"})
    assert [q["name"] for q in page["items"]] == ["lq-a", "lq-c"]
    assert (page["filtered_count"], page["item_count"], page["total_count"]) == (2, 2, 5)
    assert page["page_count"] == 1
    # Without use_regex the name is matched as a plain substring.
    page = get_json(f"/api/queues/{v}", params={"page": 1, "page_size": 100, "name": "lq-d"})
    assert [q["name"] for q in page["items"]] == ["lq-d"]


def test_sort_and_sort_reverse(five_queues):
    v = enc(five_queues)
    wait_for_lq_c_stats(five_queues)
    listed = get_json(f"/api/queues/{v}", params={"sort": "name", "sort_reverse": "true"})
    assert [q["name"] for q in listed] == ["lq-e", "lq-d", "lq-c", "lq-b", "lq-a"]
    listed = get_json(f"/api/queues/{v}", params={"sort": "name"})
    assert [q["name"] for q in listed] == ["lq-a", "lq-b", "lq-c", "lq-d", "lq-e"]
    listed = get_json(f"/api/queues/{v}", params={"sort": "messages", "sort_reverse": "true"})
    assert listed[0]["name"] == "lq-c"


def test_columns(five_queues):
    v = enc(five_queues)
    wait_for_lq_c_stats(five_queues)
    listed = get_json(f"/api/queues/{v}", params={"columns": "name,messages"})
    assert len(listed) == 5
    for q in listed:
        assert set(q) == {"name", "messages"}, q
    assert {q["name"]: q["messages"] for q in listed}["lq-c"] == 2
    page = get_json(f"/api/queues/{v}", params={"columns": "name", "page": 1, "page_size": 1})
    assert page["items"] == [{"name": "lq-a"}]
