#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/seeds/<target>/: small valid inputs of each
format, from which the fuzzer mutates. Run again after changing it; the
seeds are committed."""
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def seed(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def shortstr(s):
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack(">I", len(b)) + b


def table(entries):
    body = b""
    for k, tag, v in entries:
        body += shortstr(k) + tag + v
    return struct.pack(">I", len(body)) + body


SAMPLE_TABLE = table([
    ("x-max-length", b"l", struct.pack(">q", 1000)),
    ("x-queue-type", b"S", longstr("quorum")),
    ("flag", b"t", b"\x01"),
    ("ratio", b"d", struct.pack(">d", 0.5)),
    ("nested", b"F", table([("a", b"I", struct.pack(">i", -7))])),
    ("list", b"A", struct.pack(">I", 5) + b"b\x05" + b"V" + b"s\x00\x02"),
    ("when", b"T", struct.pack(">Q", 1700000000)),
    ("dec", b"D", b"\x02" + struct.pack(">i", 12345)),
    ("raw", b"x", longstr(b"\x00\x01\x02")),
])


def method(channel, cls, mid, args):
    payload = struct.pack(">HH", cls, mid) + args
    return b"\x01" + struct.pack(">HI", channel, len(payload)) + payload + b"\xce"


def header(channel, body_size, props):
    payload = struct.pack(">HHQ", 60, 0, body_size) + props
    return b"\x02" + struct.pack(">HI", channel, len(payload)) + payload + b"\xce"


def body(channel, data):
    return b"\x03" + struct.pack(">HI", channel, len(data)) + data + b"\xce"


# Properties: content-type, headers, delivery-mode, priority, expiration.
PROPS = struct.pack(">H", 0x8000 | 0x2000 | 0x1000 | 0x0800 | 0x0100) + shortstr("text/plain") + SAMPLE_TABLE + b"\x02\x05" + shortstr("60000")

start_ok = method(0, 10, 11, table([("product", b"S", longstr("fuzz")), ("capabilities", b"F", table([("publisher_confirms", b"t", b"\x01")]))]) + shortstr("PLAIN") + longstr(b"\x00guest\x00guest") + shortstr("en_US"))
seed("amqp_frame", "handshake", start_ok + method(0, 10, 31, struct.pack(">HIH", 2047, 131072, 60)) + method(0, 10, 40, shortstr("/") + b"\x00\x00"))
seed("amqp_frame", "publish", method(1, 20, 10, shortstr("")) + method(1, 60, 40, b"\x00\x00" + shortstr("amq.topic") + shortstr("a.b") + b"\x00") + header(1, 5, PROPS) + body(1, b"hello"))
# Starting with the publish itself: what the publish fast path takes whole.
seed("amqp_frame", "publish_whole", method(1, 60, 40, b"\x00\x00" + shortstr("") + shortstr("q") + b"\x01") + header(1, 5, PROPS) + body(1, b"hello") + method(1, 60, 40, b"\x00\x00" + shortstr("x") + shortstr("") + b"\x00") + header(1, 0, PROPS))
seed("amqp_frame", "declare", method(1, 50, 10, b"\x00\x00" + shortstr("q") + b"\x02" + SAMPLE_TABLE) + method(1, 40, 10, b"\x00\x00" + shortstr("x") + shortstr("x-consistent-hash") + b"\x00" + table([])))
seed("amqp_frame", "consume_ack", method(1, 60, 20, b"\x00\x00" + shortstr("q") + shortstr("tag") + b"\x00" + table([("x-priority", b"I", struct.pack(">i", 3))])) + method(1, 60, 80, struct.pack(">Q", 1) + b"\x01") + b"\x08\x00\x00\x00\x00\x00\x00\xce")
seed("field_table", "table", SAMPLE_TABLE)
seed("field_table", "properties", PROPS)


def varint(n):
    out = b""
    while True:
        byte = n % 128
        n //= 128
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def packet(first, body):
    return bytes([first]) + varint(len(body)) + body


def mstr(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack(">H", len(b)) + b


connect4 = packet(0x10, mstr("MQTT") + b"\x04\xc6" + struct.pack(">H", 60) + mstr("client") + mstr("will/t") + mstr("bye") + mstr("guest") + mstr("guest"))
seed("mqtt_packet", "v311", b"\x01" + connect4 + packet(0x82, b"\x00\x01" + mstr("a/+/c") + b"\x01") + packet(0x32, mstr("a/b/c") + b"\x00\x02" + b"payload") + packet(0x40, b"\x00\x02") + b"\xc0\x00" + b"\xe0\x00")
props5 = varint(7) + b"\x11" + struct.pack(">I", 3600) + b"\x21" + struct.pack(">H", 10)
connect5 = packet(0x10, mstr("MQTT") + b"\x05\x02" + struct.pack(">H", 30) + props5 + mstr("c5"))
pub_props = varint(3) + b"\x23" + struct.pack(">H", 1)
seed("mqtt_packet", "v5", b"\x02" + connect5 + packet(0x82, b"\x00\x01" + varint(0) + mstr("$share/g/x/#") + b"\x01") + packet(0x32, mstr("x/y") + b"\x00\x07" + pub_props + b"hi") + packet(0xe0, b"\x00" + varint(0)))
seed("mqtt_packet", "v31", b"\x00" + packet(0x10, mstr("MQIsdp") + b"\x03\x02" + struct.pack(">H", 10) + mstr("old")))

with open(os.path.join(HERE, "..", "extras", "lavinmq.ini")) as f:
    example = f.read()
seed("ini_config", "example", "\n".join(l[1:] if l.startswith(";") else l for l in example.splitlines()))
seed("ini_config", "small", "[main]\ndata_dir = /tmp/x\nvm_memory_high_watermark.absolute = 2GiB\n[amqp]\nport = 5673\n[sni:example.com]\namqp_tls_cert = /c.pem\n[clustering]\nenabled = true\n")

definitions = {
    "rabbit_version": "3.13.0",
    "users": [{"name": "u", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"], "limits": {"max-connections": 5}}],
    "vhosts": [{"name": "/"}, {"name": "v", "limits": {"max-queues": 3}}],
    "permissions": [{"user": "u", "vhost": "v", "configure": ".*", "write": ".*", "read": ".*"}],
    "topic_permissions": [{"user": "u", "vhost": "v", "exchange": "amq.topic", "write": "^a", "read": ".*"}],
    "parameters": [{"vhost": "v", "component": "shovel", "name": "s", "value": {"src-uri": "amqp://", "src-queue": "q1", "dest-uri": "amqp://", "dest-queue": "q2"}}],
    "global_parameters": [{"name": "cluster_name", "value": "fuzz"}],
    "policies": [{"vhost": "v", "name": "p", "pattern": "^q", "apply-to": "queues", "priority": 1, "definition": {"max-length": 10, "message-ttl": 1000, "dead-letter-exchange": "dlx"}}],
    "queues": [{"name": "q1", "vhost": "v", "durable": True, "auto_delete": False, "arguments": {"x-max-priority": 5}}, {"name": "s1", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {"x-queue-type": "stream"}}],
    "exchanges": [{"name": "dlx", "vhost": "v", "type": "fanout", "durable": True, "auto_delete": False, "internal": False, "arguments": {}}, {"name": "h", "vhost": "v", "type": "x-consistent-hash", "durable": True, "auto_delete": False, "internal": False, "arguments": {}}],
    "bindings": [{"source": "dlx", "vhost": "v", "destination": "q1", "destination_type": "queue", "routing_key": "", "arguments": {}}],
}
seed("definitions_json", "full", json.dumps(definitions, indent=1))
seed("definitions_json", "empty", "{}")

seed("proxy_header", "v1", b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 5672\r\nAMQP\x00\x00\x09\x01")
seed("proxy_header", "v1_unknown", b"PROXY UNKNOWN\r\n")
v2_sig = b"\r\n\r\n\x00\r\nQUIT\n"
addr4 = bytes([192, 168, 0, 1, 10, 0, 0, 2]) + struct.pack(">HH", 56324, 5672)
tlv = b"\x01" + struct.pack(">H", 2) + b"h2"
seed("proxy_header", "v2_tcp4", v2_sig + b"\x21\x11" + struct.pack(">H", len(addr4) + len(tlv)) + addr4 + tlv)
addr6 = bytes(range(16)) + bytes(range(16, 32)) + struct.pack(">HH", 1, 2)
seed("proxy_header", "v2_tcp6", v2_sig + b"\x21\x21" + struct.pack(">H", len(addr6)) + addr6)
seed("proxy_header", "v2_local", v2_sig + b"\x20\x00\x00\x00")


def record(exchange, key, props, data, ts=1700000000000, crc_seed=0):
    payload = struct.pack("<q", ts) + shortstr(exchange) + shortstr(key) + struct.pack("<I", len(props)) + props + struct.pack("<Q", len(data)) + data
    return struct.pack("<II", len(payload), zlib.crc32(payload, crc_seed)) + payload


def segment_file(version):
    """Format 1: plain checksums. Format 2: seeded with the segment number (1 here)."""
    data = struct.pack("<I", version)
    positions = []
    for i in range(4):
        positions.append(len(data))
        data += record("amq.direct", "k%d" % i, PROPS if i % 2 else b"\x00\x00", b"body %d" % i, crc_seed=0 if version == 1 else 1)
    return data, positions


segment, positions = segment_file(1)
acks = struct.pack("<I", positions[1])
seed("segment_recovery", "segment", struct.pack("<H", len(segment)) + segment + acks)
seed("segment_recovery", "torn", struct.pack("<H", len(segment) - 5) + segment[:-5])
segment, positions = segment_file(2)
seed("segment_recovery", "segment_v2", struct.pack("<H", len(segment)) + segment + struct.pack("<I", positions[2]))


def ws_frame(payload, opcode=2, fin=True, mask=b"\x00\x00\x00\x00"):
    """A client's WebSocket frame (clients mask theirs)."""
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 65536:
        length = bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack(">Q", n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([(0x80 if fin else 0) | opcode]) + length + mask + masked


amqp_login = [b"AMQP\x00\x00\x09\x01", start_ok, method(0, 10, 31, struct.pack(">HIH", 0, 131072, 0)), method(0, 10, 40, shortstr("/") + b"\x00\x00")]
amqp_work = [
    method(1, 20, 10, shortstr("")),
    method(1, 50, 10, b"\x00\x00" + shortstr("") + b"\x0c" + table([])),
    method(1, 60, 40, b"\x00\x00" + shortstr("") + shortstr("q") + b"\x00"),
    header(1, 5, PROPS),
    body(1, b"hello"),
    method(0, 10, 50, struct.pack(">H", 200) + shortstr("") + struct.pack(">HH", 0, 0)),
]
close_frame = ws_frame(struct.pack(">H", 1000), opcode=8)
# The first byte picks the path: even "/" (AMQP), odd "/mqtt".
seed("websocket_adapter", "amqp_whole", b"\x00" + ws_frame(b"".join(amqp_login + amqp_work)))
seed("websocket_adapter", "amqp_frame_per_message", b"\x00" + b"".join(ws_frame(f) for f in amqp_login + amqp_work))
first, rest = b"".join(amqp_login)[:20], b"".join(amqp_login)[20:]
seed("websocket_adapter", "amqp_fragmented_ping", b"\x00" + ws_frame(first, fin=False) + ws_frame(b"p", opcode=9) + ws_frame(rest, opcode=0) + close_frame)
seed("websocket_adapter", "amqp_text_masked", b"\x00" + ws_frame(b"".join(amqp_login), opcode=1, mask=b"\x12\x34\x56\x78"))
mqtt_session = [
    packet(0x10, mstr("MQTT") + b"\x04\x02" + struct.pack(">H", 0) + mstr("fuzz")),
    packet(0x82, b"\x00\x01" + mstr("a/b") + b"\x01"),
    packet(0x32, mstr("a/b") + b"\x00\x02" + b"hi"),
    b"\xc0\x00",
    b"\xe0\x00",
]
seed("websocket_adapter", "mqtt_whole", b"\x01" + ws_frame(b"".join(mqtt_session)))
seed("websocket_adapter", "mqtt_packet_per_message", b"\x01" + b"".join(ws_frame(p) for p in mqtt_session))
seed("websocket_adapter", "mqtt_split_close", b"\x01" + ws_frame(mqtt_session[0][:5]) + ws_frame(mqtt_session[0][5:] + mqtt_session[1]) + close_frame)
seed("websocket_adapter", "unmasked", b"\x01" + bytes([0x82, len(mqtt_session[0])]) + mqtt_session[0])


# --- AMQP 1.0: frames as a client sends them ---------------------------------
def amqp1_frame(body, kind=0, channel=0):
    return struct.pack(">IBBH", 8 + len(body), 2, kind, channel) + body


def amqp1_list(code, fields):
    inner = b"".join(fields)
    return b"\x00\x53" + bytes([code]) + b"\xc0" + bytes([len(inner) + 1, len(fields)]) + inner


def amqp1_str(s):
    b = s.encode()
    return b"\xa1" + bytes([len(b)]) + b


def amqp1_sym(s):
    b = s.encode()
    return b"\xa3" + bytes([len(b)]) + b


AMQP1_INIT = amqp1_frame(amqp1_list(0x41, [amqp1_sym("PLAIN"), b"\xa0\x0c\x00guest\x00guest"]), kind=1)
AMQP1_OPEN = amqp1_frame(amqp1_list(0x10, [amqp1_str("client"), amqp1_str("vhost:/"), b"\x70\x00\x01\x00\x00"]))
AMQP1_BEGIN = amqp1_frame(amqp1_list(0x11, [b"\x40", b"\x43", b"\x70\x00\x00\x13\x88", b"\x70\x00\x00\x13\x88"]))
AMQP1_ATTACH = amqp1_frame(amqp1_list(0x12, [amqp1_str("sender"), b"\x43", b"\x42", b"\x50\x02", b"\x50\x00",
                                             amqp1_list(0x28, [b"\x40"]), amqp1_list(0x29, [amqp1_str("/queues/q")])]))
AMQP1_MESSAGE = (amqp1_list(0x70, [b"\x41"]) + amqp1_list(0x73, [amqp1_str("id-1"), b"\x40", amqp1_str("/queues/q"), amqp1_str("subject")])
                 + b"\x00\x53\x74\xc1\x07\x02" + amqp1_str("k") + amqp1_str("v")
                 + b"\x00\x53\x75\xa0\x05hello")
AMQP1_TRANSFER = amqp1_frame(amqp1_list(0x14, [b"\x43", b"\x43", b"\xa0\x01\x00", b"\x43", b"\x42"]) + AMQP1_MESSAGE)
AMQP1_DISPOSITION = amqp1_frame(amqp1_list(0x15, [b"\x41", b"\x43", b"\x52\x05", b"\x41", amqp1_list(0x24, [])]))
seed("amqp1_frame", "handshake", AMQP1_INIT + AMQP1_OPEN + AMQP1_BEGIN)
seed("amqp1_frame", "publish", AMQP1_ATTACH + AMQP1_TRANSFER + AMQP1_DISPOSITION)


# --- RabbitMQ stream protocol: frames as a client sends them -----------------
def sframe(key, fields, version=1):
    body = struct.pack(">HH", key, version) + fields
    return struct.pack(">I", len(body)) + body


def sstr(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def sbytes(b):
    return struct.pack(">i", len(b)) + b


def sarray(items):
    return struct.pack(">i", len(items)) + b"".join(items)


def smap(pairs):
    return sarray([sstr(k) + sstr(v) for k, v in pairs])


STREAM_MESSAGE = b"\x00\x53\x75\xa0\x05hello"
STREAM_MESSAGE_PROPS = AMQP1_MESSAGE
STREAM_PEER_PROPERTIES = sframe(17, struct.pack(">I", 1) + smap([("product", "fuzz"), ("version", "1.0"), ("connection_name", "c")]))
STREAM_SASL_HANDSHAKE = sframe(18, struct.pack(">I", 2))
STREAM_SASL_AUTHENTICATE = sframe(19, struct.pack(">I", 3) + sstr("PLAIN") + sbytes(b"\x00guest\x00guest"))
STREAM_TUNE = sframe(20, struct.pack(">II", 1048576, 60))
STREAM_OPEN = sframe(21, struct.pack(">I", 4) + sstr("/"))
STREAM_DECLARE_PUBLISHER = sframe(1, struct.pack(">IB", 5, 0) + sstr("producer-1") + sstr("s"))
STREAM_PUBLISH_V1 = sframe(2, b"\x00" + sarray([struct.pack(">Q", 1) + sbytes(STREAM_MESSAGE), struct.pack(">Q", 2) + sbytes(STREAM_MESSAGE_PROPS)]))
STREAM_PUBLISH_V2 = sframe(2, b"\x00" + sarray([struct.pack(">Q", 3) + sstr("red") + sbytes(STREAM_MESSAGE), struct.pack(">Q", 4) + sstr(None) + sbytes(STREAM_MESSAGE_PROPS)]), version=2)
STREAM_SUBSCRIBE = sframe(7, struct.pack(">IB", 6, 1) + sstr("s") + struct.pack(">HQ", 4, 42) + struct.pack(">H", 10) + smap([("name", "consumer"), ("single-active-consumer", "true"), ("filter.0", "red"), ("match-unfiltered", "true")]))
STREAM_SUBSCRIBE_OLD = sframe(7, struct.pack(">IB", 7, 2) + sstr("s") + struct.pack(">H", 1) + struct.pack(">H", 1))
STREAM_SUBSCRIBE_TIMESTAMP = sframe(7, struct.pack(">IB", 8, 3) + sstr("s") + struct.pack(">Hq", 5, 1700000000000) + struct.pack(">H", 2) + smap([]))
STREAM_CREDIT = sframe(9, struct.pack(">BH", 1, 5))
STREAM_STORE_OFFSET = sframe(10, sstr("consumer") + sstr("s") + struct.pack(">Q", 42))
STREAM_QUERY_OFFSET = sframe(11, struct.pack(">I", 9) + sstr("consumer") + sstr("s"))
STREAM_METADATA = sframe(15, struct.pack(">I", 10) + sarray([sstr("s"), sstr("missing")]))
STREAM_CREATE = sframe(13, struct.pack(">I", 11) + sstr("s") + smap([("x-queue-type", "stream"), ("max-length-bytes", "1000000"), ("stream-max-segment-size-bytes", "500000")]))
STREAM_CREATE_SUPER_STREAM = sframe(29, struct.pack(">I", 12) + sstr("orders") + sarray([sstr("orders-0"), sstr("orders-1")]) + sarray([sstr("0"), sstr("1")]) + smap([("max-age", "1h")]))
STREAM_CLOSE = sframe(22, struct.pack(">IH", 13, 1) + sstr("bye"))
STREAM_HEARTBEAT = sframe(23, b"")
seed("stream_frame", "handshake", STREAM_PEER_PROPERTIES + STREAM_SASL_HANDSHAKE + STREAM_SASL_AUTHENTICATE + struct.pack(">I", 12) + struct.pack(">HH", 0x8014, 1) + struct.pack(">II", 1048576, 60) + STREAM_OPEN)
seed("stream_frame", "publish", STREAM_DECLARE_PUBLISHER + STREAM_PUBLISH_V1 + STREAM_PUBLISH_V2)
seed("stream_frame", "subscribe", STREAM_SUBSCRIBE + STREAM_CREDIT + STREAM_STORE_OFFSET + STREAM_QUERY_OFFSET + STREAM_SUBSCRIBE_OLD + STREAM_SUBSCRIBE_TIMESTAMP)
seed("stream_frame", "manage", STREAM_METADATA + STREAM_CREATE + STREAM_CREATE_SUPER_STREAM)
seed("stream_frame", "close", STREAM_HEARTBEAT + STREAM_CLOSE + sframe(0x8016, struct.pack(">IH", 13, 1)))
seed("stream_frame", "tune", STREAM_TUNE + STREAM_HEARTBEAT)
# The remaining commands, once each.
seed("stream_frame", "others", b"".join([
    sframe(5, struct.pack(">I", 14) + sstr("producer-1") + sstr("s")),
    sframe(6, struct.pack(">IB", 15, 0)),
    sframe(12, struct.pack(">IB", 16, 1)),
    sframe(14, struct.pack(">I", 17) + sstr("s")),
    sframe(24, struct.pack(">I", 18) + sstr("key") + sstr("orders")),
    sframe(25, struct.pack(">I", 19) + sstr("orders")),
    sframe(0x801a, struct.pack(">IH", 20, 1) + struct.pack(">H", 3)),
    sframe(27, struct.pack(">I", 21) + sarray([struct.pack(">HHH", 2, 1, 2), struct.pack(">HHH", 7, 1, 2)])),
    sframe(28, struct.pack(">I", 22) + sstr("s")),
    sframe(30, struct.pack(">I", 23) + sstr("orders")),
]))
