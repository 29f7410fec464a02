//! The binding and definitions endpoints of the management API, driven with
//! reqwest (and lapin, to check that bindings route) against the in-process server.

use crate::common::api::*;
use crate::common::*;
use lapin::ExchangeKind;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// RabbitMQ's own hash of the password `guest`.
const GUEST_HASH: &str = "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+";

fn len(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

fn keys(v: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["properties_key"].as_str())
        .collect();
    out.sort();
    out
}

/// `v` with every array sorted by the text of its elements, so that two exports
/// compare equal whatever order they list things in.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Array(a) => {
            let mut items: Vec<Value> = a.iter().map(normalized).collect();
            items.sort_by_cached_key(Value::to_string);
            Value::Array(items)
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), normalized(v))).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn binding_endpoints() {
    let mut b = start().await;
    let api = Api::new(&b);
    let (q, x, y) = (uniq("bq"), uniq("bx"), uniq("by"));
    assert_eq!(
        api.put(&format!("/api/queues/%2F/{q}"), json!({"durable": true})).await,
        StatusCode::CREATED
    );
    for (name, kind) in [(&x, "topic"), (&y, "fanout")] {
        assert_eq!(
            api.put(&format!("/api/exchanges/%2F/{name}"), json!({"type": kind}))
                .await,
            StatusCode::CREATED
        );
    }
    let eq = format!("/api/bindings/%2F/e/{x}/q/{q}");

    // Exchange to queue: 201 with the binding's path in Location.
    let (status, location) = api.post(&eq, json!({"routing_key": "k1"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let location = location.expect("Location header");
    assert_eq!(location, format!("{eq}/k1"));
    let shown = api.get_ok(&location).await;
    assert_eq!(
        shown,
        json!({"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
               "routing_key": "k1", "arguments": {}, "properties_key": "k1"})
    );
    // Binding again is fine and adds nothing.
    assert_eq!(api.post(&eq, json!({"routing_key": "k1"})).await.0, StatusCode::CREATED);
    // A key with characters RabbitMQ quotes, arguments, and an empty key.
    let (status, location) = api.post(&eq, json!({"routing_key": "logs.*"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let location = location.expect("Location header");
    assert!(location.ends_with("/logs.%252A"), "{location}");
    assert_eq!(api.get_ok(&location).await["properties_key"], "logs.%2A");
    // The properties key sent as it is, not encoded once more, finds it too.
    assert_eq!(api.get_ok(&format!("{eq}/logs.%2A")).await["routing_key"], "logs.*");
    let (status, location) = api
        .post(&eq, json!({"routing_key": "k1", "arguments": {"x-note": "a"}}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let location = location.expect("Location header");
    let with_args = api.get_ok(&location).await;
    assert_eq!(with_args["arguments"], json!({"x-note": "a"}));
    let args_key = with_args["properties_key"]
        .as_str()
        .expect("properties_key")
        .to_string();
    assert!(args_key.starts_with("k1~") && args_key.len() == 9, "{args_key}");
    assert!(location.ends_with(&format!("/{args_key}")), "{location}");
    let (status, location) = api.post(&eq, json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(location.as_deref(), Some(format!("{eq}/~").as_str()));
    assert_eq!(api.get_ok(&format!("{eq}/~")).await["routing_key"], "");

    let between = api.get_ok(&eq).await;
    assert_eq!(keys(&between), ["k1", args_key.as_str(), "logs.%2A", "~"]);

    // The queue's bindings start with the implicit one of the default exchange.
    let of_queue = api.get_ok(&format!("/api/queues/%2F/{q}/bindings")).await;
    assert_eq!(len(&of_queue), 5);
    assert_eq!(
        of_queue[0],
        json!({"source": "", "vhost": "/", "destination": q, "destination_type": "queue",
               "routing_key": q, "arguments": {}, "properties_key": q})
    );
    assert_eq!(
        len(&api.get_ok(&format!("/api/exchanges/%2F/{x}/bindings/source")).await),
        4
    );
    let from_default = api.get_ok("/api/exchanges/%2F/amq.default/bindings/source").await;
    assert!(from_default.as_array().unwrap().iter().any(|b| b["destination"] == q));

    // Exchange to exchange.
    let ee = format!("/api/bindings/%2F/e/{x}/e/{y}");
    let (status, location) = api.post(&ee, json!({"routing_key": "r"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(location.as_deref(), Some(format!("{ee}/r").as_str()));
    let to_y = api
        .get_ok(&format!("/api/exchanges/%2F/{y}/bindings/destination"))
        .await;
    assert_eq!(
        to_y,
        json!([{"source": x, "vhost": "/", "destination": y, "destination_type": "exchange",
                "routing_key": "r", "arguments": {}, "properties_key": "r"}])
    );
    assert_eq!(
        api.get_ok(&format!("/api/exchanges/%2F/{x}/bindings/destination"))
            .await,
        json!([])
    );
    assert_eq!(len(&api.get_ok(&ee).await), 1);
    assert_eq!(api.get_ok(&format!("{ee}/r")).await["destination_type"], "exchange");

    // Vhost and broker-wide lists.
    let in_vhost = api.get_ok("/api/bindings/%2F").await;
    let mine = |all: &Value| {
        all.as_array()
            .unwrap()
            .iter()
            .filter(|b| b["destination"] == q || b["destination"] == y)
            .count()
    };
    assert_eq!(mine(&in_vhost), 6);
    assert_eq!(mine(&api.get_ok("/api/bindings").await), 6);

    // The default exchange: its implicit binding is listed but cannot be changed.
    let default_q = format!("/api/bindings/%2F/e/amq.default/q/{q}");
    assert_eq!(len(&api.get_ok(&default_q).await), 1);
    assert_eq!(api.get_ok(&format!("{default_q}/{q}")).await["source"], "");
    assert_eq!(api.delete(&format!("{default_q}/{q}")).await, StatusCode::FORBIDDEN);
    assert_eq!(
        api.post(&default_q, json!({"routing_key": "x"})).await.0,
        StatusCode::FORBIDDEN
    );

    // Deletion.
    assert_eq!(api.delete(&format!("{ee}/r")).await, StatusCode::NO_CONTENT);
    assert_eq!(api.delete(&format!("{ee}/r")).await, StatusCode::NOT_FOUND);
    assert_eq!(api.get(&format!("{ee}/r")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(api.delete(&format!("{eq}/k1")).await, StatusCode::NO_CONTENT);
    assert_eq!(api.delete(&format!("{eq}/~")).await, StatusCode::NO_CONTENT);
    assert_eq!(keys(&api.get_ok(&eq).await), [args_key.as_str(), "logs.%2A"]);
    assert_eq!(api.delete(&format!("{eq}/{args_key}")).await, StatusCode::NO_CONTENT);
    assert_eq!(keys(&api.get_ok(&eq).await), ["logs.%2A"]);

    // Durable bindings made and removed through the API stay so after a restart.
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(keys(&api.get_ok(&eq).await), ["logs.%2A"]);
    assert_eq!(api.get_ok(&ee).await, json!([]));
}

#[tokio::test]
async fn binding_errors_and_access() {
    let b = start().await;
    let api = Api::new(&b);
    let (q, x, h) = (uniq("eq"), uniq("ex"), uniq("eh"));
    assert_eq!(
        api.put(&format!("/api/queues/%2F/{q}"), json!({})).await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put(&format!("/api/exchanges/%2F/{x}"), json!({"type": "direct"}))
            .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put(&format!("/api/exchanges/%2F/{h}"), json!({"type": "headers"}))
            .await,
        StatusCode::CREATED
    );
    let eq = format!("/api/bindings/%2F/e/{x}/q/{q}");
    assert_eq!(api.post(&eq, json!({"routing_key": "k"})).await.0, StatusCode::CREATED);

    // 404: missing vhost, exchange, queue or binding.
    for path in [
        "/api/bindings/nope".to_string(),
        format!("/api/bindings/nope/e/{x}/q/{q}"),
        format!("/api/bindings/%2F/e/missing/q/{q}"),
        format!("/api/bindings/%2F/e/{x}/q/missing"),
        format!("/api/bindings/%2F/e/{x}/e/missing"),
        format!("/api/bindings/%2F/e/missing/e/{x}"),
        format!("{eq}/nokey"),
        format!("{eq}/k~AAAAAA"),
        format!("/api/bindings/%2F/e/{x}/e/{x}/k"),
        "/api/exchanges/%2F/missing/bindings/source".to_string(),
        "/api/exchanges/%2F/missing/bindings/destination".to_string(),
        "/api/exchanges/nope/amq.direct/bindings/source".to_string(),
        "/api/queues/%2F/missing/bindings".to_string(),
        "/api/queues/nope/x/bindings".to_string(),
    ] {
        assert_eq!(api.get(&path).await.0, StatusCode::NOT_FOUND, "GET {path}");
    }
    for path in [
        format!("/api/bindings/nope/e/{x}/q/{q}"),
        format!("/api/bindings/%2F/e/missing/q/{q}"),
        format!("/api/bindings/%2F/e/{x}/q/missing"),
        format!("/api/bindings/%2F/e/{x}/e/missing"),
    ] {
        assert_eq!(
            api.post(&path, json!({"routing_key": "k"})).await.0,
            StatusCode::NOT_FOUND,
            "POST {path}"
        );
    }
    for path in [format!("{eq}/nokey"), format!("/api/bindings/%2F/e/{x}/q/missing/k")] {
        assert_eq!(api.delete(&path).await, StatusCode::NOT_FOUND, "DELETE {path}");
    }

    // 400: bodies that are not a binding, arguments a headers exchange refuses.
    for body in ["{", "[1]", r#"{"routing_key": 1}"#, r#"{"arguments": 5}"#] {
        let (status, _, err) = api.raw(Method::POST, &eq, GUEST, Some(body.to_string())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(err["error"], "bad_request");
    }
    let bad_match = json!({"arguments": {"x-match": "some"}});
    assert_eq!(
        api.post(&format!("/api/bindings/%2F/e/{h}/q/{q}"), bad_match).await.0,
        StatusCode::BAD_REQUEST
    );

    // 401 without or with wrong credentials.
    for auth in [None, Some(("guest", "wrong"))] {
        assert_eq!(
            api.call(Method::GET, "/api/bindings", auth, None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            api.call(Method::POST, &eq, auth, Some(json!({}))).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            api.call(Method::DELETE, &format!("{eq}/k"), auth, None).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    // 403 for a management user without access to the vhost; it sees nothing.
    assert_eq!(
        api.put("/api/users/outsider", json!({"password": "pw", "tags": "management"}))
            .await,
        StatusCode::CREATED
    );
    let outsider = Some(("outsider", "pw"));
    let (status, _, all) = api.raw(Method::GET, "/api/bindings", outsider, None).await;
    assert_eq!((status, all), (StatusCode::OK, json!([])));
    for path in ["/api/bindings/%2F".to_string(), eq.clone(), format!("{eq}/k")] {
        assert_eq!(
            api.call(Method::GET, &path, outsider, None).await.0,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    assert_eq!(
        api.call(Method::GET, &format!("/api/queues/%2F/{q}/bindings"), outsider, None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        api.call(Method::POST, &eq, outsider, Some(json!({"routing_key": "o"})))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        api.call(Method::DELETE, &format!("{eq}/k"), outsider, None).await.0,
        StatusCode::FORBIDDEN
    );
    // With permissions on the vhost the same user may.
    let perm = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(
        api.put("/api/permissions/%2F/outsider", perm).await,
        StatusCode::CREATED
    );
    assert_eq!(api.call(Method::GET, &eq, outsider, None).await.0, StatusCode::OK);
    assert_eq!(
        api.call(Method::DELETE, &format!("{eq}/k"), outsider, None).await.0,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn bindings_over_amqp_and_api_agree() {
    let b = start().await;
    let api = Api::new(&b);
    let (conn, ch) = b.channel().await;
    let (q, x, f) = (uniq("aq"), uniq("ax"), uniq("af"));
    declare_queue(&ch, &q).await;
    for (name, kind) in [(&x, ExchangeKind::Direct), (&f, ExchangeKind::Fanout)] {
        ch.exchange_declare(
            name.as_str().into(),
            kind,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("exchange.declare");
    }
    let mut args = FieldTable::default();
    args.insert("x-tag".into(), long_str("t"));
    for table in [FieldTable::default(), args] {
        ch.queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            "rk".into(),
            QueueBindOptions::default(),
            table,
        )
        .await
        .expect("queue.bind");
    }
    // Bindings made over AMQP are listed.
    let listed = api.get_ok(&format!("/api/bindings/%2F/e/{x}/q/{q}")).await;
    assert_eq!(len(&listed), 2);
    let tagged = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["arguments"] == json!({"x-tag": "t"}))
        .expect("binding with arguments");
    assert!(
        tagged["properties_key"].as_str().unwrap().starts_with("rk~"),
        "{tagged}"
    );
    assert!(listed.as_array().unwrap().iter().any(|b| b["properties_key"] == "rk"));

    // Bindings made through the API route.
    confirm_select(&ch).await;
    let direct = format!("/api/bindings/%2F/e/amq.direct/q/{q}");
    assert_eq!(
        api.post(&direct, json!({"routing_key": "via-api"})).await.0,
        StatusCode::CREATED
    );
    publish_confirmed(&ch, "amq.direct", "via-api", b"one").await;
    assert_eq!(drain(&ch, &q).await, [b"one".to_vec()]);
    let to_f = format!("/api/bindings/%2F/e/{f}/q/{q}");
    assert_eq!(api.post(&to_f, json!({})).await.0, StatusCode::CREATED);
    let x_to_f = format!("/api/bindings/%2F/e/{x}/e/{f}");
    assert_eq!(
        api.post(&x_to_f, json!({"routing_key": "e2e"})).await.0,
        StatusCode::CREATED
    );
    publish_confirmed(&ch, &x, "e2e", b"two").await;
    assert_eq!(drain(&ch, &q).await, [b"two".to_vec()]);
    // ...and stop routing once deleted through the API.
    assert_eq!(api.delete(&format!("{direct}/via-api")).await, StatusCode::NO_CONTENT);
    assert_eq!(api.delete(&format!("{x_to_f}/e2e")).await, StatusCode::NO_CONTENT);
    publish_confirmed(&ch, "amq.direct", "via-api", b"lost").await;
    publish_confirmed(&ch, &x, "e2e", b"lost").await;
    assert!(drain(&ch, &q).await.is_empty());
    // The AMQP-made bindings still route.
    publish_confirmed(&ch, &x, "rk", b"three").await;
    assert_eq!(drain(&ch, &q).await, [b"three".to_vec()]);

    // An exclusive queue of a client stays locked to the API.
    let excl = uniq("excl");
    ch.queue_declare(
        excl.as_str().into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    let to_excl = format!("/api/bindings/%2F/e/amq.direct/q/{excl}");
    assert_eq!(
        api.post(&to_excl, json!({"routing_key": "k"})).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(len(&api.get_ok(&format!("/api/queues/%2F/{excl}/bindings")).await), 1);
    conn.close(200, "bye".into()).await.ok();
}

/// Sets up entities of every kind on `api`'s broker, in vhost `defs` and `/`.
async fn populate(api: &Api) {
    assert_eq!(api.put("/api/vhosts/defs", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        api.put(
            "/api/users/alice",
            json!({"password": "s3cret", "tags": "monitoring,management"})
        )
        .await,
        StatusCode::CREATED
    );
    let all = json!({"configure": ".*", "write": ".*", "read": ".*"});
    for path in ["/api/permissions/defs/alice", "/api/permissions/defs/guest"] {
        assert_eq!(api.put(path, all.clone()).await, StatusCode::CREATED);
    }
    let policy = json!({"pattern": "^dq$", "definition": {"max-length": 5}, "apply-to": "queues", "priority": 2});
    assert_eq!(api.put("/api/policies/defs/small", policy).await, StatusCode::CREATED);
    let op = json!({"pattern": ".*", "definition": {"message-ttl": 60000}, "apply-to": "queues"});
    assert_eq!(api.put("/api/operator-policies/%2F/ttl", op).await, StatusCode::CREATED);
    for (name, body) in [
        ("dq", json!({"durable": true, "arguments": {"x-max-length": 10}})),
        ("qq", json!({"durable": true, "arguments": {"x-queue-type": "quorum"}})),
        ("tq", json!({"durable": false})),
    ] {
        assert_eq!(
            api.put(&format!("/api/queues/defs/{name}"), body).await,
            StatusCode::CREATED
        );
    }
    for (name, body) in [
        (
            "dx",
            json!({"type": "topic", "arguments": {"alternate-exchange": "ae"}}),
        ),
        ("ae", json!({"type": "fanout"})),
        ("tx", json!({"type": "direct", "durable": false})),
    ] {
        assert_eq!(
            api.put(&format!("/api/exchanges/defs/{name}"), body).await,
            StatusCode::CREATED
        );
    }
    for (path, body) in [
        ("/api/bindings/defs/e/dx/q/dq", json!({"routing_key": "a.#"})),
        (
            "/api/bindings/defs/e/dx/q/dq",
            json!({"routing_key": "b", "arguments": {"x-n": 1}}),
        ),
        ("/api/bindings/defs/e/amq.topic/q/qq", json!({"routing_key": "z"})),
        ("/api/bindings/defs/e/dx/e/ae", json!({"routing_key": "c"})),
        ("/api/bindings/defs/e/dx/q/tq", json!({"routing_key": "t"})),
        ("/api/bindings/defs/e/tx/q/dq", json!({"routing_key": "t"})),
    ] {
        assert_eq!(api.post(path, body).await.0, StatusCode::CREATED, "{path}");
    }
    assert_eq!(
        api.put("/api/queues/%2F/rootq", json!({"durable": true})).await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post("/api/bindings/%2F/e/amq.direct/q/rootq", json!({"routing_key": "root"}))
            .await
            .0,
        StatusCode::CREATED
    );
}

fn names(list: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["name"].as_str())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn definitions_export_and_import_round_trip() {
    let b1 = start().await;
    let api1 = Api::new(&b1);
    populate(&api1).await;
    let export = api1.get_ok("/api/definitions").await;
    assert_eq!(export["product_name"], "LavinMQ");
    assert!(export["rabbit_version"].is_string());
    assert_eq!(names(&export["users"]), ["alice", "guest"]);
    let alice = export["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "alice")
        .unwrap();
    assert_eq!(alice["tags"], json!(["monitoring", "management"]));
    assert_eq!(alice["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert!(alice["password_hash"].is_string());
    assert_eq!(names(&export["vhosts"]), ["/", "defs"]);
    assert_eq!(len(&export["permissions"]), 3);
    assert_eq!(names(&export["policies"]), ["small"]);
    assert_eq!(names(&export["operator_policies"]), ["ttl"]);
    // Durable, non-default things only.
    assert_eq!(names(&export["queues"]), ["dq", "qq", "rootq"]);
    let dq = export["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "dq")
        .unwrap();
    assert_eq!(
        dq,
        &json!({"name": "dq", "vhost": "defs", "type": "classic", "durable": true, "auto_delete": false,
                "arguments": {"x-max-length": 10}})
    );
    assert_eq!(names(&export["exchanges"]), ["ae", "dx"]);
    let bindings = export["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 5, "{bindings:?}");
    assert!(bindings.iter().all(|b| b["source"] != "" && b["source"] != "tx"));
    assert!(bindings.iter().all(|b| b["destination"] != "tq"));
    assert!(
        bindings.contains(&json!({"source": "dx", "vhost": "defs", "destination": "ae",
        "destination_type": "exchange", "routing_key": "c", "arguments": {}}))
    );

    // One vhost: no users, vhosts or permissions, and no vhost fields.
    let one = api1.get_ok("/api/definitions/defs").await;
    for key in ["users", "vhosts", "permissions"] {
        assert!(one.get(key).is_none(), "{key} in {one}");
    }
    assert_eq!(names(&one["queues"]), ["dq", "qq"]);
    assert_eq!(len(&one["bindings"]), 4);
    for key in ["queues", "exchanges", "bindings", "policies"] {
        assert!(
            one[key].as_array().unwrap().iter().all(|x| x.get("vhost").is_none()),
            "{key}: {one}"
        );
    }

    // Into a fresh broker: the same export, also after a second import and a restart.
    let mut b2 = start().await;
    let api2 = Api::new(&b2);
    let (status, _, err) = api2
        .raw(Method::POST, "/api/definitions", GUEST, Some(export.to_string()))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{err}");
    assert_eq!(normalized(&api2.get_ok("/api/definitions").await), normalized(&export));
    assert_eq!(
        api2.call(Method::POST, "/api/definitions", GUEST, Some(export.clone()))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(normalized(&api2.get_ok("/api/definitions").await), normalized(&export));
    b2.restart().await;
    let api2 = Api::new(&b2);
    assert_eq!(normalized(&api2.get_ok("/api/definitions").await), normalized(&export));

    // The imported user logs in; the imported bindings and policies work.
    let (status, _, me) = api2
        .raw(Method::GET, "/api/whoami", Some(("alice", "s3cret")), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["tags"], json!(["monitoring", "management"]));
    assert_eq!(api2.get_ok("/api/queues/defs/dq").await["policy"], "small");
    let conn = b2.connect_url(&b2.url_for("guest", "guest", "defs")).await;
    let ch = within("channel.open", conn.create_channel()).await.expect("channel");
    confirm_select(&ch).await;
    publish_confirmed(&ch, "dx", "a.x", b"via-topic").await;
    publish_confirmed(&ch, "dx", "b", b"via-b").await;
    assert_eq!(drain(&ch, "dq").await, [b"via-topic".to_vec(), b"via-b".to_vec()]);
    conn.close(200, "bye".into()).await.ok();

    // A vhost export imported into another vhost gives the same vhost export.
    assert_eq!(api2.put("/api/vhosts/copy", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        api2.call(Method::POST, "/api/definitions/copy", GUEST, Some(one.clone()))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        normalized(&api2.get_ok("/api/definitions/copy").await),
        normalized(&one)
    );
}

#[tokio::test]
async fn definitions_errors_and_access() {
    let b = start().await;
    let api = Api::new(&b);
    for (method, path) in [
        (Method::GET, "/api/definitions"),
        (Method::POST, "/api/definitions"),
        (Method::GET, "/api/definitions/%2F"),
        (Method::POST, "/api/definitions/%2F"),
    ] {
        let body = (method == Method::POST).then(|| json!({}));
        assert_eq!(
            api.call(method.clone(), path, None, body.clone()).await.0,
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
        assert_eq!(
            api.call(method.clone(), path, Some(("guest", "nope")), body).await.0,
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
    }
    // Administrators only: monitoring and management users are refused.
    for (user, tags) in [("mon", "monitoring"), ("mgr", "management")] {
        assert_eq!(
            api.put(&format!("/api/users/{user}"), json!({"password": "pw", "tags": tags}))
                .await,
            StatusCode::CREATED
        );
        assert_eq!(
            api.call(Method::GET, "/api/definitions", Some((user, "pw")), None)
                .await
                .0,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            api.call(Method::GET, "/api/definitions/%2F", Some((user, "pw")), None)
                .await
                .0,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            api.call(Method::POST, "/api/definitions", Some((user, "pw")), Some(json!({})))
                .await
                .0,
            StatusCode::FORBIDDEN
        );
    }
    assert_eq!(api.get("/api/definitions/nope").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        api.call(Method::POST, "/api/definitions/nope", GUEST, Some(json!({})))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    // An empty document is fine; malformed ones are 400 with a reason.
    assert_eq!(
        api.call(Method::POST, "/api/definitions", GUEST, Some(json!({})))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    for body in [
        "{".to_string(),
        json!({"queues": "no"}).to_string(),
        json!({"queues": [{"name": "q", "vhost": "missing"}]}).to_string(),
        json!({"exchanges": [{"name": "x", "type": "no-such-type"}]}).to_string(),
        json!({"bindings": [{"source": "amq.direct", "destination": "missing", "destination_type": "queue"}]})
            .to_string(),
        json!({"bindings": [{"source": "amq.direct", "destination": "x", "destination_type": "topic"}]}).to_string(),
        json!({"users": [{"name": "nohash"}]}).to_string(),
        json!({"permissions": [{"user": "ghost", "vhost": "/", "configure": "", "write": "", "read": ""}]}).to_string(),
        json!({"policies": [{"vhost": "/", "name": "p", "pattern": ".*", "definition": {"bogus": 1}}]}).to_string(),
    ] {
        let (status, _, err) = api
            .raw(Method::POST, "/api/definitions", GUEST, Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert!(err["reason"].as_str().is_some_and(|r| !r.is_empty()), "{err}");
    }
}

/// Consistent-hash exchanges in LavinMQ's exported definitions (marked by
/// `lavinmq_version`) keep LavinMQ's placement: `x-algorithm = "ring"` is
/// written in unless the exchange names one. RabbitMQ's definitions get
/// RabbitMQ's placement, the default.
#[tokio::test]
async fn lavinmq_definitions_keep_lavinmq_consistent_hash_placement() {
    let b = start().await;
    let api = Api::new(&b);
    let exchange = |name: &str, arguments: Value| {
        json!({"name": name, "vhost": "/", "type": "x-consistent-hash", "durable": true,
               "auto_delete": false, "internal": false, "arguments": arguments})
    };
    let lavinmq = json!({"lavinmq_version": "2.9.1", "exchanges": [
        exchange("from-lavinmq", json!({})), exchange("jump", json!({"x-algorithm": "jump"}))]});
    let rabbitmq = json!({"rabbitmq_version": "4.1.0", "exchanges": [exchange("from-rabbitmq", json!({}))]});
    for file in [lavinmq, rabbitmq] {
        assert_eq!(
            api.call(Method::POST, "/api/definitions", GUEST, Some(file)).await.0,
            StatusCode::NO_CONTENT
        );
    }
    let arguments = |name: &str| {
        let api = &api;
        let path = format!("/api/exchanges/%2F/{name}");
        async move { api.get_ok(&path).await["arguments"].clone() }
    };
    assert_eq!(arguments("from-lavinmq").await, json!({"x-algorithm": "ring"}));
    assert_eq!(arguments("jump").await, json!({"x-algorithm": "jump"}));
    assert_eq!(arguments("from-rabbitmq").await, json!({}));
}

#[tokio::test]
async fn a_file_with_a_bad_item_applies_nothing_and_names_every_problem() {
    let b = start().await;
    let api = Api::new(&b);
    let good = json!({
        "vhosts": [{"name": "v2"}],
        "users": [{"name": "u1", "password": "pw", "tags": ""}],
        "permissions": [{"user": "u1", "vhost": "v2", "configure": ".*", "write": ".*", "read": ".*"}],
        "exchanges": [{"name": "ex", "vhost": "v2", "type": "direct", "durable": true, "auto_delete": false,
                       "internal": false, "arguments": {}}],
        "queues": [{"name": "good", "vhost": "v2", "durable": true, "auto_delete": false, "arguments": {}}],
        "bindings": [{"source": "ex", "vhost": "v2", "destination": "good", "destination_type": "queue",
                      "routing_key": "k", "arguments": {}}]
    });
    let mut bad = good.clone();
    bad["queues"].as_array_mut().unwrap().push(
        json!({"name": "bad", "vhost": "v2", "durable": true, "auto_delete": false,
               "arguments": {"x-max-length": "many"}}),
    );
    bad["bindings"].as_array_mut().unwrap().push(
        json!({"source": "ex", "vhost": "v2", "destination": "ghost", "destination_type": "queue",
               "routing_key": "", "arguments": {}}),
    );
    let (status, _, err) = api
        .raw(Method::POST, "/api/definitions", GUEST, Some(bad.to_string()))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let reason = err["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("2 problems"), "{reason}");
    assert!(reason.contains("queue 'bad' in vhost 'v2'"), "{reason}");
    assert!(reason.contains("no queue 'ghost'"), "{reason}");
    // Nothing of the file was applied, not even the items before the bad ones.
    for path in [
        "/api/vhosts/v2",
        "/api/users/u1",
        "/api/queues/v2/good",
        "/api/exchanges/v2/ex",
    ] {
        assert_eq!(api.get(path).await.0, StatusCode::NOT_FOUND, "{path}");
    }
    // The same file without its bad items applies whole: its items may refer
    // to each other (a binding to a queue the file declares).
    assert_eq!(
        api.call(Method::POST, "/api/definitions", GUEST, Some(good)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(keys(&api.get_ok("/api/bindings/v2/e/ex/q/good").await), ["k"]);
    assert_eq!(api.get_ok("/api/permissions/v2/u1").await["configure"], ".*");
}

/// Posts `file` as a browser form would (multipart, field `file`), with a
/// `Referer` when given; returns the status and the `Location` header.
async fn post_form(
    api: &Api,
    path: &str,
    auth: (&str, &str),
    file: &str,
    referer: Option<&str>,
) -> (StatusCode, Option<String>) {
    let boundary = "----lavinmq-test-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"defs.json\"\r\n\
         Content-Type: application/json\r\n\r\n{file}\r\n--{boundary}--\r\n"
    );
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut req = client
        .post(format!("{}{path}", api.base))
        .basic_auth(auth.0, Some(auth.1))
        .header("content-type", format!("multipart/form-data; boundary={boundary}"))
        .body(body);
    if let Some(r) = referer {
        req = req.header("referer", r);
    }
    let resp = within("form upload", req.send()).await.expect("request");
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    (resp.status(), location)
}

#[tokio::test]
async fn definitions_upload_from_a_browser_form() {
    let b = start().await;
    let api = Api::new(&b);
    let file = json!({"queues": [{"name": "from-form", "vhost": "/", "durable": true, "auto_delete": false,
                                  "arguments": {}}]})
    .to_string();
    let back = "http://localhost:15672/definitions";
    assert_eq!(
        post_form(&api, "/api/definitions/upload", ("guest", "guest"), &file, Some(back)).await,
        (StatusCode::SEE_OTHER, Some(back.to_string()))
    );
    api.get_ok("/api/queues/%2F/from-form").await;
    // Into one vhost (the items' own vhost is ignored); no Referer: 204.
    assert_eq!(api.put("/api/vhosts/formed", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        post_form(&api, "/api/definitions/formed/upload", ("guest", "guest"), &file, None).await,
        (StatusCode::NO_CONTENT, None)
    );
    api.get_ok("/api/queues/formed/from-form").await;
    // A file that is not definitions, a missing vhost, a user who is no administrator.
    assert_eq!(
        post_form(&api, "/api/definitions/upload", ("guest", "guest"), "{", None)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post_form(&api, "/api/definitions/nope/upload", ("guest", "guest"), &file, None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.put("/api/users/mgr", json!({"password": "pw", "tags": "management"}))
            .await,
        StatusCode::CREATED
    );
    assert_eq!(
        post_form(&api, "/api/definitions/upload", ("mgr", "pw"), &file, None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
}

/// A definitions file as RabbitMQ 3.10 exports it, edited by hand (user tags in
/// both the list and the older comma-separated form).
fn rabbitmq_export() -> Value {
    json!({
        "rabbit_version": "3.10.7",
        "rabbitmq_version": "3.10.7",
        "product_name": "RabbitMQ",
        "product_version": "3.10.7",
        "users": [
            {"name": "admin2", "password_hash": GUEST_HASH, "hashing_algorithm": "rabbit_password_hashing_sha256",
             "tags": ["administrator"], "limits": {}},
            {"name": "old", "password_hash": GUEST_HASH, "hashing_algorithm": "rabbit_password_hashing_sha256",
             "tags": "monitoring,management"}
        ],
        "vhosts": [{"name": "/"}, {"name": "shop", "limits": [], "metadata": {"description": "", "tags": []}}],
        "permissions": [
            {"user": "admin2", "vhost": "shop", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "guest", "vhost": "shop", "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x1"}],
        "policies": [
            {"vhost": "shop", "name": "orders-limit", "pattern": "^orders$", "apply-to": "queues",
             "definition": {"max-length": 100}, "priority": 0},
            {"vhost": "shop", "name": "ha-all", "pattern": ".*", "apply-to": "queues",
             "definition": {"ha-mode": "all", "ha-sync-mode": "automatic", "queue-mode": "lazy"}, "priority": -1}
        ],
        "queues": [
            {"name": "orders", "vhost": "shop", "durable": true, "auto_delete": false,
             "arguments": {"x-queue-type": "classic"}},
            {"name": "audit", "vhost": "shop", "durable": true, "auto_delete": false,
             "arguments": {"x-queue-type": "quorum"}},
            {"name": "events", "vhost": "shop", "type": "stream", "durable": true, "auto_delete": false,
             "arguments": {}}
        ],
        "exchanges": [
            {"name": "shop.events", "vhost": "shop", "type": "topic", "durable": true, "auto_delete": false,
             "internal": false, "arguments": {}},
            {"name": "shop.audit", "vhost": "shop", "type": "fanout", "durable": true, "auto_delete": false,
             "internal": true, "arguments": {}}
        ],
        "bindings": [
            {"source": "shop.events", "vhost": "shop", "destination": "orders", "destination_type": "queue",
             "routing_key": "order.*", "arguments": {}},
            {"source": "shop.events", "vhost": "shop", "destination": "shop.audit",
             "destination_type": "exchange", "routing_key": "#", "arguments": {}},
            {"source": "shop.audit", "vhost": "shop", "destination": "audit", "destination_type": "queue",
             "routing_key": "", "arguments": {}}
        ]
    })
}

#[tokio::test]
async fn imports_a_rabbitmq_export() {
    let b = start().await;
    let api = Api::new(&b);
    let file = rabbitmq_export();
    assert_eq!(
        api.call(Method::POST, "/api/definitions", GUEST, Some(file.clone()))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    for (user, tags) in [
        ("admin2", json!(["administrator"])),
        ("old", json!(["monitoring", "management"])),
    ] {
        let (status, _, me) = api.raw(Method::GET, "/api/whoami", Some((user, "guest")), None).await;
        assert_eq!(status, StatusCode::OK, "{user}");
        assert_eq!(me["tags"], tags);
    }
    let orders = api.get_ok("/api/queues/shop/orders").await;
    assert_eq!(orders["arguments"], json!({"x-queue-type": "classic"}));
    assert_eq!(orders["policy"], "orders-limit");
    // Mirroring and lazy-queue keys are kept (and exported again) though they
    // change nothing here.
    let ha = api.get_ok("/api/policies/shop/ha-all").await;
    assert_eq!(
        ha["definition"],
        json!({"ha-mode": "all", "ha-sync-mode": "automatic", "queue-mode": "lazy"})
    );
    let exported = api.get_ok("/api/definitions").await;
    assert!(
        exported["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "ha-all"),
        "{exported}"
    );
    assert_eq!(api.get_ok("/api/queues/shop/audit").await["type"], "quorum");
    assert_eq!(api.get_ok("/api/queues/shop/events").await["type"], "stream");
    assert_eq!(api.get_ok("/api/exchanges/shop/shop.audit").await["internal"], true);
    let to_orders = api.get_ok("/api/bindings/shop/e/shop.events/q/orders").await;
    assert_eq!(keys(&to_orders), ["order.%2A"]);
    let to_audit = api.get_ok("/api/exchanges/shop/shop.audit/bindings/destination").await;
    assert_eq!(to_audit[0]["source"], "shop.events");

    // Importing it again changes nothing.
    assert_eq!(
        api.call(Method::POST, "/api/definitions", GUEST, Some(file)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(len(&api.get_ok("/api/bindings/shop").await), 3 + 3);

    // Messages follow the imported bindings.
    let conn = b.connect_url(&b.url_for("guest", "guest", "shop")).await;
    let ch = within("channel.open", conn.create_channel()).await.expect("channel");
    confirm_select(&ch).await;
    publish_confirmed(&ch, "shop.events", "order.new", b"o1").await;
    assert_eq!(drain(&ch, "orders").await, [b"o1".to_vec()]);
    eventually("audit copy", || async {
        api.get_ok("/api/queues/shop/audit").await["messages"] == 1
    })
    .await;
    conn.close(200, "bye".into()).await.ok();
}

/// What RabbitMQ's management clients send and read that RabbitMQ accepts:
/// collection URLs with a trailing slash, `"arguments": []` for no
/// arguments, and each vhost's `cluster_state`.
#[tokio::test]
async fn inputs_management_clients_send_as_rabbitmq_takes_them() {
    let b = start().await;
    let api = Api::new(&b);
    let (q, x) = (uniq("tq"), uniq("tx"));
    assert_eq!(
        api.put(
            &format!("/api/queues/%2F/{q}/"),
            json!({"durable": true, "arguments": []})
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put(
            &format!("/api/exchanges/%2F/{x}"),
            json!({"type": "direct", "arguments": []})
        )
        .await,
        StatusCode::CREATED
    );
    let (status, location) = api
        .post(
            &format!("/api/bindings/%2F/e/{x}/q/{q}/"),
            json!({"routing_key": "k", "arguments": []}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(location.expect("Location header").ends_with("/k"));
    // A non-empty list is still no table.
    let (status, _) = api
        .post(&format!("/api/bindings/%2F/e/{x}/q/{q}"), json!({"arguments": [1]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    for path in [
        "/api/users/",
        "/api/permissions/",
        "/api/bindings/",
        "/api/vhosts/",
        "/api/queues/",
    ] {
        let listed = api.get_ok(path).await;
        assert_eq!(listed, api.get_ok(path.trim_end_matches('/')).await, "{path}");
        assert!(len(&listed) > 0, "{path}: {listed}");
    }
    let queues = api.get_ok("/api/queues/%2F/?columns=name").await;
    assert!(queues.as_array().unwrap().iter().any(|v| v["name"] == q), "{queues}");
    let binding = api.get_ok(&format!("/api/bindings/%2F/e/{x}/q/{q}/")).await;
    assert_eq!(binding[0]["routing_key"], "k", "{binding}");

    let vhost = api.get_ok("/api/vhosts/%2F").await;
    let state = vhost["cluster_state"].as_object().expect("cluster_state");
    assert_eq!(state.len(), 1, "{vhost}");
    assert!(state.values().all(|s| s == "running"), "{vhost}");
    let node = api.get_ok("/api/overview").await["node"].clone();
    assert_eq!(state.keys().next().map(String::as_str), node.as_str(), "{vhost}");
}
