"""Exchange types, routing semantics, exchange-to-exchange bindings and errors."""
import pika
import pika.exceptions
import pytest

from conftest import channel_error, connection_error, drain, uniq


def _routed_keys(ch, exchange, queue, keys):
    """Publish one message per key (body = key) and return the bodies that arrived."""
    for k in keys:
        ch.basic_publish(exchange, k, k.encode())
    n = ch.queue_declare(queue, passive=True).method.message_count
    got = drain(ch, queue, n)
    return sorted(b.decode() for _, _, b in got)


@pytest.fixture
def xch(ch, cleanup):
    """A confirmed channel plus a factory for uniquely named exchanges."""
    ch.confirm_delivery()

    def make(xtype, **kw):
        name = uniq("x-" + xtype)
        ch.exchange_declare(name, exchange_type=xtype, **kw)
        cleanup(lambda c: c.exchange_delete(name))
        return name

    return ch, make


@pytest.fixture
def mkq(ch, cleanup):
    def make():
        name = uniq("q")
        ch.queue_declare(name)
        cleanup(lambda c: c.queue_delete(name))
        return name

    return make


# --- direct / fanout ---------------------------------------------------------

def test_direct_routing_exact_key(xch, mkq):
    ch, make = xch
    x = make("direct")
    q1, q2 = mkq(), mkq()
    ch.queue_bind(q1, x, routing_key="k1")
    ch.queue_bind(q2, x, routing_key="k2")
    ch.queue_bind(q2, x, routing_key="k1")
    assert _routed_keys(ch, x, q1, ["k1", "k2", "K1", "k1.x", ""]) == ["k1"]
    assert _routed_keys(ch, x, q2, []) == ["k1", "k2"]


def test_direct_empty_routing_key(xch, mkq):
    ch, make = xch
    x = make("direct")
    q = mkq()
    ch.queue_bind(q, x, routing_key="")
    assert _routed_keys(ch, x, q, ["", "a"]) == [""]


def test_fanout_ignores_routing_key(xch, mkq):
    ch, make = xch
    x = make("fanout")
    q1, q2 = mkq(), mkq()
    ch.queue_bind(q1, x, routing_key="ignored")
    ch.queue_bind(q2, x)
    assert _routed_keys(ch, x, q1, ["a", "b.c", ""]) == ["", "a", "b.c"]
    assert _routed_keys(ch, x, q2, []) == ["", "a", "b.c"]


def test_queue_bound_twice_gets_one_copy(xch, mkq):
    ch, make = xch
    x = make("topic")
    q = mkq()
    ch.queue_bind(q, x, routing_key="a.*")
    ch.queue_bind(q, x, routing_key="#")
    ch.queue_bind(q, x, routing_key="a.b")
    assert _routed_keys(ch, x, q, ["a.b"]) == ["a.b"]


# --- topic -------------------------------------------------------------------

TOPIC_CASES = [
    # pattern, keys that match, keys that do not
    ("a.b", ["a.b"], ["a", "a.b.c", "a.bb", "x.a.b", ""]),
    ("*", ["a", "abc"], ["a.b", ".", ""]),
    ("a.*", ["a.b", "a.", "a.xyz"], ["a", "a.b.c", "b.a"]),
    ("*.b", ["a.b", ".b"], ["b", "a.b.c", "a.a.b"]),
    ("*.*", ["a.b", "."], ["a", "a.b.c"]),
    ("#", ["", "a", "a.b", "a.b.c", "."], []),
    ("a.#", ["a", "a.b", "a.b.c"], ["b", "b.a", "ab"]),
    ("#.a", ["a", "x.a", "x.y.a"], ["a.x", "xa"]),
    ("a.#.b", ["a.b", "a.x.b", "a.x.y.b"], ["a", "b", "a.b.c", "x.a.b"]),
    ("a.*.#", ["a.b", "a.b.c", "a.b.c.d"], ["a", "b.a"]),
    ("#.#", ["", "a", "a.b"], []),
    ("a.#.#.b", ["a.b", "a.x.b", "a.x.y.z.b"], ["a", "a.b.x"]),
    ("#.b.#", ["b", "a.b", "b.c", "a.b.c"], ["a", "a.bb.c"]),
    ("a.*.b", ["a.x.b", "a..b"], ["a.b", "a.x.y.b"]),
    ("*.#.*", ["a.b", "a.b.c"], ["a", ""]),
]


@pytest.mark.parametrize("pattern,yes,no", TOPIC_CASES, ids=[c[0] for c in TOPIC_CASES])
def test_topic_patterns(xch, mkq, pattern, yes, no):
    ch, make = xch
    x = make("topic")
    q = mkq()
    ch.queue_bind(q, x, routing_key=pattern)
    assert _routed_keys(ch, x, q, yes + no) == sorted(yes)


def test_topic_empty_binding_matches_only_empty_key(xch, mkq):
    ch, make = xch
    x = make("topic")
    q = mkq()
    ch.queue_bind(q, x, routing_key="")
    assert _routed_keys(ch, x, q, ["", "a", "."]) == [""]


# --- headers -----------------------------------------------------------------

def _publish_headers(ch, x, tag, headers):
    ch.basic_publish(x, "", tag.encode(), pika.BasicProperties(headers=headers))


def _bodies(ch, q):
    n = ch.queue_declare(q, passive=True).method.message_count
    return sorted(b.decode() for _, _, b in drain(ch, q, n))


def test_headers_x_match_all(xch, mkq):
    ch, make = xch
    x = make("headers")
    q = mkq()
    ch.queue_bind(q, x, arguments={"x-match": "all", "format": "pdf", "type": "report"})
    _publish_headers(ch, x, "both", {"format": "pdf", "type": "report"})
    _publish_headers(ch, x, "extra", {"format": "pdf", "type": "report", "z": 1})
    _publish_headers(ch, x, "one", {"format": "pdf"})
    _publish_headers(ch, x, "wrong", {"format": "pdf", "type": "log"})
    _publish_headers(ch, x, "none", None)
    assert _bodies(ch, q) == ["both", "extra"]


def test_headers_default_is_all(xch, mkq):
    ch, make = xch
    x = make("headers")
    q = mkq()
    ch.queue_bind(q, x, arguments={"a": "1", "b": "2"})
    _publish_headers(ch, x, "both", {"a": "1", "b": "2"})
    _publish_headers(ch, x, "one", {"a": "1"})
    assert _bodies(ch, q) == ["both"]


def test_headers_x_match_any(xch, mkq):
    ch, make = xch
    x = make("headers")
    q = mkq()
    ch.queue_bind(q, x, arguments={"x-match": "any", "format": "pdf", "type": "report"})
    _publish_headers(ch, x, "both", {"format": "pdf", "type": "report"})
    _publish_headers(ch, x, "one", {"format": "pdf"})
    _publish_headers(ch, x, "other", {"type": "report", "q": "r"})
    _publish_headers(ch, x, "wrong", {"format": "zip", "type": "log"})
    _publish_headers(ch, x, "none", {})
    assert _bodies(ch, q) == ["both", "one", "other"]


def test_headers_integer_values_and_empty_binding(xch, mkq):
    ch, make = xch
    x = make("headers")
    qi, qe = mkq(), mkq()
    ch.queue_bind(qi, x, arguments={"x-match": "all", "n": 42})
    ch.queue_bind(qe, x, arguments={"x-match": "all"})  # no headers to match: matches all
    _publish_headers(ch, x, "int", {"n": 42})
    _publish_headers(ch, x, "other", {"n": 43})
    assert _bodies(ch, qi) == ["int"]
    assert _bodies(ch, qe) == ["int", "other"]


# --- exchange-to-exchange ----------------------------------------------------

def test_exchange_to_exchange_binding(xch, mkq):
    ch, make = xch
    src = make("topic")
    dst = make("direct")
    q = mkq()
    ch.exchange_bind(destination=dst, source=src, routing_key="a.*")
    ch.queue_bind(q, dst, routing_key="a.b")
    assert _routed_keys(ch, src, q, ["a.b", "a.c", "b.b"]) == ["a.b"]
    ch.exchange_unbind(destination=dst, source=src, routing_key="a.*")
    assert _routed_keys(ch, src, q, ["a.b"]) == []


def test_exchange_to_exchange_fanout_chain_no_duplicates(xch, mkq):
    ch, make = xch
    a, b = make("fanout"), make("fanout")
    q = mkq()
    ch.exchange_bind(destination=b, source=a)
    ch.queue_bind(q, a)
    ch.queue_bind(q, b)
    assert _routed_keys(ch, a, q, ["k"]) == ["k"]


def test_exchange_bind_missing_source_404(xch):
    ch, make = xch
    dst = make("direct")
    with channel_error(404, "NOT_FOUND"):
        ch.exchange_bind(destination=dst, source=uniq("missing"), routing_key="k")


# --- declare / delete errors ------------------------------------------------

def test_declare_amq_prefix_403(ch):
    with channel_error(403, "ACCESS_REFUSED"):
        ch.exchange_declare("amq.foo-" + uniq(), exchange_type="direct")


def test_passive_declare_builtin_exchanges(ch):
    for name in ["amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"]:
        ch.exchange_declare(name, passive=True)


def test_passive_declare_missing_exchange_404(ch):
    with channel_error(404, "NOT_FOUND"):
        ch.exchange_declare(uniq("missing"), passive=True)


def test_redeclare_with_other_type_406(xch):
    ch, make = xch
    x = make("direct")
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.exchange_declare(x, exchange_type="fanout")


def test_redeclare_with_other_durable_406(xch):
    ch, make = xch
    x = make("direct", durable=False)
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.exchange_declare(x, exchange_type="direct", durable=True)


def test_redeclare_same_is_ok(xch):
    ch, make = xch
    x = make("topic")
    ch.exchange_declare(x, exchange_type="topic")
    ch.exchange_declare(x, passive=True)


def test_declare_unknown_type_is_connection_error_503(conn):
    ch = conn.channel()
    with connection_error(503, "COMMAND_INVALID"):
        ch.exchange_declare(uniq("badtype"), exchange_type="no-such-type")


def test_alternate_exchange(xch, mkq):
    ch, make = xch
    ae = make("fanout")
    x = make("direct", arguments={"alternate-exchange": ae})
    q_main, q_ae = mkq(), mkq()
    ch.queue_bind(q_main, x, routing_key="known")
    ch.queue_bind(q_ae, ae)
    ch.basic_publish(x, "known", b"known")
    ch.basic_publish(x, "unknown", b"unknown")
    assert _bodies(ch, q_main) == ["known"]
    assert _bodies(ch, q_ae) == ["unknown"]


def test_alternate_exchange_makes_mandatory_publish_routable(xch, mkq):
    ch, make = xch
    ae = make("fanout")
    x = make("direct", arguments={"alternate-exchange": ae})
    q_ae = mkq()
    ch.queue_bind(q_ae, ae)
    ch.basic_publish(x, "nowhere", b"m", mandatory=True)  # no UnroutableError
    assert _bodies(ch, q_ae) == ["m"]


def test_delete_missing_exchange_is_ok(ch):
    # RabbitMQ 3.x replies delete-ok for a missing exchange (no 404).
    ch.exchange_delete(uniq("missing"))
    assert ch.is_open


def test_delete_exchange_if_unused_406(xch, mkq):
    ch, make = xch
    x = make("direct")
    q = mkq()
    ch.queue_bind(q, x, routing_key="k")
    with channel_error(406, "PRECONDITION_FAILED"):
        ch.exchange_delete(x, if_unused=True)


def test_delete_exchange_removes_bindings(xch, mkq):
    ch, make = xch
    x = make("fanout")
    q = mkq()
    ch.queue_bind(q, x)
    ch.exchange_delete(x)
    ch.exchange_declare(x, exchange_type="fanout")
    ch.basic_publish(x, "", b"after")
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_delete_builtin_exchange_403(ch):
    with channel_error(403, "ACCESS_REFUSED"):
        ch.exchange_delete("amq.direct")


def test_publish_to_missing_exchange_404(ch):
    with channel_error(404, "NOT_FOUND"):
        ch.basic_publish(uniq("missing"), "k", b"x")
        # basic.publish has no reply; force a round trip to observe the close.
        ch.queue_declare("", exclusive=True)


def test_publish_to_internal_exchange_403(xch, mkq):
    ch, make = xch
    x = make("fanout", internal=True)
    with channel_error(403, "ACCESS_REFUSED"):
        ch.basic_publish(x, "", b"x")
        ch.queue_declare("", exclusive=True)


def test_internal_exchange_reachable_via_e2e(xch, mkq):
    ch, make = xch
    internal = make("fanout", internal=True)
    front = make("fanout")
    q = mkq()
    ch.exchange_bind(destination=internal, source=front)
    ch.queue_bind(q, internal)
    ch.basic_publish(front, "", b"via")
    assert _bodies(ch, q) == ["via"]


def test_auto_delete_exchange_removed_after_last_unbind(conn, ch, mkq):
    x = uniq("x-ad")
    ch.exchange_declare(x, exchange_type="direct", auto_delete=True)
    q = mkq()
    ch.queue_bind(q, x, routing_key="k")
    ch.queue_unbind(q, x, routing_key="k")
    with channel_error(404, "NOT_FOUND"):
        conn.channel().exchange_declare(x, passive=True)
