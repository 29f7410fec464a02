//! Deletes files on a thread of its own, off the threads that serve
//! connections.
//!
//! Deleting a file can wait for the disk: on a filesystem mounted with online
//! discard (ext4's `discard` option, the default of many cloud images), the
//! last unlink of a file whose blocks reached the disk waits until the device
//! has discarded them. Measured with a consumer falling behind its publisher, a
//! worker thread spent a tenth of its time there, and every connection it
//! served waited with it.
//!
//! A file is first renamed, in place, to a spare's name (see
//! [`super::spare_segments::is_spare_name`]): the rename is quick, it is what
//! replication and recovery see (both ignore spares, and opening a store
//! deletes those it finds), and the old name is free at once for a new file,
//! so a deletion that runs later can never hit a file created since.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::mpsc::{Sender, channel};

use parking_lot::Mutex;

/// The reaper thread's queue; `None` when the thread could not be started.
static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();

/// What the reaper thread does, in order.
enum Job {
    Delete(PathBuf),
    /// Tells a test that every job sent before is done.
    #[cfg(test)]
    Settled(Sender<()>),
}

/// Removes `dir/name` as far as anyone can see (a missing file is not an
/// error), reports it to replication, and leaves the deletion of its data to
/// the reaper thread.
pub fn remove(dir: &Path, name: &str) -> io::Result<()> {
    let path = dir.join(name);
    let spare = super::spare_segments::fresh_name(dir);
    match std::fs::rename(&path, &spare) {
        Ok(()) => {
            super::replication::removed(&path);
            delete_later(spare);
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the file at `path`, which nothing else will open again (a spare), on
/// the reaper thread; here and now if that thread cannot be started.
pub fn delete_later(path: PathBuf) {
    if let Err(Job::Delete(path)) = send(Job::Delete(path)) {
        delete_now(&path);
    }
}

/// Hands `job` to the reaper thread, started on first use; the job back when
/// there is no thread.
fn send(job: Job) -> Result<(), Job> {
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let started = std::thread::Builder::new()
            .name("lavinmq-reaper".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Delete(path) => delete_now(&path),
                        #[cfg(test)]
                        Job::Settled(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
        match started {
            Ok(_) => Some(Mutex::new(tx)),
            Err(e) => {
                tracing::warn!("cannot start the file deletion thread, deleting in place: {e}");
                None
            }
        }
    });
    match queue {
        Some(tx) => tx.lock().send(job).map_err(|e| e.0),
        None => Err(job),
    }
}

fn delete_now(path: &Path) {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(file = %path.display(), "cannot delete a removed segment file: {e}");
        }
        _ => {}
    }
}

/// Waits until the reaper has deleted everything handed to it so far, so that
/// tests can look at a folder.
#[cfg(test)]
pub fn settle() {
    let (tx, rx) = channel();
    if send(Job::Settled(tx)).is_ok() {
        let _ = rx.recv();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_files_are_renamed_at_once_and_deleted_later() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("msgs.0000000001"), b"data").unwrap();
        remove(dir.path(), "msgs.0000000001").unwrap();
        remove(dir.path(), "acks.0000000001").unwrap();
        assert!(!dir.path().join("msgs.0000000001").exists());
        // The old name can be used again before the reaper runs.
        std::fs::write(dir.path().join("msgs.0000000001"), b"new").unwrap();
        settle();
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["msgs.0000000001"]);
        assert_eq!(std::fs::read(dir.path().join("msgs.0000000001")).unwrap(), b"new");
    }
}
