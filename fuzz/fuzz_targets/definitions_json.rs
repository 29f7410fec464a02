//! Definitions import (`POST /api/definitions`, `load_definitions`): any
//! document is imported or refused with a reason, never a panic. The broker
//! is a real one on a temporary data directory, replaced every thousand
//! inputs so that what earlier inputs created does not pile up.
#![no_main]

use std::cell::RefCell;
use std::sync::Arc;

use lavinmq::config::Config;
use lavinmq::core::broker::Broker;
use libfuzzer_sys::fuzz_target;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    broker: Option<(Arc<Broker>, tempfile::TempDir)>,
    uses: u32,
}

thread_local! {
    static FIXTURE: RefCell<Fixture> = RefCell::new(Fixture {
        runtime: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"),
        broker: None,
        uses: 0,
    });
}

fn fresh_broker() -> (Arc<Broker>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let main = Config::default().main;
    let broker = Broker::open(
        dir.path(),
        lavinmq::server::store_settings(&main),
        &main.default_user,
        &main.default_password_hash,
    )
    .expect("broker opens");
    (broker, dir)
}

fuzz_target!(|data: &[u8]| {
    FIXTURE.with(|f| {
        let mut f = f.borrow_mut();
        f.uses += 1;
        if f.broker.is_none() || f.uses % 1000 == 0 {
            f.broker = None;
            f.broker = Some(fresh_broker());
        }
        let _enter = f.runtime.enter();
        if let Some((broker, _)) = &f.broker {
            let _ = lavinmq::core::definitions_import::import_document(broker, data);
        }
    });
});
