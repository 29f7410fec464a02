//! RabbitMQ's stream management endpoints: the stream connections, and the
//! publishers and consumers with their counters and lag.

use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use serde_json::Value;

use super::{env, take};
use crate::common::api::{Api, enc};
use crate::common::{eventually, start, uniq, within};

fn find<'a>(list: &'a Value, stream: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|x| x["queue"]["name"] == stream)
}

#[tokio::test]
async fn publishers_and_consumers_are_listed_with_their_counters() {
    let b = start().await;
    let api = Api::new(&b);
    let env = env(&b).await;
    let stream = uniq("listed");
    env.stream_creator().create(&stream).await.unwrap();
    let mut producer = env.producer().name("the-writer").build(&stream).await.unwrap();
    let messages: Vec<Message> = (1..=10)
        .map(|i| Message::builder().body(vec![b'x']).publishing_id(i).build())
        .collect();
    within("confirms", producer.batch_send_with_confirm(messages))
        .await
        .unwrap();
    let mut consumer = env
        .consumer()
        .name("the-reader")
        .offset(OffsetSpecification::First)
        .build(&stream)
        .await
        .unwrap();
    take(&mut consumer, 10).await;

    let connections = api.get_ok("/api/stream/connections").await;
    let listed = connections.as_array().expect("a list");
    assert!(listed.len() >= 2, "the producer's and the consumer's: {connections}");
    assert!(listed.iter().all(|c| c["protocol"] == "RabbitMQ Stream"));
    assert_eq!(
        api.get_ok("/api/stream/connections/%2F").await.as_array().map(Vec::len),
        Some(listed.len())
    );

    let publishers = api
        .get_ok(&format!("/api/stream/publishers/%2F/{}", enc(&stream)))
        .await;
    let p = find(&publishers, &stream).expect("the publisher");
    assert_eq!(p["reference"], "the-writer");
    assert_eq!(p["published"], 10);
    assert_eq!(p["confirmed"], 10);
    assert_eq!(p["errored"], 0);
    assert_eq!(p["queue"]["vhost"], "/");
    let conn = p["connection_details"]["name"]
        .as_str()
        .expect("its connection")
        .to_owned();
    let of_conn = api
        .get_ok(&format!("/api/stream/connections/%2F/{}/publishers", enc(&conn)))
        .await;
    assert_eq!(of_conn.as_array().map(Vec::len), Some(1));

    let s = stream.clone();
    eventually("the consumer's counters", || {
        let api = Api::new(&b);
        let s = s.clone();
        async move {
            let consumers = api.get_ok("/api/stream/consumers/%2F").await;
            find(&consumers, &s).is_some_and(|c| c["consumed"] == 10 && c["offset"] == 9 && c["offset_lag"] == 0)
        }
    })
    .await;
    let consumers = api.get_ok("/api/stream/consumers").await;
    let c = find(&consumers, &stream).unwrap();
    assert_eq!(c["subscription_id"], 1);
    assert_eq!(c["active"], true);

    // RabbitMQ's `stream_consumer_metrics`: the stream's highest consumer lag.
    let url = format!(
        "http://{}/metrics/detailed?family=stream_consumer_metrics",
        b.server().http_addr()
    );
    let text = within("scrape", async {
        reqwest::Client::new()
            .get(&url)
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("metrics text")
    })
    .await;
    assert!(
        text.contains("# TYPE lavinmq_detailed_stream_consumer_max_offset_lag gauge\n"),
        "{text}"
    );
    let sample = format!("lavinmq_detailed_stream_consumer_max_offset_lag{{queue=\"{stream}\",vhost=\"/\"}} 0\n");
    assert!(text.contains(&sample), "no `{sample}` in:\n{text}");

    producer.close().await.unwrap();
    consumer.handle().close().await.unwrap();
    let s = stream.clone();
    eventually("gone from the lists", || {
        let api = Api::new(&b);
        let s = s.clone();
        async move {
            find(&api.get_ok("/api/stream/publishers").await, &s).is_none()
                && find(&api.get_ok("/api/stream/consumers").await, &s).is_none()
        }
    })
    .await;
}
