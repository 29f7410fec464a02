//! Free TCP ports for the processes a test starts.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

/// Every port [`free_port`] has handed out in this test process.
static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();

/// A TCP port on 127.0.0.1 that was free a moment ago: bound to port 0, read back
/// and released. One test process never hands out the same port twice, so the
/// nodes and etcd servers of tests running in parallel cannot be given each
/// other's ports (another program on the machine still could take one first).
pub fn free_port() -> u16 {
    let handed_out = HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new()));
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        drop(listener);
        if handed_out.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
    panic!("no free TCP port found on 127.0.0.1 that was not handed out before");
}
