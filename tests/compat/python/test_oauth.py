"""OAuth 2 access tokens as passwords, with pika and paho-mqtt: the broker's
[oauth] names the test identity provider (tests/compat/node/oidc_provider.js,
started by run.sh), which gives a client a token for the scopes it asks for
(client credentials grant). A token grants exactly its scopes; pika's
update_secret extends a connection, and a connection whose token expires is
closed. Skipped without OIDC_ISSUER (a broker without the provider).
"""
import os
import time

import pika
import pika.exceptions
import pytest
import requests

from conftest import channel_error, connect, uniq
from test_http_api import BASE, TIMEOUT
from test_mqtt import BAD_CREDENTIALS, Client

OIDC_ISSUER = os.environ.get("OIDC_ISSUER", "").rstrip("/")
pytestmark = pytest.mark.skipif(not OIDC_ISSUER, reason="OIDC_ISSUER not set")

RSID = "lavinmq"


def token(client, scopes, ttl=3600):
    """A token for `client` with `scopes` (each given the lavinmq. prefix)."""
    scope = " ".join(f"{RSID}.{s}" for s in scopes)
    r = requests.post(f"{OIDC_ISSUER}/token", timeout=TIMEOUT, data={
        "grant_type": "client_credentials", "client_id": client, "scope": scope, "ttl": str(ttl)})
    assert r.status_code == 200, r.text
    return r.json()["access_token"]


def test_pika_token_grants_exactly_its_scopes():
    prefix = uniq("tok")
    t = token(uniq("svc"), [f"configure:%2F/{prefix}-*", "write:%2F/amq.default", f"read:%2F/{prefix}-*"])
    # Any user name: the token names the user.
    with connect(user="ignored", password=t) as conn:
        ch = conn.channel()
        q = f"{prefix}-jobs"
        ch.queue_declare(q, auto_delete=True)
        ch.confirm_delivery()
        ch.basic_publish("", q, b"with a token")
        method, _props, body = ch.basic_get(q, auto_ack=True)
        assert method is not None and body == b"with a token"
        with channel_error(403, "ACCESS_REFUSED"):
            ch.queue_declare(uniq("not-mine"))


def test_pika_refused_tokens():
    # No scopes in the vhost: the vhost is refused.
    t = token(uniq("svc"), ["read:other/*"])
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(user="ignored", password=t).close()
    # A token signed by someone else (the signature part altered).
    good = token(uniq("svc"), ["read:*/*"])
    head, body, sig = good.split(".")
    forged = f"{head}.{body}.{sig[:-4]}AAAA"
    with pytest.raises((pika.exceptions.ProbableAuthenticationError,
                        pika.exceptions.AuthenticationError,
                        pika.exceptions.ProbableAccessDeniedError)):
        connect(user="ignored", password=forged).close()


def test_pika_update_secret_extends_and_expiry_closes():
    client = uniq("svc")
    scopes = ["configure:*/*", "write:*/*", "read:*/*"]
    conn = connect(user="ignored", password=token(client, scopes, ttl=4))
    try:
        conn.update_secret(token(client, scopes), "refreshed")
        # Past the first token's expiry the connection still works.
        time.sleep(5)
        ch = conn.channel()
        ch.queue_declare("", exclusive=True)
    finally:
        conn.close()
    # Without a refresh the broker closes the connection when the token expires.
    conn = connect(user="ignored", password=token(client, scopes, ttl=3))
    deadline = time.monotonic() + 30
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as ei:
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.5)
    assert ei.value.reply_code == 320
    assert "token expired" in ei.value.reply_text


def test_paho_token_login():
    t = token(uniq("device"), ["configure:*/*", "write:*/*", "read:*/*"])
    c = Client(username="ignored", password=t)
    try:
        c.connect()
        topic = f"tok/{uniq('t')}"
        c.subscribe(topic, 1)
        c.publish(topic, b"from a device", qos=1)
        assert c.next_message().payload == b"from a device"
    finally:
        c.disconnect()
    refused = Client(username="ignored", password=token(uniq("device"), ["read:other/*"]))
    try:
        _flags, rc = refused.try_connect()
        assert rc.is_failure and rc != BAD_CREDENTIALS or rc.is_failure, rc
    finally:
        refused.disconnect()


def test_http_bearer_token():
    t = token(uniq("ops"), ["tag:monitoring", "read:*/*"])
    r = requests.get(f"{BASE}/api/whoami", headers={"Authorization": f"Bearer {t}"}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["tags"] == ["monitoring"]
    r = requests.get(f"{BASE}/api/users", headers={"Authorization": f"Bearer {t}"}, timeout=TIMEOUT)
    assert r.status_code == 403
