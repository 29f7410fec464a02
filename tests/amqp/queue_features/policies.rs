//! Policies and operator policies: applied to existing and new queues and
//! exchanges at once, merged with queue arguments the RabbitMQ way, persisted.

use crate::common::*;
use lapin::options::{BasicGetOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lavinmq::core::policy::Policy;
use lavinmq::core::vhost::VHost;
use serde_json::{Map, Value};
use std::sync::Arc;

fn def(json: &str) -> Map<String, Value> {
    serde_json::from_str(json).expect("definition")
}

fn vhost(b: &TestBroker) -> Arc<VHost> {
    b.server().broker.vhost("/").expect("default vhost")
}

fn set(b: &TestBroker, name: &str, pattern: &str, apply_to: &str, priority: i64, json: &str, operator: bool) {
    let p = Policy::new(name, pattern, apply_to, priority, def(json), operator).expect("valid policy");
    vhost(b).set_policy(p, operator).expect("set policy");
}

async fn fill(ch: &lapin::Channel, q: &str, n: usize) {
    ch.confirm_select(ConfirmSelectOptions::default()).await.ok();
    for i in 0..n {
        publish(ch, "", q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_for_confirms().await.expect("confirms");
}

#[tokio::test]
async fn max_length_policy_applies_to_existing_and_new_queues_and_goes_away() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = uniq("pol-old");
    declare_queue(&ch, &q).await;
    fill(&ch, &q, 5).await;
    set(&b, "limit", "^pol-", "queues", 0, r#"{"max-length": 2}"#, false);
    assert_eq!(queue_count(&ch, &q).await, 2, "existing queue trimmed at once");
    let got = ch
        .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data, b"m3", "the oldest were dropped");
    let fresh = uniq("pol-new");
    declare_queue(&ch, &fresh).await;
    fill(&ch, &fresh, 4).await;
    assert_eq!(queue_count(&ch, &fresh).await, 2, "new queue limited too");
    let other = uniq("unmatched");
    declare_queue(&ch, &other).await;
    fill(&ch, &other, 4).await;
    assert_eq!(queue_count(&ch, &other).await, 4, "pattern does not match");
    vhost(&b).delete_policy("limit", false).unwrap();
    fill(&ch, &fresh, 3).await;
    assert_eq!(queue_count(&ch, &fresh).await, 5, "no limit once the policy is gone");
}

#[tokio::test]
async fn lowest_limit_wins_between_argument_policy_and_operator_policy() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = uniq("merge");
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(3));
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    set(&b, "loose", "^merge", "all", 0, r#"{"max-length": 10}"#, false);
    fill(&ch, &q, 6).await;
    assert_eq!(queue_count(&ch, &q).await, 3, "the argument is lower than the policy");
    set(&b, "strict", "^merge", "queues", 0, r#"{"max-length": 1}"#, true);
    assert_eq!(queue_count(&ch, &q).await, 1, "the operator policy is lower still");
}

#[tokio::test]
async fn ttl_and_dead_letter_policy_dead_letters_expired_messages() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = uniq("ttlpol");
    let dlq = uniq("ttlpol-dlq");
    declare_queue(&ch, &q).await;
    declare_queue(&ch, &dlq).await;
    let json = format!(r#"{{"message-ttl": 50, "dead-letter-exchange": "", "dead-letter-routing-key": "{dlq}"}}"#);
    set(&b, "ttl", &format!("^{q}$"), "queues", 0, &json, false);
    fill(&ch, &q, 2).await;
    eventually("messages dead-lettered", || async { queue_count(&ch, &dlq).await == 2 }).await;
    assert_eq!(queue_count(&ch, &q).await, 0);
}

#[tokio::test]
async fn policies_survive_a_restart() {
    let mut b = start().await;
    set(&b, "keep", "^durable-", "queues", 3, r#"{"max-length": 1}"#, false);
    set(&b, "op", ".*", "queues", 0, r#"{"expires": 600000}"#, true);
    b.restart().await;
    let v = vhost(&b);
    let names: Vec<_> = v.policies(false).into_iter().map(|p| (p.name, p.priority)).collect();
    assert_eq!(names, [("keep".to_string(), 3)]);
    assert_eq!(v.policies(true).len(), 1);
    let (_c, ch) = b.channel().await;
    let q = uniq("durable-");
    declare_queue(&ch, &q).await;
    fill(&ch, &q, 3).await;
    assert_eq!(queue_count(&ch, &q).await, 1);
}

#[tokio::test]
async fn alternate_exchange_policy_catches_unroutable_messages() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let ex = uniq("pol-ex");
    let caught = uniq("caught");
    ch.exchange_declare(
        ex.as_str().into(),
        lapin::ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&ch, &caught).await;
    ch.queue_bind(
        caught.as_str().into(),
        "amq.fanout".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    set(
        &b,
        "ae",
        &format!("^{ex}$"),
        "exchanges",
        0,
        r#"{"alternate-exchange": "amq.fanout"}"#,
        false,
    );
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    publish(&ch, &ex, "nowhere", b"lost?").await;
    ch.wait_for_confirms().await.unwrap();
    assert_eq!(queue_count(&ch, &caught).await, 1);
}

#[test]
fn invalid_policies_are_refused() {
    assert!(Policy::new("p", "[", "queues", 0, def(r#"{"max-length": 1}"#), false).is_err());
    assert!(Policy::new("p", ".*", "queues", 0, def(r#"{"unknown-key": 1}"#), false).is_err());
    assert!(Policy::new("p", ".*", "queues", 0, def(r#"{"dead-letter-exchange": "x"}"#), true).is_err());
}
