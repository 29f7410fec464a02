//! Runtime parameters, global parameters, vhost limits and vhost metadata in
//! the management API: RabbitMQ's shapes and status codes, persistence across
//! restarts, definitions export and import, and the limits enforced on AMQP
//! clients. Shovels and federation upstreams, defined as parameters, are in
//! [`shovel`] and [`federation`].

mod federation;
mod shovel;

use crate::common::api::*;
use crate::common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Items of a JSON list sorted by their text, for order-free comparison.
fn sorted(v: &Value) -> Vec<Value> {
    let mut items = v.as_array().cloned().unwrap_or_default();
    items.sort_by_cached_key(Value::to_string);
    items
}

/// Creates a user with `tags` and full permissions in vhost `/`.
async fn add_user(api: &Api, name: &str, tags: &str) {
    let status = api
        .put(&format!("/api/users/{name}"), json!({"password": "pw", "tags": tags}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let status = api
        .put(
            &format!("/api/permissions/%2F/{name}"),
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        )
        .await;
    assert!(status.is_success(), "{status}");
}

/// Sends `method` to `path` as `user` (password `pw`); returns the status.
async fn status_as(api: &Api, method: Method, path: &str, user: &str, body: Option<Value>) -> StatusCode {
    api.call(method, path, Some((user, "pw")), body).await.0
}

#[tokio::test]
async fn vhost_parameters_crud_and_persistence() {
    let mut b = start().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok("/api/parameters").await, json!([]));
    assert_eq!(api.put("/api/vhosts/other", json!({})).await, StatusCode::CREATED);
    let up = "/api/parameters/federation-upstream/%2F/up1";
    let value = json!({"uri": "amqp://upstream", "prefetch-count": 10});
    assert_eq!(api.put(up, json!({"value": value})).await, StatusCode::CREATED);
    let value = json!({"uri": "amqp://upstream2"});
    assert_eq!(api.put(up, json!({"value": value})).await, StatusCode::NO_CONTENT);
    assert_eq!(
        api.put(
            "/api/parameters/shovel/other/sh1",
            json!({"component": "shovel", "vhost": "other", "name": "sh1", "value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}})
        )
        .await,
        StatusCode::CREATED
    );
    let item = json!({"name": "up1", "vhost": "/", "component": "federation-upstream", "value": value});
    let shovel = json!({"name": "sh1", "vhost": "other", "component": "shovel", "value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}});
    assert_eq!(api.get_ok(up).await, item);
    assert_eq!(
        sorted(&api.get_ok("/api/parameters").await),
        sorted(&json!([item, shovel]))
    );
    assert_eq!(api.get_ok("/api/parameters/federation-upstream").await, json!([item]));
    assert_eq!(
        api.get_ok("/api/parameters/federation-upstream/%2F").await,
        json!([item])
    );
    assert_eq!(api.get_ok("/api/parameters/shovel/%2F").await, json!([]));
    assert_eq!(api.get_ok("/api/parameters/shovel/other").await, json!([shovel]));
    assert_eq!(api.get_ok("/api/parameters/unknown-component").await, json!([]));

    // 404s: unknown name, unknown vhost; 400s: no value, not JSON.
    assert_eq!(
        api.get("/api/parameters/federation-upstream/%2F/nope").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get("/api/parameters/shovel/no-vhost").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.put("/api/parameters/shovel/no-vhost/x", json!({"value": 1})).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.delete("/api/parameters/shovel/%2F/nope").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.put("/api/parameters/shovel/%2F/x", json!({"name": "x"})).await,
        StatusCode::BAD_REQUEST
    );
    let (status, _, _) = api
        .raw(Method::PUT, "/api/parameters/shovel/%2F/x", GUEST, Some("{oops".into()))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Persisted with the vhost's definitions.
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(
        sorted(&api.get_ok("/api/parameters").await),
        sorted(&json!([item, shovel]))
    );
    assert_eq!(api.delete(up).await, StatusCode::NO_CONTENT);
    assert_eq!(api.get(up).await.0, StatusCode::NOT_FOUND);
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok("/api/parameters").await, json!([shovel]));
}

#[tokio::test]
async fn vhost_parameters_need_policymaker() {
    let b = start().await;
    let api = Api::new(&b);
    add_user(&api, "pm", "policymaker").await;
    add_user(&api, "mgmt", "management").await;
    assert_eq!(api.put("/api/vhosts/closed", json!({})).await, StatusCode::CREATED);
    let path = "/api/parameters/shovel/%2F/p";
    let body =
        Some(json!({"value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}}));
    assert_eq!(
        status_as(&api, Method::PUT, path, "mgmt", body.clone()).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status_as(&api, Method::GET, "/api/parameters", "mgmt", None).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status_as(&api, Method::PUT, path, "pm", body.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(status_as(&api, Method::GET, path, "pm", None).await, StatusCode::OK);
    // A policymaker without access to a vhost may not touch its parameters.
    assert_eq!(
        status_as(&api, Method::PUT, "/api/parameters/shovel/closed/p", "pm", body).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status_as(&api, Method::DELETE, path, "mgmt", None).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status_as(&api, Method::DELETE, path, "pm", None).await,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn global_parameters_crud_and_persistence() {
    let mut b = start().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok("/api/global-parameters").await, json!([]));
    let path = "/api/global-parameters/cluster_name";
    assert_eq!(api.put(path, json!({"value": "alpha"})).await, StatusCode::CREATED);
    assert_eq!(
        api.put(path, json!({"name": "cluster_name", "value": "beta"})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.put("/api/global-parameters/limits", json!({"value": {"n": 1}}))
            .await,
        StatusCode::CREATED
    );
    assert_eq!(api.get_ok(path).await, json!({"name": "cluster_name", "value": "beta"}));
    let all = json!([{"name": "cluster_name", "value": "beta"}, {"name": "limits", "value": {"n": 1}}]);
    assert_eq!(api.get_ok("/api/global-parameters").await, all);
    assert_eq!(api.get("/api/global-parameters/nope").await.0, StatusCode::NOT_FOUND);
    assert_eq!(api.delete("/api/global-parameters/nope").await, StatusCode::NOT_FOUND);
    assert_eq!(api.put(path, json!({})).await, StatusCode::BAD_REQUEST);

    // Administrators only.
    add_user(&api, "pm", "policymaker").await;
    for (method, body) in [
        (Method::GET, None),
        (Method::PUT, Some(json!({"value": 1}))),
        (Method::DELETE, None),
    ] {
        assert_eq!(status_as(&api, method, path, "pm", body).await, StatusCode::FORBIDDEN);
    }
    assert_eq!(
        status_as(&api, Method::GET, "/api/global-parameters", "pm", None).await,
        StatusCode::FORBIDDEN
    );

    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok("/api/global-parameters").await, all);
    assert_eq!(api.delete(path).await, StatusCode::NO_CONTENT);
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(
        api.get_ok("/api/global-parameters").await,
        json!([{"name": "limits", "value": {"n": 1}}])
    );
}

#[tokio::test]
async fn vhost_metadata_is_stored_and_shown() {
    let mut b = start().await;
    let api = Api::new(&b);
    let body = json!({"description": "orders of the shop", "tags": "prod,eu", "default_queue_type": "quorum"});
    assert_eq!(api.put("/api/vhosts/shop", body).await, StatusCode::CREATED);
    let v = api.get_ok("/api/vhosts/shop").await;
    assert_eq!(v["description"], "orders of the shop");
    assert_eq!(v["tags"], json!(["prod", "eu"]));
    assert_eq!(v["default_queue_type"], "quorum");
    assert_eq!(
        v["metadata"],
        json!({"description": "orders of the shop", "tags": ["prod", "eu"], "default_queue_type": "quorum"})
    );
    // An update changes what it gives and keeps the rest.
    assert_eq!(
        api.put("/api/vhosts/shop", json!({"description": "the shop"})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.put("/api/vhosts/shop", json!({"tags": ["prod"]})).await,
        StatusCode::NO_CONTENT
    );
    b.restart().await;
    let api = Api::new(&b);
    let list = api.get_ok("/api/vhosts").await;
    let shop = list
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "shop")
        .expect("shop listed")
        .clone();
    assert_eq!(shop["description"], "the shop");
    assert_eq!(shop["tags"], json!(["prod"]));
    assert_eq!(shop["default_queue_type"], "quorum");
    let root = api.get_ok("/api/vhosts/%2F").await;
    assert_eq!((&root["description"], &root["tags"]), (&json!(""), &json!([])));
    let (status, _, _) = api
        .raw(Method::PUT, "/api/vhosts/shop", GUEST, Some("{bad".into()))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn vhost_limit_endpoints() {
    let mut b = start().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok("/api/vhost-limits").await, json!([]));
    assert_eq!(api.get_ok("/api/vhost-limits/%2F").await, json!([]));
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-queues", json!({"value": 10})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-connections", json!({"value": 5}))
            .await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(api.put("/api/vhosts/v2", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        api.put("/api/vhost-limits/v2/max-queues", json!({"value": -1})).await,
        StatusCode::NO_CONTENT
    );
    let root = json!({"vhost": "/", "value": {"max-connections": 5, "max-queues": 10}});
    let v2 = json!({"vhost": "v2", "value": {"max-queues": -1}});
    assert_eq!(api.get_ok("/api/vhost-limits/%2F").await, json!([root]));
    assert_eq!(api.get_ok("/api/vhost-limits").await, json!([root, v2]));

    // Errors: unknown limit or vhost, a value that is no integer, not an administrator.
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-channels", json!({"value": 1})).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-queues", json!({"value": "lots"}))
            .await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-queues", json!({})).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        api.put("/api/vhost-limits/nope/max-queues", json!({"value": 1})).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(api.get("/api/vhost-limits/nope").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        api.delete("/api/vhost-limits/nope/max-queues").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.delete("/api/vhost-limits/%2F/max-channels").await,
        StatusCode::NOT_FOUND
    );
    add_user(&api, "mon", "monitoring").await;
    assert_eq!(
        status_as(
            &api,
            Method::PUT,
            "/api/vhost-limits/%2F/max-queues",
            "mon",
            Some(json!({"value": 1}))
        )
        .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status_as(&api, Method::GET, "/api/vhost-limits", "mon", None).await,
        StatusCode::OK
    );

    // Stored with the vhost list.
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok("/api/vhost-limits").await, json!([root, v2]));
    assert_eq!(
        api.delete("/api/vhost-limits/%2F/max-queues").await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.delete("/api/vhost-limits/%2F/max-queues").await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.delete("/api/vhost-limits/v2/max-queues").await,
        StatusCode::NO_CONTENT
    );
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(
        api.get_ok("/api/vhost-limits").await,
        json!([{"vhost": "/", "value": {"max-connections": 5}}])
    );
}

#[tokio::test]
async fn max_queues_is_enforced() {
    let b = start().await;
    let api = Api::new(&b);
    assert_eq!(api.put("/api/vhosts/lim", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        api.put(
            "/api/permissions/lim/guest",
            json!({"configure": ".*", "write": ".*", "read": ".*"})
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put("/api/vhost-limits/lim/max-queues", json!({"value": 2})).await,
        StatusCode::NO_CONTENT
    );
    let conn = b.connect_url(&b.url_for("guest", "guest", "lim")).await;
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    declare_queue(&ch, "q1").await;
    assert_eq!(api.put("/api/queues/lim/q2", json!({})).await, StatusCode::CREATED);
    // Declaring an existing queue is no new queue.
    declare_queue(&ch, "q1").await;

    let mut ev = events(&conn);
    let res = ch
        .queue_declare("q3".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await;
    assert_code(res, 406);
    let text = expect_error(&mut ev, 406).await;
    assert_eq!(
        text,
        "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in virtual host 'lim' is reached"
    );
    let (status, body) = api
        .call(Method::PUT, "/api/queues/lim/q3", GUEST, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["reason"],
        "cannot declare queue 'q3': queue limit in virtual host 'lim' is reached"
    );
    // Server-named queues count too.
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    assert_code(
        ch.queue_declare("".into(), QueueDeclareOptions::default(), FieldTable::default())
            .await,
        406,
    );

    // Room again after a delete; none of it after a negative limit.
    assert_eq!(api.delete("/api/queues/lim/q2").await, StatusCode::NO_CONTENT);
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    declare_queue(&ch, "q3").await;
    assert_eq!(
        api.put("/api/vhost-limits/lim/max-queues", json!({"value": -1})).await,
        StatusCode::NO_CONTENT
    );
    for q in ["q4", "q5", "q6"] {
        declare_queue(&ch, q).await;
    }
    // Other vhosts are not limited.
    let (_c, root) = b.channel().await;
    for q in ["r1", "r2", "r3"] {
        declare_queue(&root, q).await;
    }
    conn.close(200, "bye".into()).await.ok();
}

#[tokio::test]
async fn max_connections_is_enforced() {
    let b = start().await;
    let api = Api::new(&b);
    assert_eq!(api.put("/api/vhosts/few", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        api.put(
            "/api/permissions/few/guest",
            json!({"configure": ".*", "write": ".*", "read": ".*"})
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put("/api/vhost-limits/few/max-connections", json!({"value": 1}))
            .await,
        StatusCode::NO_CONTENT
    );
    let url = b.url_for("guest", "guest", "few");
    let first = b.connect_url(&url).await;
    let err = try_connect(&url).await.expect_err("a second connection");
    assert_eq!(reply_code(&err), Some(530), "{err}");
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - access to vhost 'few' refused for user 'guest': connection limit (1) is reached"
    );
    // Other vhosts are not limited.
    let _root = b.connect().await;
    let _root2 = b.connect().await;

    // Once the first one is gone there is room again.
    first.close(200, "bye".into()).await.expect("close");
    eventually("the connection to leave the registry", || async {
        api.get_ok("/api/vhosts/few/connections").await == json!([])
    })
    .await;
    let second = b.connect_url(&url).await;

    // Zero refuses everyone; a negative limit is none.
    assert_eq!(
        api.put("/api/vhost-limits/few/max-connections", json!({"value": 0}))
            .await,
        StatusCode::NO_CONTENT
    );
    assert_code(try_connect(&url).await, 530);
    assert_eq!(
        api.put("/api/vhost-limits/few/max-connections", json!({"value": -1}))
            .await,
        StatusCode::NO_CONTENT
    );
    let third = b.connect_url(&url).await;
    let fourth = b.connect_url(&url).await;
    for c in [second, third, fourth] {
        c.close(200, "bye".into()).await.ok();
    }
}

#[tokio::test]
async fn definitions_carry_parameters_limits_and_vhost_metadata() {
    let b1 = start().await;
    let api1 = Api::new(&b1);
    assert_eq!(
        api1.put(
            "/api/vhosts/shop",
            json!({"description": "the shop", "tags": ["prod"], "default_queue_type": "quorum"})
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api1.put("/api/vhost-limits/shop/max-queues", json!({"value": 7})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api1.put(
            "/api/parameters/shovel/shop/s1",
            json!({"value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}})
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api1.put("/api/global-parameters/cluster_name", json!({"value": "one"}))
            .await,
        StatusCode::CREATED
    );
    let export = api1.get_ok("/api/definitions").await;
    let shop = export["vhosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "shop")
        .expect("shop exported")
        .clone();
    assert_eq!(
        shop,
        json!({"name": "shop", "description": "the shop", "tags": ["prod"], "default_queue_type": "quorum",
               "limits": {"max-queues": 7},
               "metadata": {"description": "the shop", "tags": ["prod"], "default_queue_type": "quorum"}})
    );
    assert_eq!(
        sorted(&export["parameters"]),
        sorted(&json!([
            {"vhost": "shop", "component": "vhost-limits", "name": "limits", "value": {"max-queues": 7}},
            {"vhost": "shop", "component": "shovel", "name": "s1", "value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}}
        ]))
    );
    assert_eq!(
        export["global_parameters"],
        json!([{"name": "cluster_name", "value": "one"}])
    );
    let one = api1.get_ok("/api/definitions/shop").await;
    assert_eq!(
        sorted(&one["parameters"]),
        sorted(&json!([
            {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 7}},
            {"component": "shovel", "name": "s1", "value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}}
        ]))
    );

    // Into another broker: the same again, also after a second import and a restart.
    let mut b2 = start().await;
    let api2 = Api::new(&b2);
    for _ in 0..2 {
        let (status, body) = api2
            .call(Method::POST, "/api/definitions", GUEST, Some(export.clone()))
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    let same = |e: &Value| {
        ["vhosts", "parameters", "global_parameters"]
            .map(|k| sorted(&e[k]))
            .to_vec()
    };
    assert_eq!(same(&api2.get_ok("/api/definitions").await), same(&export));
    b2.restart().await;
    let api2 = Api::new(&b2);
    assert_eq!(same(&api2.get_ok("/api/definitions").await), same(&export));
    assert_eq!(
        api2.get_ok("/api/vhost-limits/shop").await,
        json!([{"vhost": "shop", "value": {"max-queues": 7}}])
    );
    assert_eq!(api2.get_ok("/api/vhosts/shop").await["description"], "the shop");

    // RabbitMQ's own form: limits as a `vhost-limits` parameter, metadata only
    // under `metadata`, and the source cluster's id, which is not taken over.
    let b3 = start().await;
    let api3 = Api::new(&b3);
    let rabbit = json!({
        "vhosts": [{"name": "r", "limits": [], "metadata": {"description": "from rabbit", "tags": ["a"]}}],
        "parameters": [
            {"vhost": "r", "component": "vhost-limits", "name": "limits", "value": {"max-connections": 3}},
            {"vhost": "r", "component": "federation-upstream", "name": "up", "value": {"uri": "amqp://u"}}
        ],
        "global_parameters": [
            {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"},
            {"name": "cluster_name", "value": "rabbit@host"}
        ]
    });
    let (status, body) = api3.call(Method::POST, "/api/definitions", GUEST, Some(rabbit)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let r = api3.get_ok("/api/vhosts/r").await;
    assert_eq!((&r["description"], &r["tags"]), (&json!("from rabbit"), &json!(["a"])));
    assert_eq!(
        api3.get_ok("/api/vhost-limits/r").await,
        json!([{"vhost": "r", "value": {"max-connections": 3}}])
    );
    assert_eq!(
        api3.get_ok("/api/parameters/federation-upstream/r/up").await["value"],
        json!({"uri": "amqp://u"})
    );
    assert_eq!(
        api3.get_ok("/api/global-parameters").await,
        json!([{"name": "cluster_name", "value": "rabbit@host"}])
    );

    // A vhost's own import takes its parameters and limits too.
    assert_eq!(api3.put("/api/vhosts/solo", json!({})).await, StatusCode::CREATED);
    let (status, body) = api3.call(Method::POST, "/api/definitions/solo", GUEST, Some(one)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(
        api3.get_ok("/api/parameters/shovel/solo").await,
        json!([{"name": "s1", "vhost": "solo", "component": "shovel", "value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"}}])
    );
    assert_eq!(
        api3.get_ok("/api/vhost-limits/solo").await,
        json!([{"vhost": "solo", "value": {"max-queues": 7}}])
    );
}

#[tokio::test]
async fn max_connections_holds_for_clients_connecting_at_once() {
    let b = start().await;
    let api = Api::new(&b);
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-connections", json!({"value": 3}))
            .await,
        StatusCode::NO_CONTENT
    );
    let url = b.url();
    let attempts: Vec<_> = (0..12)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { try_connect(&url).await })
        })
        .collect();
    let mut open = Vec::new();
    for a in attempts {
        if let Ok(conn) = a.await.expect("task") {
            open.push(conn);
        }
    }
    assert_eq!(open.len(), 3, "exactly the limit gets in");
}

#[tokio::test]
async fn user_limits_are_shown_enforced_and_exported() {
    let mut b = start().await;
    let api = Api::new(&b);
    add_user(&api, "capped", "management").await;
    assert_eq!(api.get_ok("/api/user-limits").await, json!([]));
    assert_eq!(api.get_ok("/api/user-limits/capped").await, json!([]));
    for (name, value) in [("max-connections", 2), ("max-channels", 3)] {
        let path = format!("/api/user-limits/capped/{name}");
        assert_eq!(api.put(&path, json!({"value": value})).await, StatusCode::NO_CONTENT);
    }
    let shown = json!({"user": "capped", "value": {"max-connections": 2, "max-channels": 3}});
    assert_eq!(api.get_ok("/api/user-limits").await, json!([shown]));
    assert_eq!(api.get_ok("/api/user-limits/capped").await, json!([shown]));
    assert_eq!(
        api.put("/api/user-limits/capped/max-queues", json!({"value": 1})).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        api.put("/api/user-limits/nobody/max-channels", json!({"value": 1}))
            .await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status_as(&api, Method::GET, "/api/user-limits", "capped", None).await,
        StatusCode::FORBIDDEN
    );

    // Connections: two at most, in any vhost.
    let url = b.url_for("capped", "pw", "%2f");
    let first = b.connect_url(&url).await;
    let second = b.connect_url(&url).await;
    let err = try_connect(&url).await.expect_err("a third connection");
    assert_eq!(reply_code(&err), Some(530), "{err}");
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - connection refused for user 'capped': user connection limit (2) is reached"
    );
    // MQTT connections count too: CONNACK 3 (MQTT 5's 0x97 Quota exceeded).
    use crate::common::mqtt_raw::{MqttRaw, connect_raw, mqtt_str};
    let mut mqtt = MqttRaw::tcp(b.server().mqtt_addr()).await;
    let mut payload = mqtt_str(b"capped-client");
    payload.extend(mqtt_str(b"capped"));
    payload.extend(mqtt_str(b"pw"));
    mqtt.send(&connect_raw(b"MQTT", 4, 0b1100_0010, 0, &payload)).await;
    assert_eq!(
        mqtt.expect_connack().await.1,
        3,
        "MQTT over the user's connection limit"
    );
    // Other users are not limited.
    let _guest = b.connect().await;

    // Channels: three at most, over both connections.
    let _a = within("channel", first.create_channel()).await.expect("channel 1");
    let _b = within("channel", first.create_channel()).await.expect("channel 2");
    let _c = within("channel", second.create_channel()).await.expect("channel 3");
    let mut ev = events(&second);
    assert!(
        within("channel", second.create_channel()).await.is_err(),
        "a fourth channel"
    );
    let text = expect_error(&mut ev, 530).await;
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened for user 'capped' has reached the maximum allowed user limit (3)"
    );
    first.close(200, "bye".into()).await.ok();

    // Limits are kept with the user, across restarts and in definitions.
    assert_eq!(
        api.delete("/api/user-limits/capped/max-channels").await,
        StatusCode::NO_CONTENT
    );
    b.restart().await;
    let api = Api::new(&b);
    let kept = json!({"user": "capped", "value": {"max-connections": 2}});
    assert_eq!(api.get_ok("/api/user-limits").await, json!([kept]));
    let defs = api.get_ok("/api/definitions").await;
    let exported = defs["users"]
        .as_array()
        .and_then(|u| u.iter().find(|u| u["name"] == "capped"))
        .map(|u| u["limits"].clone());
    assert_eq!(exported, Some(json!({"max-connections": 2})));
    let b2 = start().await;
    let api2 = Api::new(&b2);
    let (status, body) = api2.call(Method::POST, "/api/definitions", GUEST, Some(defs)).await;
    assert!(status.is_success(), "{status} {body}");
    assert_eq!(api2.get_ok("/api/user-limits").await, json!([kept]));
}
