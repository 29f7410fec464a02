#!/usr/bin/env python3
"""kombu smoke test: SimpleQueue round trip and a topic Exchange Producer/Consumer.

Broker URL from AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2F).
Exits 0 on success, 1 on failure. Never hangs: every wait has a timeout.
"""
import os
import socket
import sys
import uuid

from kombu import Connection, Consumer, Exchange, Producer, Queue

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
# kombu/py-amqp spell the default vhost as "/" (a URL path of "//" or "/%2F").
URL = URL.replace("/%2F", "//").replace("/%2f", "//")


def simple_queue_roundtrip(conn):
    name = f"kombu-simple-{uuid.uuid4().hex[:8]}"
    q = conn.SimpleQueue(name, queue_opts={"auto_delete": True})
    try:
        q.put({"hello": "world", "n": 1}, serializer="json")
        msg = q.get(block=True, timeout=5)
        assert msg.payload == {"hello": "world", "n": 1}, msg.payload
        msg.ack()
    finally:
        q.close()  # cancels the consumer; the auto_delete queue goes away
    print("kombu: SimpleQueue put/get ok")


def topic_producer_consumer(conn):
    suffix = uuid.uuid4().hex[:8]
    exchange = Exchange(f"kombu-topic-{suffix}", type="topic", durable=False, auto_delete=True)
    queue = Queue(f"kombu-topic-q-{suffix}", exchange=exchange, routing_key="logs.#",
                  durable=False, auto_delete=True)
    received = []

    def on_message(body, message):
        received.append((message.delivery_info["routing_key"], body))
        message.ack()

    with Consumer(conn, queues=[queue], callbacks=[on_message], accept=["json"]):
        producer = Producer(conn)
        for rk in ("logs.error", "logs.app.info", "metrics.cpu"):
            producer.publish({"rk": rk}, exchange=exchange, routing_key=rk,
                             serializer="json", declare=[queue], retry=False)
        deadline_hits = 0
        while len(received) < 2 and deadline_hits < 50:
            try:
                conn.drain_events(timeout=0.1)
            except socket.timeout:
                deadline_hits += 1
        # Make sure nothing else arrives.
        try:
            conn.drain_events(timeout=0.3)
        except socket.timeout:
            pass
    keys = sorted(rk for rk, _ in received)
    assert keys == ["logs.app.info", "logs.error"], received
    assert all(body == {"rk": rk} for rk, body in received), received
    print("kombu: topic Producer/Consumer ok")


def main():
    with Connection(URL, connect_timeout=5, transport_options={"max_retries": 1}) as conn:
        conn.ensure_connection(max_retries=1)
        simple_queue_roundtrip(conn)
        topic_producer_consumer(conn)
    print("kombu smoke OK")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        print(f"kombu smoke FAILED: {e!r}")
        sys.exit(1)
