"""Wire-level error handling with raw sockets, plus recovery afterwards.

Frames are built with pika's own codec (pika.frame / pika.spec) so only the
thing under test is hand-made.
"""
import socket
import struct
import time
from urllib.parse import unquote, urlsplit

import pika
import pytest
from pika import frame, spec

from conftest import AMQP_URL, connect, host_port, record, uniq

AMQP_0091 = b"AMQP\x00\x00\x09\x01"


def _creds():
    parts = urlsplit(AMQP_URL)
    user = unquote(parts.username or "guest")
    pw = unquote(parts.password or "guest")
    vhost = unquote(parts.path[1:]) if parts.path not in ("", "/") else "/"
    return user, pw, vhost


def read_until_closed(sock, timeout=5.0):
    """Read everything until EOF/reset. Returns (data, closed)."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return data, False
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not d:
            return data, True
        data += d
    return data, False


class RawConn:
    def __init__(self):
        self.sock = socket.create_connection(host_port(), timeout=5)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def send_method(self, channel, method):
        self.send(frame.Method(channel, method).marshal())

    def read_frame(self, timeout=5.0):
        self.sock.settimeout(timeout)
        while True:
            if self.buf:
                consumed, fr = frame.decode_frame(self.buf)
                if fr is not None:
                    self.buf = self.buf[consumed:]
                    return fr
            d = self.sock.recv(65536)
            if not d:
                raise EOFError("socket closed by broker")
            self.buf += d

    def expect_method(self, cls, timeout=5.0):
        while True:
            fr = self.read_frame(timeout)
            if isinstance(fr, frame.Method):
                assert isinstance(fr.method, cls), fr.method
                return fr.method
            # heartbeats etc. are skipped

    def handshake(self, channel_max=0, frame_max=131072):
        user, pw, vhost = _creds()
        self.send(AMQP_0091)
        start = self.expect_method(spec.Connection.Start)
        self.send_method(0, spec.Connection.StartOk(
            client_properties={"product": "compat-raw"},
            mechanism="PLAIN",
            response=f"\0{user}\0{pw}",
            locale="en_US"))
        tune = self.expect_method(spec.Connection.Tune)
        fm = min(tune.frame_max or frame_max, frame_max)
        self.send_method(0, spec.Connection.TuneOk(channel_max=tune.channel_max, frame_max=fm, heartbeat=0))
        self.send_method(0, spec.Connection.Open(virtual_host=vhost))
        self.expect_method(spec.Connection.OpenOk)
        return start, tune

    def expect_connection_close(self, timeout=5.0):
        m = self.expect_method(spec.Connection.Close, timeout)
        record("connection", m.reply_code, m.reply_text)
        self.send_method(0, spec.Connection.CloseOk())
        return m

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


@pytest.fixture
def raw():
    r = RawConn()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def broker_still_healthy():
    """After every raw-socket abuse a fresh pika connection must work."""
    yield
    c = connect()
    try:
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"ok")
        _, _, b = ch.basic_get(q, auto_ack=True)
        assert b == b"ok" or b is None  # publish is async; presence not required
    finally:
        c.close()


@pytest.mark.parametrize("header", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"AMQP\x00\x00\x09\x00",   # 0-9 with new-style header
    b"AMQP\x00\x00\x09\x02",
    b"XXXXXXXX",
], ids=["http", "amqp-0-9", "amqp-0-9-2", "garbage"])
def test_wrong_protocol_header_gets_0091_header_and_close(raw, header):
    raw.send(header)
    data, closed = read_until_closed(raw.sock)
    assert data == AMQP_0091, data
    assert closed


AMQP_10_SASL = b"AMQP\x03\x01\x00\x00"


def test_amqp_1_0_without_sasl_gets_the_sasl_header_and_close(raw):
    # As RabbitMQ 4: AMQP 1.0 needs SASL; the answer names the header to use.
    raw.send(b"AMQP\x00\x01\x00\x00")
    data, closed = read_until_closed(raw.sock)
    assert data == AMQP_10_SASL, data
    assert closed


def test_amqp_1_0_sasl_then_garbage_gets_mechanisms_and_close(raw):
    # The SASL header is echoed and PLAIN offered; a frame that is not a
    # sasl-init ends the connection.
    raw.send(AMQP_10_SASL + b"\x00\x00\x00\x0c\x02\x01\x00\x00\x00\x53\x99\x45")
    data, closed = read_until_closed(raw.sock)
    assert data.startswith(AMQP_10_SASL), data
    assert b"PLAIN" in data, data
    assert closed


def test_truncated_header_then_eof_closes(raw):
    raw.send(b"AMQ")
    raw.sock.shutdown(socket.SHUT_WR)
    data, closed = read_until_closed(raw.sock)
    assert closed
    assert data in (b"", AMQP_0091), data


def test_connection_start_fields(raw):
    raw.send(AMQP_0091)
    start = raw.expect_method(spec.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    mechs = start.mechanisms.decode() if isinstance(start.mechanisms, bytes) else start.mechanisms
    assert "PLAIN" in mechs.split()
    locales = start.locales.decode() if isinstance(start.locales, bytes) else start.locales
    assert "en_US" in locales.split()
    caps = start.server_properties["capabilities"]
    assert caps["publisher_confirms"] is True


def test_raw_handshake_and_clean_close(raw):
    _, tune = raw.handshake()
    assert tune.frame_max >= 4096
    raw.send_method(0, spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    raw.expect_method(spec.Connection.CloseOk)
    # After close-ok it is the client that closes the socket (RabbitMQ keeps
    # it open until then), so nothing more is asserted here.


def test_method_on_unopened_channel_504(raw):
    raw.handshake()
    raw.send_method(3, spec.Queue.Declare(queue="", exclusive=True))
    m = raw.expect_connection_close()
    assert m.reply_code == 504
    assert m.reply_text.startswith("CHANNEL_ERROR")


def test_channel_open_twice_504(raw):
    raw.handshake()
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)
    raw.send_method(1, spec.Channel.Open())
    m = raw.expect_connection_close()
    assert m.reply_code == 504
    assert m.reply_text.startswith("CHANNEL_ERROR")


def test_channel_close_and_reopen(raw):
    raw.handshake()
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)
    raw.send_method(1, spec.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    raw.expect_method(spec.Channel.CloseOk)
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)


def test_bad_frame_end_closes_connection(raw):
    raw.handshake()
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)
    bad = bytearray(frame.Method(1, spec.Queue.Declare(queue="", exclusive=True)).marshal())
    bad[-1] = 0x00  # frame-end must be 0xCE
    raw.send(bytes(bad))
    try:
        m = raw.expect_connection_close()
        assert m.reply_code == 501, m
        return  # RabbitMQ: connection.close 501 FRAME_ERROR, then close-ok
    except (EOFError, ConnectionResetError):
        pass  # closing the socket outright is acceptable too
    _, closed = read_until_closed(raw.sock)
    assert closed


def test_content_header_without_method_505(raw):
    raw.handshake()
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)
    raw.send(frame.Header(1, 3, spec.BasicProperties()).marshal())
    m = raw.expect_connection_close()
    assert m.reply_code == 505
    assert m.reply_text.startswith("UNEXPECTED_FRAME")


def test_method_during_content_505(raw):
    raw.handshake()
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)
    raw.send_method(1, spec.Basic.Publish(exchange="", routing_key=uniq("q")))
    raw.send(frame.Header(1, 10, spec.BasicProperties()).marshal())
    # body expected, a method arrives instead
    raw.send_method(1, spec.Queue.Declare(queue="", exclusive=True))
    m = raw.expect_connection_close()
    assert m.reply_code == 505
    assert m.reply_text.startswith("UNEXPECTED_FRAME")


def test_frame_larger_than_frame_max_501(raw):
    raw.handshake(frame_max=4096)
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)
    q = uniq("q")
    raw.send_method(1, spec.Basic.Publish(exchange="", routing_key=q))
    raw.send(frame.Header(1, 10000, spec.BasicProperties()).marshal())
    raw.send(frame.Body(1, b"x" * 10000).marshal())
    try:
        m = raw.expect_connection_close()
        assert m.reply_code == 501, m
        assert m.reply_text.startswith("FRAME_ERROR")
    except (EOFError, ConnectionResetError):
        pytest.fail("broker closed the socket without connection.close")


def test_unknown_frame_type_closes(raw):
    raw.handshake()
    raw.send(struct.pack(">BHI", 9, 0, 0) + b"\xce")
    try:
        m = raw.expect_connection_close()
        assert m.reply_code == 501, m
        return  # RabbitMQ: connection.close 501 FRAME_ERROR, then close-ok
    except (EOFError, ConnectionResetError):
        pass
    _, closed = read_until_closed(raw.sock)
    assert closed


def test_heartbeat_frame_is_accepted(raw):
    raw.handshake()
    raw.send(frame.Heartbeat().marshal())
    raw.send_method(1, spec.Channel.Open())
    raw.expect_method(spec.Channel.OpenOk)


def test_abrupt_disconnect_then_reconnect():
    c = connect()
    ch = c.channel()
    q = uniq("q")
    ch.queue_declare(q, exclusive=True)
    c._impl._transport._sock.close() if hasattr(c._impl, "_transport") and c._impl._transport else None
    # The exclusive queue is removed once the broker notices the disconnect.
    c2 = connect()
    try:
        deadline = time.monotonic() + 5
        while True:
            ch2 = c2.channel()
            try:
                ch2.queue_declare(q, passive=True)
            except pika.exceptions.ChannelClosedByBroker as e:
                assert e.reply_code in (404, 405)
                if e.reply_code == 404:
                    break
            assert time.monotonic() < deadline, "exclusive queue survived a dead connection"
            c2.sleep(0.05)
    finally:
        c2.close()
