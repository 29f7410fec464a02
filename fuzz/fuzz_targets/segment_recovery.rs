//! Recovery of a queue's segment files after damage: the bytes of a
//! message segment and of its ack log, as a crash or a bad disk may leave
//! them, are opened as the broker does at start-up; what is readable is
//! read, the rest refused, never a panic. The first two bytes split the input
//! between the two files.
#![no_main]

use lavinmq::store::message_store::MessageStore;
use lavinmq::store::segment::{acks_name, msgs_name};
use libfuzzer_sys::fuzz_target;

thread_local! {
    static DIR: tempfile::TempDir = tempfile::tempdir().expect("tempdir");
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = usize::from(u16::from_le_bytes([data[0], data[1]])).min(data.len() - 2);
    let (msgs, acks) = data[2..].split_at(split);
    DIR.with(|dir| {
        let dir = dir.path();
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        std::fs::write(dir.join(msgs_name(1)), msgs).expect("write segment");
        std::fs::write(dir.join(acks_name(1)), acks).expect("write acks");
        if let Ok(mut store) = MessageStore::open(dir, "fuzz", 64 * 1024) {
            let mut read = 0;
            while let Some((pos, _)) = store.shift() {
                if let Some(record) = store.read_at(pos) {
                    let _ = record;
                }
                read += 1;
                if read > 100_000 {
                    break;
                }
            }
        }
    });
});
