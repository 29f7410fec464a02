"""Policies set through the management HTTP API apply to queues that clients
declare over AMQP (RabbitMQ's semantics). Needs MGMT_URL (run.sh sets it for
the broker it starts); skipped without it."""
import os
import time
from urllib.parse import quote, urlsplit

import pika
import pytest
import requests

from conftest import uniq

MGMT_URL = os.environ.get("MGMT_URL")
pytestmark = pytest.mark.skipif(not MGMT_URL, reason="MGMT_URL not set")


def api(method, path, **kw):
    parts = urlsplit(MGMT_URL)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    return requests.request(method, base + path, auth=(parts.username, parts.password), timeout=5, **kw)


def count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.fixture
def policy():
    names = []
    yield names.append
    for n in names:
        api("DELETE", f"/api/policies/%2F/{quote(n, safe='')}")


def test_max_length_policy_trims_an_existing_queue(ch, cleanup, policy):
    q = uniq("pol")
    ch.queue_declare(q)
    cleanup(lambda c: c.queue_delete(q))
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", q, f"m{i}".encode())
    name = uniq("limit")
    policy(name)
    r = api("PUT", f"/api/policies/%2F/{name}",
            json={"pattern": f"^{q}$", "definition": {"max-length": 2}, "apply-to": "queues"})
    assert r.status_code == 201, r.text
    assert wait_for(lambda: count(ch, q) == 2)
    assert ch.basic_get(q, auto_ack=True)[2] == b"m3"
    shown = api("GET", f"/api/queues/%2F/{q}").json()
    assert shown["policy"] == name


def test_dead_letter_policy_and_argument_precedence(ch, cleanup, policy):
    dlq, q = uniq("pol-dlq"), uniq("pol-src")
    ch.queue_declare(dlq)
    ch.queue_declare(q)
    cleanup(lambda c: c.queue_delete(dlq))
    cleanup(lambda c: c.queue_delete(q))
    name = uniq("dlx")
    policy(name)
    r = api("PUT", f"/api/policies/%2F/{name}",
            json={"pattern": f"^{q}$", "apply-to": "queues",
                  "definition": {"dead-letter-exchange": "", "dead-letter-routing-key": dlq}})
    assert r.status_code == 201, r.text
    ch.confirm_delivery()
    ch.basic_publish("", q, b"x")
    method, _props, _body = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert wait_for(lambda: count(ch, dlq) == 1)
    _m, props, _b = ch.basic_get(dlq, auto_ack=True)
    assert props.headers["x-death"][0]["reason"] == "rejected"


def test_invalid_policy_is_a_400(policy):
    r = api("PUT", "/api/policies/%2F/broken", json={"pattern": "(", "definition": {"max-length": 1}})
    assert r.status_code == 400
    assert "error" in r.json()
