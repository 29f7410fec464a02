//! PROXY protocol headers (v1 text, v2 binary) from a trusted load balancer:
//! any bytes give the client's address or an error, never a panic, and
//! reading never takes more than the header.
#![no_main]

use lavinmq::transport::peer::Peer;
use lavinmq::transport::proxy_protocol::ProxyPolicy;
use libfuzzer_sys::fuzz_target;

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
}

fuzz_target!(|data: &[u8]| {
    let peer = Peer::plain(
        "10.0.0.1:40000".parse().expect("address"),
        "10.0.0.2:5672".parse().expect("address"),
    );
    RUNTIME.with(|rt| {
        rt.block_on(async {
            let mut stream = data;
            let _ = ProxyPolicy::trusting_all().receive(&mut stream, peer).await;
        })
    });
});
