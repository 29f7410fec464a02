"""Shared fixtures for the pika compatibility suite.

The broker URL comes from AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2F).
Every test uses uniquely named queues/exchanges so tests are independent.

Set COMPAT_RECORD=/path/file to append every (reply_code, reply_text) the
broker sent on an error path; handy to compare brokers side by side.
"""
import contextlib
import os
import uuid
from urllib.parse import urlsplit

import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")

# Short timeouts: a broken broker must fail tests quickly, never hang them.
_TIMEOUT_QS = "connection_attempts=1&socket_timeout=5&blocked_connection_timeout=10&stack_timeout=10"


def url_with(url=AMQP_URL, user=None, password=None, vhost=None, query=None):
    """Build a variant of the broker URL (other credentials / vhost)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 5672
    u = user if user is not None else (parts.username or "guest")
    p = password if password is not None else (parts.password or "guest")
    path = parts.path if vhost is None else "/" + vhost
    if path in ("", "/"):
        path = "/%2F"
    qs = query if query is not None else _TIMEOUT_QS
    return f"{parts.scheme}://{u}:{p}@{host}:{port}{path}?{qs}"


def host_port(url=AMQP_URL):
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5672


def params(**kw):
    return pika.URLParameters(url_with(**kw))


def connect(**kw):
    return pika.BlockingConnection(params(**kw))


def uniq(prefix="compat"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def record(kind, code, text):
    path = os.environ.get("COMPAT_RECORD")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{test}\t{kind}\t{code}\t{text}\n")


@contextlib.contextmanager
def channel_error(code, text_prefix=None):
    """Expect the broker to close the channel with `code` (ChannelClosedByBroker).

    RabbitMQ reply texts always start with the symbolic name of the code,
    e.g. "NOT_FOUND - no queue 'x' in vhost '/'"; pass text_prefix to check that.
    """
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
        yield ei
    err = ei.value
    record("channel", err.reply_code, err.reply_text)
    assert err.reply_code == code, f"expected {code}, got {err.reply_code} {err.reply_text!r}"
    if text_prefix is not None:
        assert err.reply_text.startswith(text_prefix), err.reply_text


@contextlib.contextmanager
def connection_error(code, text_prefix=None):
    """Expect the broker to close the whole connection with `code`."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as ei:
        yield ei
    err = ei.value
    record("connection", err.reply_code, err.reply_text)
    assert err.reply_code == code, f"expected {code}, got {err.reply_code} {err.reply_text!r}"
    if text_prefix is not None:
        assert err.reply_text.startswith(text_prefix), err.reply_text


@pytest.fixture
def conn():
    c = connect()
    yield c
    if c.is_open:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def ch(conn):
    return conn.channel()


@pytest.fixture
def queue(ch):
    """A fresh, auto-deleted-at-teardown, non-durable queue name."""
    name = uniq("q")
    ch.queue_declare(name)
    yield name
    _cleanup(lambda c: c.queue_delete(name))


@pytest.fixture
def cleanup():
    """Register cleanups run on a fresh connection at teardown."""
    fns = []
    yield fns.append
    for fn in fns:
        _cleanup(fn)


def _cleanup(fn):
    try:
        c = connect()
    except Exception:
        return
    try:
        fn(c.channel())
    except Exception:
        pass
    finally:
        try:
            c.close()
        except Exception:
            pass


def drain(ch, queue, n, timeout=5, auto_ack=True):
    """Consume up to n messages via basic.get polling; returns list of (method, props, body)."""
    import time

    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        m, p, b = ch.basic_get(queue, auto_ack=auto_ack)
        if m is None:
            ch.connection.sleep(0.01)
            continue
        out.append((m, p, b))
    return out


def families(text):
    """{family name: Metric}, failing on anything the parser refuses."""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in out, f"family {family.name} twice"
        out[family.name] = family
    return out


def sample_value(family, **labels):
    for s in family.samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None
