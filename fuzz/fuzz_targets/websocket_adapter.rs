//! The WebSocket adapter: whatever a client sends after a WebSocket upgrade
//! (frames of any kind, masked or not, fragmented, control frames, carrying
//! AMQP or MQTT or garbage) reaches the protocol adapters through the byte
//! stream the broker makes of the WebSocket, and the broker ends the
//! connection cleanly, never with a panic. A real broker runs in this process
//! on ephemeral ports; each input is one connection to its HTTP listener.
//! The first byte picks the path: odd `/mqtt` (MQTT), even `/` (AMQP).
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use lavinmq::config::Config;
use lavinmq::server::Server;
use libfuzzer_sys::fuzz_target;

/// The broker the inputs are sent to, started once.
struct Target {
    http: SocketAddr,
    _server: Server,
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn start() -> Target {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.main.data_dir = dir.path().to_path_buf();
    config.main.control_unix_path = dir.path().join("ctl.sock");
    config.main.metrics_http_port = Some(0);
    // Failed logins are the common case here: no growing delays.
    config.main.login_throttle = false;
    config.amqp.bind = "127.0.0.1".to_owned();
    config.amqp.port = 0;
    config.mqtt.bind = "127.0.0.1".to_owned();
    config.mqtt.port = 0;
    config.mgmt.bind = "127.0.0.1".to_owned();
    config.mgmt.port = 0;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let server = runtime.block_on(Server::start(&config)).expect("broker starts");
    Target {
        http: server.http_addr(),
        _server: server,
        _runtime: runtime,
        _dir: dir,
    }
}

thread_local! {
    static TARGET: Target = start();
}

/// Reads what is there, again when libFuzzer's timer signal interrupted it.
fn read(socket: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match socket.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, frames)) = data.split_first() else {
        return;
    };
    let path = if first & 1 == 1 { "/mqtt" } else { "/" };
    let http = TARGET.with(|t| t.http);
    let mut socket = TcpStream::connect(http).expect("connect to the HTTP listener");
    socket
        .set_read_timeout(Some(Duration::from_secs(8)))
        .expect("read timeout");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {http}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).expect("send the upgrade request");
    // As a WebSocket client does: the frames follow the broker's answer.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match read(&mut socket, &mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("no answer to the upgrade request: {e}"),
        }
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "the upgrade is accepted: {:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    // The broker may close before it has read everything.
    let _ = socket.write_all(frames);
    let _ = socket.shutdown(Shutdown::Write);
    // Until the broker closes: the connection is over before the next input.
    loop {
        match read(&mut socket, &mut chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert_ne!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock,
                    "the broker did not close the connection"
                );
                break;
            }
        }
    }
});
