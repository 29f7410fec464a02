//! Single active consumer: of the consumers of a stream that share a name,
//! one reads; when it leaves the next takes over from the offset its client
//! names. On a super stream the partitions spread over the group.

use std::collections::BTreeSet;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::OffsetSpecification;

use super::{body, env, numbered, publish_all, quiet, take};
use crate::common::{start, uniq, within};

#[tokio::test]
async fn one_consumer_of_a_group_reads_and_the_next_takes_over() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("sac");
    env.stream_creator().create(&stream).await.unwrap();
    let group = |env: &rabbitmq_stream_client::Environment| {
        env.consumer()
            .name("app")
            .enable_single_active_consumer(true)
            .offset(OffsetSpecification::First)
    };
    let mut first = group(&env).build(&stream).await.expect("first member");
    let mut second = group(&env).build(&stream).await.expect("second member");
    publish_all(&env, &stream, &numbered("a", 0..10)).await;
    let got: Vec<String> = take(&mut first, 10).await.iter().map(body).collect();
    assert_eq!(got, numbered("a", 0..10));
    assert!(quiet(&mut second).await, "the second member waits");
    let groups = b.server().broker.vhost("/").unwrap().stream_groups.of_stream(&stream);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].1.iter().filter(|m| m.1).count(), 1, "one active");

    first.handle().close().await.unwrap();
    // Without a listener the client answers the activation with "next".
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    publish_all(&env, &stream, &numbered("b", 0..5)).await;
    let got: Vec<String> = take(&mut second, 5).await.iter().map(body).collect();
    assert_eq!(got, numbered("b", 0..5), "the second member took over");
}

#[tokio::test]
async fn a_super_streams_partitions_spread_over_its_consumers() {
    let b = start().await;
    let env = env(&b).await;
    let name = uniq("sac-super");
    env.stream_creator().create_super_stream(&name, 3, None).await.unwrap();
    let mut builder = env
        .super_stream_consumer()
        .name("workers")
        .enable_single_active_consumer(true)
        .offset(OffsetSpecification::First);
    let mut c1 = builder.build(&name).await.expect("first consumer");
    let mut c2 = builder.build(&name).await.expect("second consumer");
    // Ten messages into each partition.
    for p in 0..3 {
        publish_all(&env, &format!("{name}-{p}"), &numbered(&format!("p{p}"), 0..10)).await;
    }
    let partitions = |got: Vec<String>| -> BTreeSet<String> {
        got.iter().map(|b| b.split('-').next().unwrap().to_owned()).collect()
    };
    let mut got1 = Vec::new();
    for _ in 0..20 {
        got1.push(body(&within("delivery", c1.next()).await.unwrap().unwrap()));
    }
    let mut got2 = Vec::new();
    for _ in 0..10 {
        got2.push(body(&within("delivery", c2.next()).await.unwrap().unwrap()));
    }
    let (p1, p2) = (partitions(got1), partitions(got2));
    assert_eq!(p1.len(), 2, "the first consumer reads two partitions: {p1:?}");
    assert_eq!(p2.len(), 1, "the second reads the third: {p2:?}");
    assert!(p1.is_disjoint(&p2));
    let quiet1 = tokio::time::timeout(std::time::Duration::from_millis(300), c1.next()).await;
    assert!(quiet1.is_err(), "nothing more");
}
