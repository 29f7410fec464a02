//! The free-disk-space alarm: below `free_disk_min` publishers get
//! connection.blocked and are not read; when space returns they get
//! connection.unblocked and their held-back messages arrive.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_disk_blocks_publishers_and_unblocks_them_when_space_returns() {
    // A threshold far above any real disk: the alarm is on from the start.
    let broker = start_with(|c| c.main.free_disk_min = u64::MAX / 2).await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    // Published while blocked: held back, not lost, and the publisher is told.
    publish(&ch, "", &q, b"held").await;
    eventually("connection.blocked received", || async { conn.status().blocked() }).await;
    let (observer, _och) = broker.channel().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        message_count(&observer, &q).await,
        0,
        "a blocked publisher must not be read"
    );
    broker.server().broker.disk.set_min_free(0);
    eventually("connection.unblocked received", || async { !conn.status().blocked() }).await;
    eventually("held message delivered", || async {
        message_count(&observer, &q).await == 1
    })
    .await;
}

/// A tmpfs of `mib` MiB mounted for one test, unmounted on drop; `None`
/// (with the reason printed) where mounting is not allowed.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(mib: u64) -> Option<SmallFs> {
        let dir = tempfile::tempdir().ok()?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallFs { dir }),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs here ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn free(&self) -> u64 {
        let s = rustix::fs::statvfs(self.path()).expect("statvfs");
        s.f_bavail * s.f_frsize
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_floor_of_three_segments_blocks_publishers_with_no_setting() {
    const MIB: u64 = 1024 * 1024;
    let Some(fs) = SmallFs::mount(64) else { return };
    let data = fs.path().join("data");
    // No free_disk_min: only the floor, 3 × the 8 MiB segment size, applies.
    let broker = start_with(|c| c.main.data_dir = data.clone()).await;
    assert_eq!(broker.server().broker.disk.min_free(), 24 * MIB);
    let api = crate::common::api::Api::new(&broker);
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    assert!(!conn.status().blocked());
    let (status, _) = api.get("/api/health/checks/alarms").await;
    assert_eq!(status, 200);

    // Leave 16 MiB free: under the floor, though far from full.
    let filler = fs.path().join("filler");
    let fill = fs.free() - 16 * MIB;
    std::fs::write(&filler, vec![0u8; fill as usize]).expect("fill the tmpfs");
    publish(&ch, "", &q, b"held").await;
    eventually("connection.blocked received", || async { conn.status().blocked() }).await;
    let (status, _) = api.get("/api/health/checks/alarms").await;
    assert_ne!(status, 200, "the alarm shows in the health check");
    let node = api.get_ok("/api/nodes").await;
    assert_eq!(node[0]["disk_free_alarm"], true, "{node}");
    assert_eq!(node[0]["disk_free_limit"], 24 * MIB, "{node}");
    let metrics_url = format!("http://{}/metrics", broker.server().metrics_addr().unwrap());
    let metrics = reqwest::get(&metrics_url).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("lavinmq_alarms_free_disk_space_watermark 1")
            && metrics.contains(&format!("lavinmq_disk_space_available_limit_bytes {}", 24 * MIB)),
        "{metrics}"
    );

    std::fs::remove_file(&filler).unwrap();
    eventually("connection.unblocked received", || async { !conn.status().blocked() }).await;
    let (observer, _och) = broker.channel().await;
    eventually("held message delivered", || async {
        message_count(&observer, &q).await == 1
    })
    .await;
    drop(observer);
    broker.stop().await;
}
