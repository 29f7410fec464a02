//! Taking over a LavinMQ 2.x data dir: converting its users (with their
//! password hashes), vhosts, permissions, policies, parameters, exchanges,
//! queues, bindings and every message not yet acked into this broker's own
//! layout, so that switching needs no drain.
//!
//! Two ways in: `lavinmq -D DIR` on a LavinMQ data dir converts it at start,
//! after moving the original files, untouched, into `DIR/lavinmq-backup/`;
//! `lavinmq --convert-lavinmq-data-dir SRC -D DEST` converts without starting
//! and without touching `SRC`.
//!
//! Definitions go through the definitions import, messages through the queues'
//! own publish path (keeping their timestamps, properties and order), so the
//! result is exactly what this broker would have written itself. Memory stays
//! bounded: one source segment is read at a time.

mod definitions_log;
mod messages;
mod segments;
mod source;

use std::io;
use std::path::{Path, PathBuf};

use crate::core::broker::Broker;
use crate::core::vhost::StoreSettings;

pub use messages::QueueReport;
pub use segments::Skipped;

/// Where a data dir taken over at start keeps the original LavinMQ files.
pub const BACKUP_DIR: &str = "lavinmq-backup";

/// Present while a take-over is moving or converting: an interrupted one is
/// redone from the backup at the next start.
const IN_PROGRESS: &str = ".lavinmq-takeover-in-progress";

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// Reading the source or writing the destination failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The destination already holds a broker's data.
    #[error("destination {0} is not empty")]
    DestinationNotEmpty(PathBuf),
    /// The broker could not open the destination or apply a definition.
    #[error("{0}")]
    Broker(String),
    /// The definitions could not be imported (nothing was).
    #[error("definitions: {0}")]
    Definitions(String),
}

impl From<crate::core::Error> for ConvertError {
    fn from(e: crate::core::Error) -> Self {
        ConvertError::Broker(e.to_string())
    }
}

/// What a conversion did.
#[derive(Debug, Default)]
pub struct Report {
    /// Users converted.
    pub users: usize,
    /// Vhosts converted.
    pub vhosts: usize,
    /// Exchanges, queues and bindings converted.
    pub entities: (usize, usize, usize),
    /// Messages per queue (and per delayed exchange).
    pub queues: Vec<QueueReport>,
    /// MQTT retained messages.
    pub retained: usize,
    /// Damaged definition logs (what followed the damage was not converted).
    pub definition_damage: Vec<String>,
}

impl Report {
    /// Messages converted in all.
    pub fn messages(&self) -> u64 {
        self.queues.iter().map(|q| q.messages).sum()
    }

    /// Logs what was converted, queue by queue, and what was skipped.
    pub fn log(&self) {
        let (x, q, b) = self.entities;
        tracing::info!(
            users = self.users,
            vhosts = self.vhosts,
            exchanges = x,
            queues = q,
            bindings = b,
            messages = self.messages(),
            retained = self.retained,
            "LavinMQ data converted"
        );
        for r in &self.queues {
            tracing::info!(vhost = %r.vhost, queue = %r.name, messages = r.messages, "converted");
            for s in &r.skipped {
                tracing::warn!(vhost = %r.vhost, queue = %r.name, file = %s.file.display(), position = s.position,
                               "damaged segment, the rest of it was skipped: {}", s.reason);
            }
        }
        for d in &self.definition_damage {
            tracing::warn!("{d}; definitions after the damage were skipped");
        }
    }
}

/// True when `dir` is a LavinMQ data dir, or a take-over of one that was
/// interrupted.
pub fn needs_take_over(dir: &Path) -> bool {
    dir.join(source::SCHEMA_FILE).exists() || dir.join(IN_PROGRESS).exists()
}

/// The definitions of the LavinMQ data dir `dir` in RabbitMQ's format,
/// without converting anything (`lavinmqctl definitions <datadir>`).
pub fn lavinmq_definitions(dir: &Path) -> Result<serde_json::Value, ConvertError> {
    let (mut doc, _damage) = source::Source::open(dir)?.definitions()?;
    for q in doc["queues"].as_array_mut().into_iter().flatten() {
        if let Some(q) = q.as_object_mut() {
            q.remove(source::SOURCE_NAME);
        }
    }
    Ok(doc)
}

/// Converts the LavinMQ data dir `src` into the empty (or missing) data dir
/// `dest`, leaving `src` untouched.
pub fn convert(src: &Path, dest: &Path, settings: StoreSettings) -> Result<Report, ConvertError> {
    let source = source::Source::open(src)?;
    if std::fs::read_dir(dest).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| ![".lock", IN_PROGRESS, BACKUP_DIR].contains(&e.file_name().to_str().unwrap_or(""))))
    }) {
        return Err(ConvertError::DestinationNotEmpty(dest.to_path_buf()));
    }
    std::fs::create_dir_all(dest)?;
    let (doc, definition_damage) = source.definitions()?;
    // Empty user and vhost lists: no default user or vhost beside the converted ones.
    std::fs::write(dest.join("users.json"), "[]")?;
    std::fs::write(dest.join("vhosts.json"), "[]")?;
    let broker = Broker::open(dest, settings, "", "")?;
    let vhosts = source.vhosts()?;
    for v in &vhosts {
        broker.create_vhost(&v.name)?;
    }
    let body = serde_json::to_vec(&doc).map_err(io::Error::other)?;
    crate::core::definitions_import::import_document(&broker, &body)
        .map_err(|e| ConvertError::Definitions(e.to_string()))?;
    let count = |k: &str| doc[k].as_array().map_or(0, Vec::len);
    let mut report = Report {
        users: count("users"),
        vhosts: vhosts.len(),
        entities: (count("exchanges"), count("queues"), count("bindings")),
        definition_damage,
        ..Report::default()
    };
    for v in &vhosts {
        messages::copy_vhost(&broker, v, &doc, &mut report)?;
    }
    broker.sync_now();
    Ok(report)
}

/// Converts the LavinMQ data dir `dir` in place at start: its files move into
/// `dir/lavinmq-backup/`, and the conversion writes the new layout beside
/// them. An interrupted take-over is redone from the backup.
pub fn take_over(dir: &Path, settings: StoreSettings) -> Result<Report, ConvertError> {
    let backup = dir.join(BACKUP_DIR);
    let marker = dir.join(IN_PROGRESS);
    std::fs::write(&marker, b"")?;
    let keep = |name: &std::ffi::OsStr| name == ".lock" || name == BACKUP_DIR || name == IN_PROGRESS;
    if dir.join(source::SCHEMA_FILE).exists() {
        tracing::warn!(
            "{} is a LavinMQ data dir: converting it; the original files are kept in {}",
            dir.display(),
            backup.display()
        );
        std::fs::create_dir_all(&backup)?;
        // The schema file moves last, so that an interruption is seen as a
        // move still to finish.
        let mut names: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| !keep(n) && n != source::SCHEMA_FILE)
            .collect();
        names.push(source::SCHEMA_FILE.into());
        for name in names {
            std::fs::rename(dir.join(&name), backup.join(&name))?;
        }
    } else {
        tracing::warn!(
            "redoing an interrupted conversion of the LavinMQ data in {}",
            backup.display()
        );
        for e in std::fs::read_dir(dir)?.filter_map(|e| e.ok()) {
            if keep(&e.file_name()) {
                continue;
            }
            let path = e.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
    }
    let report = convert(&backup, dir, settings)?;
    std::fs::remove_file(&marker)?;
    Ok(report)
}
