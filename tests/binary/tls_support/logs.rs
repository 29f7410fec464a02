//! Captures what the in-process broker logs, so tests can check that a failed
//! handshake is reported with the client's address.

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

/// Everything logged so far by this test binary.
static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

/// An `io::Write` appending to [`LOG`].
struct Sink(Arc<Mutex<Vec<u8>>>);

impl io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber (once per test binary).
pub fn capture() {
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let writer = log.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(move || Sink(writer.clone()))
            .try_init();
        log
    });
}

/// The captured log lines that contain every one of `needles`.
pub fn lines_with(needles: &[&str]) -> Vec<String> {
    let log = LOG.get().expect("capture() was called");
    let text = String::from_utf8_lossy(&log.lock().unwrap()).to_string();
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}
