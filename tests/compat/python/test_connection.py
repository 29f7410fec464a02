"""Connection-level behaviour: handshake, server properties, auth and vhost errors."""
import pika
import pika.exceptions
import pytest

from conftest import connect, params, record, uniq, url_with

EXPECTED_CAPABILITIES = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
]


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def test_connect_and_close():
    c = connect()
    assert c.is_open
    ch = c.channel()
    assert ch.is_open
    ch.close()
    assert ch.is_closed
    c.close()
    assert c.is_closed


def test_server_properties_product_and_version():
    c = connect()
    try:
        props = c._impl.server_properties
        product = _s(props.get("product"))
        assert isinstance(product, str) and product, props
        assert _s(props.get("version")), props
    finally:
        c.close()


@pytest.mark.parametrize("cap", EXPECTED_CAPABILITIES)
def test_server_capabilities(cap):
    c = connect()
    try:
        caps = c._impl.server_properties.get("capabilities", {})
        assert caps.get(cap) is True, caps
    finally:
        c.close()


def test_tune_negotiation():
    c = connect()
    try:
        p = c._impl.params
        # RabbitMQ: frame_max 131072, channel_max 2047; accept any sane values.
        assert p.frame_max >= 4096
        assert p.channel_max >= 1
    finally:
        c.close()


def test_many_channels_open_and_close():
    c = connect()
    try:
        chans = [c.channel() for _ in range(20)]
        nums = {x.channel_number for x in chans}
        assert len(nums) == 20
        for x in chans:
            x.close()
        # Channel numbers can be reused after close.
        again = c.channel()
        assert again.is_open
    finally:
        c.close()


def test_channel_usable_after_other_channel_error():
    c = connect()
    try:
        bad = c.channel()
        good = c.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            bad.queue_declare(uniq("missing"), passive=True)
        assert c.is_open
        assert good.is_open
        q = good.queue_declare("", exclusive=True).method.queue
        assert q
    finally:
        c.close()


def test_wrong_password_is_refused():
    with pytest.raises(
        (pika.exceptions.ProbableAuthenticationError, pika.exceptions.AuthenticationError)
    ) as ei:
        pika.BlockingConnection(pika.URLParameters(url_with(password="definitely-wrong")))
    record("connection", "auth", repr(ei.value))


def test_unknown_user_is_refused():
    with pytest.raises(
        (pika.exceptions.ProbableAuthenticationError, pika.exceptions.AuthenticationError)
    ):
        pika.BlockingConnection(pika.URLParameters(url_with(user=uniq("nouser"), password="x")))


def test_nonexistent_vhost_is_not_allowed():
    vhost = uniq("novhost")
    with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
        pika.BlockingConnection(pika.URLParameters(url_with(vhost=vhost)))
    err = ei.value
    # pika wraps it in ProbableAccessDeniedError or ConnectionClosedByBroker;
    # either way the broker's connection.close carried 530 NOT_ALLOWED.
    text = repr(err)
    record("connection", "vhost", text)
    assert "530" in text and "NOT_ALLOWED" in text, text


def test_connection_close_after_channel_close_is_clean():
    c = connect()
    ch = c.channel()
    ch.queue_declare("", exclusive=True)
    ch.close()
    c.close()
    # A new connection afterwards works.
    c2 = connect()
    c2.close()


def test_heartbeat_negotiated_to_client_value():
    c = pika.BlockingConnection(pika.URLParameters(url_with() + "&heartbeat=7"))
    try:
        assert c._impl.params.heartbeat == 7
    finally:
        c.close()
