//! Message statistics and rates in the management API, and the channels and
//! consumers of open connections (listed, shown, a consumer cancelled).

use crate::common::api::*;
use crate::common::*;
use lapin::options::{BasicAckOptions, BasicQosOptions};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn started() -> TestBroker {
    start_with(|c| c.main.stats_interval = 50).await
}

fn count(v: &Value, key: &str) -> u64 {
    v["message_stats"][key].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn queue_exchange_and_overview_count_messages() {
    let b = started().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("stats");
    declare_queue(&ch, &q).await;
    for i in 0..5 {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await;
    }
    assert!(get(&ch, &q, true).await.is_some());
    let mut consumer = consume(&ch, &q).await;
    for d in deliveries(&mut consumer, 4).await {
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    eventually("acks counted", || async {
        let qj = api.get_ok(&format!("/api/queues/%2F/{q}")).await;
        count(&qj, "ack") == 4
    })
    .await;
    let qj = api.get_ok(&format!("/api/queues/%2F/{q}")).await;
    assert_eq!(count(&qj, "publish"), 5, "{qj}");
    assert_eq!(count(&qj, "deliver"), 4, "{qj}");
    assert_eq!(count(&qj, "get_no_ack"), 1, "{qj}");
    assert_eq!(count(&qj, "deliver_get"), 5, "{qj}");
    assert!(qj["message_stats"]["publish_details"]["rate"].is_number(), "{qj}");
    assert!(qj["messages_details"]["rate"].is_number(), "{qj}");
    let ex = api.get_ok("/api/exchanges/%2F/amq.default").await;
    assert_eq!(count(&ex, "publish_in"), 5, "{ex}");
    assert_eq!(count(&ex, "publish_out"), 5, "{ex}");
    eventually("overview totals sampled", || async {
        let o = api.get_ok("/api/overview").await;
        let v = api.get_ok("/api/vhosts/%2F").await;
        count(&o, "publish") >= 5 && count(&o, "ack") >= 4 && count(&v, "publish") >= 5
    })
    .await;
    let v = api.get_ok("/api/vhosts/%2F").await;
    assert!(v["messages_details"]["rate"].is_number(), "{v}");
    let churn = &api.get_ok("/api/overview").await["churn_rates"];
    assert_eq!(churn["connection_created"], 1, "{churn}");
    assert_eq!(churn["channel_created"], 1, "{churn}");
    assert_eq!(churn["queue_created"], 1, "{churn}");
    assert!(churn["queue_declared_details"]["rate"].is_number(), "{churn}");
    let o = api.get_ok("/api/overview").await;
    assert_eq!(o["object_totals"]["connections"], 1, "{o}");
    assert_eq!(o["object_totals"]["channels"], 1, "{o}");
}

#[tokio::test]
async fn rates_follow_a_steady_publisher() {
    let b = started().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("rate");
    declare_queue(&ch, &q).await;
    let publisher = {
        let ch = ch.clone();
        let q = q.clone();
        tokio::spawn(async move {
            loop {
                publish(&ch, "", &q, b"tick").await;
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
    };
    eventually("a publish rate", || async {
        let qj = api.get_ok(&format!("/api/queues/%2F/{q}")).await;
        let o = api.get_ok("/api/overview").await;
        let rate = |v: &Value| v["message_stats"]["publish_details"]["rate"].as_f64().unwrap_or(0.0);
        rate(&qj) > 0.0 && rate(&o) > 0.0 && qj["messages_details"]["rate"].as_f64().unwrap_or(0.0) > 0.0
    })
    .await;
    publisher.abort();
    let conns = api.get_ok("/api/connections").await;
    assert!(conns[0]["recv_oct"].as_u64().unwrap_or(0) > 0, "{conns}");
    assert!(conns[0]["recv_oct_details"]["rate"].is_number(), "{conns}");
}

#[tokio::test]
async fn channels_and_consumers_are_listed_and_a_consumer_can_be_cancelled() {
    let b = started().await;
    let api = Api::new(&b);
    let (conn, ch) = b.channel().await;
    let q = uniq("chan");
    declare_queue(&ch, &q).await;
    ch.basic_qos(7, BasicQosOptions::default()).await.expect("qos");
    confirm_select(&ch).await;
    let mut consumer = consume(&ch, &q).await;
    let tag = consumer.tag().to_string();
    let channels = api.get_ok("/api/channels").await;
    assert_eq!(channels.as_array().map(Vec::len), Some(1), "{channels}");
    let c = &channels[0];
    assert_eq!(c["prefetch_count"], 7, "{c}");
    assert_eq!(c["confirm"], true, "{c}");
    assert_eq!(c["consumer_count"], 1, "{c}");
    assert_eq!(c["vhost"], "/", "{c}");
    let name = c["name"].as_str().expect("name").to_string();
    let conn_name = c["connection_details"]["name"].as_str().expect("conn").to_string();
    assert_eq!(name, format!("{conn_name} ({})", ch.id()));
    let shown = api.get_ok(&format!("/api/channels/{}", enc(&name))).await;
    assert_eq!(shown["consumer_details"][0]["consumer_tag"], tag.as_str(), "{shown}");
    let of_conn = api
        .get_ok(&format!("/api/connections/{}/channels", enc(&conn_name)))
        .await;
    assert_eq!(of_conn[0]["name"], name.as_str());
    assert_eq!(api.get_ok("/api/vhosts/%2F/channels").await[0]["name"], name.as_str());
    let (status, _) = api.get("/api/channels/nope%20(1)").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let consumers = api.get_ok("/api/consumers/%2F").await;
    let cj = &consumers[0];
    assert_eq!(cj["consumer_tag"], tag.as_str(), "{cj}");
    assert_eq!(cj["queue"]["name"], q.as_str(), "{cj}");
    assert_eq!(cj["ack_required"], true, "{cj}");
    assert_eq!(cj["prefetch_count"], 7, "{cj}");
    assert_eq!(cj["channel_details"]["connection_name"], conn_name.as_str(), "{cj}");
    let qj = api.get_ok(&format!("/api/queues/%2F/{q}")).await;
    assert_eq!(qj["consumer_details"][0]["consumer_tag"], tag.as_str(), "{qj}");

    let path = format!("/api/consumers/%2F/{}/{}/{}", enc(&conn_name), ch.id(), enc(&tag));
    assert_eq!(api.delete(&path).await, StatusCode::NO_CONTENT);
    assert_consumer_ends(&mut consumer).await;
    assert_eq!(api.delete(&path).await, StatusCode::NOT_FOUND);
    let qj = api.get_ok(&format!("/api/queues/%2F/{q}")).await;
    assert_eq!(qj["consumers"], 0, "{qj}");
    assert!(conn.status().connected());
}

#[tokio::test]
async fn a_channels_prefetch_is_changed_through_the_api() {
    let b = started().await;
    let api = Api::new(&b);
    let (conn, ch) = b.channel().await;
    let q = uniq("prefetch");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    for i in 0..5 {
        publish_confirmed(&ch, "", &q, format!("m{i}").as_bytes()).await;
    }
    let (_c2, consumer_ch) = b.channel().await;
    consumer_ch.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consume(&consumer_ch, &q).await;
    assert_eq!(next_delivery(&mut consumer).await.data, b"m0");
    assert_no_delivery(&mut consumer).await;

    let channels = api.get_ok("/api/channels").await;
    let name = channels
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["consumer_count"] == 1)
        .and_then(|c| c["name"].as_str())
        .expect("the consumer's channel")
        .to_string();
    let path = format!("/api/channels/{}", enc(&name));
    // Raised to 3: two more deliveries follow at once, with no ack.
    assert_eq!(api.put(&path, json!({"prefetch": 3})).await, StatusCode::NO_CONTENT);
    let more: Vec<Vec<u8>> = deliveries(&mut consumer, 2).await.into_iter().map(|d| d.data).collect();
    assert_eq!(more, [b"m1".to_vec(), b"m2".to_vec()]);
    assert_no_delivery(&mut consumer).await;
    let shown = api.get_ok(&path).await;
    assert_eq!(shown["prefetch_count"], 3, "{shown}");
    assert_eq!(shown["consumer_details"][0]["prefetch_count"], 3, "{shown}");

    assert_eq!(
        api.put(&path, json!({"prefetch": 70000})).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(api.put(&path, json!({"prefetch": -1})).await, StatusCode::BAD_REQUEST);
    assert_eq!(
        api.put("/api/channels/nope%20(1)", json!({"prefetch": 1})).await,
        StatusCode::NOT_FOUND
    );
    // Another user's channel: hidden from a management user, refused to a
    // monitoring one (who sees every connection but is no administrator).
    for (user, tags, status) in [
        ("mgr", "management", StatusCode::NOT_FOUND),
        ("mon", "monitoring", StatusCode::FORBIDDEN),
    ] {
        assert_eq!(
            api.put(&format!("/api/users/{user}"), json!({"password": "pw", "tags": tags}))
                .await,
            StatusCode::CREATED
        );
        let (got, _) = api
            .call(Method::PUT, &path, Some((user, "pw")), Some(json!({"prefetch": 9})))
            .await;
        assert_eq!(got, status, "{user}");
    }
    assert_eq!(api.get_ok(&path).await["prefetch_count"], 3);
    assert!(conn.status().connected());
}

#[tokio::test]
async fn connections_by_username() {
    let b = started().await;
    let api = Api::new(&b);
    let conn = b.connect().await;
    let mut ev = events(&conn);
    let listed = api.get_ok("/api/connections/username/guest").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    let c = &listed[0];
    assert_eq!(c["auth_mechanism"], "PLAIN", "{c}");
    assert_eq!(c["peer_host"], "127.0.0.1", "{c}");
    assert!(c["client_properties"]["product"].is_string(), "{c}");
    assert_eq!(
        api.get_ok("/api/connections/username/nobody").await,
        serde_json::json!([])
    );
    assert_eq!(
        api.delete("/api/connections/username/guest").await,
        StatusCode::NO_CONTENT
    );
    expect_error(&mut ev, 320).await;
}
