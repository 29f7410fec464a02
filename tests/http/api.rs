//! The management HTTP API, driven with reqwest against the in-process server.

use crate::common::api::*;
use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn authentication_and_tags() {
    let b = start().await;
    let api = Api::new(&b);
    let (status, body) = api.call(Method::GET, "/api/overview", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "not_authorized");
    let (status, _) = api
        .call(Method::GET, "/api/overview", Some(("guest", "wrong")), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, me) = api.get("/api/whoami").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me, json!({"name": "guest", "tags": ["administrator"]}));
    // A user without a management tag may not use the API at all...
    assert_eq!(
        api.put("/api/users/plain", json!({"password": "pw", "tags": ""})).await,
        StatusCode::CREATED
    );
    let (status, _) = api
        .call(Method::GET, "/api/overview", Some(("plain", "pw")), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // ...and a management user may not manage users.
    assert_eq!(
        api.put("/api/users/mgr", json!({"password": "pw", "tags": "management"}))
            .await,
        StatusCode::CREATED
    );
    let (status, body) = api.call(Method::GET, "/api/users", Some(("mgr", "pw")), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = api.call(Method::GET, "/api/overview", Some(("mgr", "pw")), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn vhosts_users_and_permissions() {
    let b = start().await;
    let api = Api::new(&b);
    assert_eq!(api.put("/api/vhosts/tenant-a", json!({})).await, StatusCode::CREATED);
    assert_eq!(api.put("/api/vhosts/tenant-a", json!({})).await, StatusCode::NO_CONTENT);
    let (_, list) = api.get("/api/vhosts").await;
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["/", "tenant-a"]);
    assert_eq!(
        api.put("/api/users/alice", json!({"password": "s3cret", "tags": "monitoring"}))
            .await,
        StatusCode::CREATED
    );
    let (_, alice) = api.get("/api/users/alice").await;
    assert_eq!(alice["tags"], json!(["monitoring"]));
    let perm = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(
        api.put("/api/permissions/tenant-a/alice", perm.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put("/api/permissions/tenant-a/alice", perm).await,
        StatusCode::NO_CONTENT
    );
    let (status, p) = api.get("/api/permissions/tenant-a/alice").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(p["vhost"], "tenant-a");
    // The new user can connect over AMQP to the new vhost.
    let conn = try_connect(&b.url_for("alice", "s3cret", "tenant-a"))
        .await
        .expect("alice connects");
    conn.close(200, "bye".into()).await.ok();
    let bad = json!({"configure": "(", "write": ".*", "read": ".*"});
    assert_eq!(
        api.put("/api/permissions/tenant-a/alice", bad).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        api.delete("/api/permissions/tenant-a/alice").await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.get("/api/permissions/tenant-a/alice").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(api.delete("/api/vhosts/tenant-a").await, StatusCode::NO_CONTENT);
    assert_eq!(api.get("/api/vhosts/tenant-a").await.0, StatusCode::NOT_FOUND);
    assert_eq!(api.delete("/api/users/alice").await, StatusCode::NO_CONTENT);
    assert_eq!(api.delete("/api/users/alice").await, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn queues_and_exchanges() {
    let b = start().await;
    let api = Api::new(&b);
    let q = uniq("httpq");
    let args = json!({"durable": true, "arguments": {"x-max-length": 10}});
    assert_eq!(
        api.put(&format!("/api/queues/%2F/{q}"), args.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put(&format!("/api/queues/%2F/{q}"), args).await,
        StatusCode::NO_CONTENT
    );
    let (_c, ch) = b.channel().await;
    for _ in 0..3 {
        publish(&ch, "", &q, b"x").await;
    }
    eventually("messages counted", || async {
        api.get(&format!("/api/queues/%2F/{q}")).await.1["messages"] == 3
    })
    .await;
    let (_, shown) = api.get(&format!("/api/queues/%2F/{q}")).await;
    assert_eq!(shown["vhost"], "/");
    assert_eq!(shown["durable"], true);
    assert_eq!(shown["arguments"]["x-max-length"], 10);
    assert_eq!(shown["type"], "classic");
    let (_, all) = api.get("/api/queues/%2F").await;
    assert!(all.as_array().unwrap().iter().any(|x| x["name"] == q));
    assert_eq!(
        api.delete(&format!("/api/queues/%2F/{q}/contents")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(api.get(&format!("/api/queues/%2F/{q}")).await.1["messages_ready"], 0);
    assert_eq!(
        api.delete(&format!("/api/queues/%2F/{q}")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(api.get(&format!("/api/queues/%2F/{q}")).await.0, StatusCode::NOT_FOUND);
    // A bad argument is a 400 that names it.
    let (status, err) = api
        .call(
            Method::PUT,
            &format!("/api/queues/%2F/{q}"),
            Some(("guest", "guest")),
            Some(json!({"arguments": {"x-message-ttl": -1}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["reason"].as_str().unwrap().contains("x-message-ttl"), "{err}");

    let ex = uniq("httpx");
    let decl = json!({"type": "topic", "durable": true});
    assert_eq!(
        api.put(&format!("/api/exchanges/%2F/{ex}"), decl).await,
        StatusCode::CREATED
    );
    let (_, e) = api.get(&format!("/api/exchanges/%2F/{ex}")).await;
    assert_eq!(
        (e["type"].as_str(), e["durable"].as_bool()),
        (Some("topic"), Some(true))
    );
    let (_, d) = api.get("/api/exchanges/%2F/amq.default").await;
    assert_eq!(d["name"], "");
    assert_eq!(
        api.delete(&format!("/api/exchanges/%2F/{ex}")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.get(&format!("/api/exchanges/%2F/{ex}")).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn policies_through_the_api_apply_to_queues() {
    let b = start().await;
    let api = Api::new(&b);
    let q = uniq("pol");
    assert_eq!(
        api.put(&format!("/api/queues/%2F/{q}"), json!({})).await,
        StatusCode::CREATED
    );
    let policy =
        json!({"pattern": format!("^{q}$"), "definition": {"max-length": 1}, "apply-to": "queues", "priority": 1});
    assert_eq!(api.put("/api/policies/%2F/limit", policy).await, StatusCode::CREATED);
    let (_, list) = api.get("/api/policies/%2F").await;
    assert_eq!(list[0]["name"], "limit");
    assert_eq!(list[0]["apply-to"], "queues");
    let (_c, ch) = b.channel().await;
    for _ in 0..3 {
        publish(&ch, "", &q, b"x").await;
    }
    eventually("limit applied", || async {
        let (_, shown) = api.get(&format!("/api/queues/%2F/{q}")).await;
        shown["messages"] == 1 && shown["policy"] == "limit"
    })
    .await;
    let bad = json!({"pattern": ".*", "definition": {"no-such-key": 1}});
    assert_eq!(api.put("/api/policies/%2F/bad", bad).await, StatusCode::BAD_REQUEST);
    let op = json!({"pattern": ".*", "definition": {"message-ttl": 60000}, "apply-to": "queues"});
    assert_eq!(api.put("/api/operator-policies/%2F/ttl", op).await, StatusCode::CREATED);
    assert_eq!(api.get("/api/operator-policies").await.1.as_array().unwrap().len(), 1);
    assert_eq!(api.delete("/api/policies/%2F/limit").await, StatusCode::NO_CONTENT);
    assert_eq!(api.delete("/api/policies/%2F/limit").await, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn overview_and_aliveness() {
    let b = start().await;
    let api = Api::new(&b);
    let (status, alive) = api.get("/api/aliveness-test/%2F").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(alive, json!({"status": "ok"}));
    let (_, o) = api.get("/api/overview").await;
    assert_eq!(o["product_name"], "LavinMQ");
    // Fields RabbitMQ's management clients read, with RabbitMQ's types.
    for key in [
        "erlang_version",
        "erlang_full_version",
        "cluster_name",
        "node",
        "rates_mode",
    ] {
        assert!(o[key].is_string(), "{key}: {}", o[key]);
    }
    assert_eq!(o["cluster_name"], o["node"]);
    let contexts = o["contexts"].as_array().expect("contexts");
    let port = b.server().http_addr().port().to_string();
    assert!(contexts.iter().any(|c| c["port"] == port.as_str()), "{contexts:?}");
    assert!(o["sample_retention_policies"]["global"].is_array());
    assert_eq!(o["disable_stats"], false);
    assert!(o["object_totals"]["queues"].as_u64().unwrap() >= 1);
    // The bindings total counts what /api/bindings lists.
    let (_, all) = api.get("/api/bindings").await;
    assert_eq!(
        o["object_totals"]["bindings"].as_u64(),
        all.as_array().map(|a| a.len() as u64)
    );
    assert!(o["queue_totals"]["messages"].is_u64());
    assert_eq!(api.get("/api/aliveness-test/nope").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn user_helpers_without_permissions_bulk_delete_and_hash_password() {
    let b = start().await;
    let api = Api::new(&b);
    let (status, hashed) = api
        .call(
            Method::PUT,
            "/api/auth/hash_password",
            Some(("guest", "guest")),
            Some(json!({"password": "pw"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let hash = hashed["password_hash"].as_str().unwrap().to_string();
    let body = json!({"password_hash": hash, "tags": "management"});
    assert_eq!(api.put("/api/users/hashed", body).await, StatusCode::CREATED);
    // The hash works as a password for that user.
    let (status, _) = api.call(Method::GET, "/api/whoami", Some(("hashed", "pw")), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        api.put("/api/users/other", json!({"password": "x", "tags": ""})).await,
        StatusCode::CREATED
    );
    let (_, lonely) = api.get("/api/users/without-permissions").await;
    let names: Vec<&str> = lonely
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hashed", "other"]);
    let (_, perms) = api.get("/api/users/guest/permissions").await;
    assert_eq!(perms[0]["vhost"], "/");
    let (status, _) = api
        .call(
            Method::POST,
            "/api/users/bulk-delete",
            Some(("guest", "guest")),
            Some(json!({"users": ["hashed", "other", "missing"]})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(api.get("/api/users/hashed").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn listings_page_filter_sort_and_select_columns() {
    let b = start().await;
    let api = Api::new(&b);
    for name in ["list-a", "list-b", "list-c", "other-d", "other-e"] {
        assert_eq!(
            api.put(&format!("/api/queues/%2F/{name}"), json!({})).await,
            StatusCode::CREATED
        );
    }
    let page = api.get_ok("/api/queues/%2F?page=2&page_size=2").await;
    assert_eq!(page["page"], 2);
    assert_eq!(page["page_count"], 3);
    assert_eq!(page["total_count"], 5);
    assert_eq!(page["item_count"], 2);
    assert_eq!(page["items"][0]["name"], "list-c");
    let (status, err) = api.get("/api/queues/%2F?page=9&page_size=2").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let filtered = api.get_ok("/api/queues?name=LIST-&page=1").await;
    assert_eq!(filtered["filtered_count"], 3);
    let regex = api.get_ok("/api/queues?name=%5Eother-%5Bde%5D%24&use_regex=true").await;
    assert_eq!(regex.as_array().map(Vec::len), Some(2), "{regex}");
    let sorted = api
        .get_ok("/api/queues?sort=name&sort_reverse=true&columns=name,vhost")
        .await;
    assert_eq!(sorted[0], json!({"name": "other-e", "vhost": "/"}));
    let (status, _) = api.get("/api/queues?name=(&use_regex=true").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Other listings take the same parameters.
    let vhosts = api.get_ok("/api/vhosts?columns=name").await;
    assert_eq!(vhosts, json!([{"name": "/"}]));
}

#[tokio::test]
async fn api_operations_need_the_same_permissions_as_amqp() {
    let b = start().await;
    let api = Api::new(&b);
    let me = Some(("limited", "pw"));
    assert_eq!(
        api.put("/api/users/limited", json!({"password": "pw", "tags": "management"}))
            .await,
        StatusCode::CREATED
    );
    let perms = json!({"configure": "^mine-", "write": "^mine-", "read": "^(mine-.*|amq\\.fanout)$"});
    assert_eq!(
        api.put("/api/permissions/%2F/limited", perms).await,
        StatusCode::CREATED
    );
    assert_eq!(api.put("/api/queues/%2F/other", json!({})).await, StatusCode::CREATED);
    let call = |m: Method, path: &'static str, body: Option<serde_json::Value>| {
        let api = &api;
        async move { api.call(m, path, me, body).await.0 }
    };
    assert_eq!(
        call(Method::PUT, "/api/queues/%2F/mine-q", Some(json!({}))).await,
        StatusCode::CREATED
    );
    assert_eq!(
        call(Method::PUT, "/api/queues/%2F/theirs", Some(json!({}))).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(Method::DELETE, "/api/queues/%2F/other", None).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(Method::DELETE, "/api/queues/%2F/other/contents", None).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            Method::PUT,
            "/api/exchanges/%2F/theirs-x",
            Some(json!({"type": "direct"}))
        )
        .await,
        StatusCode::FORBIDDEN
    );
    // Binding needs read on the source exchange and write on the queue.
    assert_eq!(
        call(Method::POST, "/api/bindings/%2F/e/amq.direct/q/mine-q", Some(json!({}))).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(Method::POST, "/api/bindings/%2F/e/amq.fanout/q/other", Some(json!({}))).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(Method::POST, "/api/bindings/%2F/e/amq.fanout/q/mine-q", Some(json!({}))).await,
        StatusCode::CREATED
    );
    assert_eq!(
        call(Method::DELETE, "/api/queues/%2F/mine-q", None).await,
        StatusCode::NO_CONTENT
    );
    let (status, body) = api.call(Method::DELETE, "/api/queues/%2F/other", me, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["reason"].as_str().is_some_and(|r| r.contains("other")), "{body}");
}

#[tokio::test]
async fn node_cluster_name_and_health_checks() {
    let b = start().await;
    let api = Api::new(&b);
    let nodes = api.get_ok("/api/nodes").await;
    let node = &nodes[0];
    let name = node["name"].as_str().expect("node name").to_string();
    assert_eq!(node["running"], true);
    assert!(node["mem_used"].as_u64().is_some_and(|m| m > 0), "{node}");
    assert!(node["fd_used"].as_u64().is_some_and(|n| n > 0), "{node}");
    assert!(node["listeners"].as_array().is_some_and(|l| !l.is_empty()), "{node}");
    // Unclustered: one node, without the cluster fields.
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
    assert!(
        node.get("cluster_role").is_none() && node.get("node_id").is_none(),
        "{node}"
    );
    assert_eq!(
        api.get_ok(&format!("/api/nodes/{}", enc(&name))).await["name"],
        name.as_str()
    );
    assert_eq!(api.get("/api/nodes/rabbit@elsewhere").await.0, StatusCode::NOT_FOUND);
    assert_eq!(api.get_ok("/api/extensions").await, json!([]));
    assert_eq!(api.get_ok("/api/auth").await["oauth_enabled"], false);

    assert!(api.get_ok("/api/cluster-name").await["name"].is_string());
    assert_eq!(
        api.put("/api/cluster-name", json!({"name": "blue"})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(api.get_ok("/api/cluster-name").await, json!({"name": "blue"}));

    for path in [
        "/api/healthchecks/node",
        "/api/health/checks/alarms",
        "/api/health/checks/local-alarms",
        "/api/health/checks/virtual-hosts",
        "/api/health/checks/protocol-listener/amqp",
    ] {
        assert_eq!(api.get_ok(path).await["status"], "ok", "{path}");
    }
    let port = b.addr().port();
    let ok = api.get_ok(&format!("/api/health/checks/port-listener/{port}")).await;
    assert_eq!(ok["status"], "ok");
    let (status, failed) = api.get("/api/health/checks/port-listener/1").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{failed}");
    assert_eq!(failed["status"], "failed");

    assert_eq!(
        api.put("/api/users/watcher", json!({"password": "pw", "tags": "management"}))
            .await,
        StatusCode::CREATED
    );
    let (status, _) = api.call(Method::GET, "/api/nodes", Some(("watcher", "pw")), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
