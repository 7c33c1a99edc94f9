//! The writer identity: which writer this process is, kept in a `WRITER` file beside the log.
//!
//! Sequence numbers are only comparable within one writer, so the stores keep a high-water mark
//! per (series, hour, writer) and the flusher and the refill ask only for their own
//! (docs/design/ingest.md, "Exactly once"). The identity must therefore follow the log: a
//! restart on the same directory is the same writer (its log's readings are judged against its
//! own marks), and two processes must never share one, or each would take the other's stored
//! readings for its own.
//!
//! Two processes on one directory are stopped by the log's `LOCK`. A **copied** directory
//! (a cloned VM or volume, a `cp -r` of a data directory to start a second instance) is found
//! by the place recorded in the file: the device and inode of the directory it was created in.
//! A copy lives elsewhere, so it refuses to start with an error saying what to do. A directory
//! that was moved or restored rather than copied is accepted with `--accept-moved-wal-dir`,
//! which records the new place.
//!
//! Upgrading from schema 1: a log directory that holds segments but no `WRITER` file was left by
//! a bucketd that kept one mark per (series, hour) for every writer. The identity created then
//! records `schema1_before`, the wall clock in nanoseconds: every sequence number in those
//! segments is below it (they start at the wall clock and count up), so the refill judges those
//! readings against the schema-1 mark as well as the writer's own.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::model::{Seq, WriterId};

/// The identity file's name inside the log directory.
pub const FILE: &str = "WRITER";

const HEADER: &str = "# bucketd writer identity: keep with this log directory; never copy it \
                      to another instance (see docs/operations.md, \"Scaling out\")";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub writer: WriterId,
    /// Readings numbered below this were logged by a schema-1 bucketd (0: none were).
    pub schema1_before: Seq,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot use the writer identity {path}: {why}")]
    Io { path: PathBuf, why: String },
    #[error("the writer identity {path} is not one bucketd wrote: {why}")]
    Corrupt { path: PathBuf, why: String },
    #[error(
        "the write-ahead log directory {dir} carries writer identity {writer}, created in another \
         directory (device:inode {recorded}, here {found}): it looks copied. Two bucketd \
         processes with one identity would take each other's stored readings for their own and \
         lose acknowledged data. To start a second instance, give it an empty --wal-dir (and \
         --data-dir). If this directory was moved or restored, not copied, and no other process \
         uses the original, start once with --accept-moved-wal-dir"
    )]
    Copied { dir: PathBuf, writer: WriterId, recorded: String, found: String },
}

/// Reads the identity kept in `dir`, creating the directory and the identity on first start.
/// `accept_moved`: the directory was moved, not copied; record its new place.
pub fn load_or_create(dir: &Path, accept_moved: bool) -> Result<Identity, IdentityError> {
    let path = dir.join(FILE);
    let io = |why: String| IdentityError::Io { path: path.clone(), why };
    std::fs::create_dir_all(dir).map_err(|e| io(format!("cannot create the directory: {e}")))?;
    let place = place_of(dir).map_err(|e| io(format!("cannot stat the directory: {e}")))?;
    let (identity, recorded) = match std::fs::read_to_string(&path) {
        Ok(text) => {
            parse(&text).map_err(|why| IdentityError::Corrupt { path: path.clone(), why })?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let identity = Identity {
                writer: WriterId(random_u64().map_err(|e| io(format!("no randomness: {e}")))?),
                schema1_before: if super::has_segments(dir) { wall_clock_nanos() } else { 0 },
            };
            match create(dir, &path, &render(&identity, &place)) {
                Ok(()) => {
                    tracing::info!(writer = %identity.writer, path = %path.display(), "created this instance's writer identity");
                    return Ok(identity);
                }
                // Another process created it first: use what it wrote (its LOCK stops one of us).
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return load_or_create(dir, accept_moved);
                }
                Err(e) => return Err(io(format!("cannot create: {e}"))),
            }
        }
        Err(e) => return Err(io(format!("cannot read: {e}"))),
    };
    if recorded != place {
        if !accept_moved {
            return Err(IdentityError::Copied {
                dir: dir.to_owned(),
                writer: identity.writer,
                recorded,
                found: place,
            });
        }
        replace(dir, &path, &render(&identity, &place))
            .map_err(|e| io(format!("cannot record the new place: {e}")))?;
        tracing::warn!(writer = %identity.writer, was = %recorded, now = %place, "the write-ahead log directory moved (--accept-moved-wal-dir); keeping its writer identity");
    }
    Ok(identity)
}

fn render(identity: &Identity, place: &str) -> String {
    format!(
        "{HEADER}\nwriter={}\nplace={place}\nschema1_before={}\n",
        identity.writer, identity.schema1_before
    )
}

fn parse(text: &str) -> Result<(Identity, String), String> {
    let (mut writer, mut place, mut schema1_before) = (None, None, None);
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {line:?} is not key=value"));
        };
        match key {
            "writer" => {
                writer = Some(value.parse::<WriterId>().map_err(|e| format!("writer: {e}"))?)
            }
            "place" => place = Some(value.to_owned()),
            "schema1_before" => {
                schema1_before =
                    Some(value.parse::<Seq>().map_err(|e| format!("schema1_before: {e}"))?)
            }
            // Keys a later version adds are kept out of the way, not refused.
            _ => {}
        }
    }
    match (writer, place) {
        (Some(writer), Some(place)) => {
            Ok((Identity { writer, schema1_before: schema1_before.unwrap_or(0) }, place))
        }
        _ => Err("it lacks writer= or place=".into()),
    }
}

/// Where `dir` lives: device and inode, which a copy cannot keep.
#[cfg(unix)]
fn place_of(dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir)?;
    Ok(format!("{}:{}", m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn place_of(dir: &Path) -> std::io::Result<String> {
    Ok(std::fs::canonicalize(dir)?.display().to_string())
}

/// Writes `text` to `path` only if it does not exist, durably: a temporary file, fsync'd, then
/// hard-linked into place (which fails if another process got there first).
fn create(dir: &Path, path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = write_temp(dir, text)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked?;
    sync_dir(dir)
}

/// Replaces `path` with `text` atomically and durably.
fn replace(dir: &Path, path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = write_temp(dir, text)?;
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

fn write_temp(dir: &Path, text: &str) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!("{FILE}.tmp.{}", std::process::id()));
    let mut f = OpenOptions::new().create(true).truncate(true).write(true).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(tmp)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// 64 random bits: two instances that each create an identity must not draw the same one.
fn random_u64() -> std::io::Result<u64> {
    let mut bytes = [0u8; 8];
    let mut f = File::open("/dev/urandom")?;
    std::io::Read::read_exact(&mut f, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

fn wall_clock_nanos() -> Seq {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_the_same_on_every_start() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), false).unwrap();
        assert_eq!(first.schema1_before, 0, "an empty directory has no schema-1 log");
        assert_eq!(load_or_create(dir.path(), false).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(load_or_create(other.path(), false).unwrap().writer, first.writer);
    }

    #[test]
    fn a_copied_directory_is_refused_and_a_moved_one_accepted_when_said() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        let original = load_or_create(&a, false).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::copy(a.join(FILE), b.join(FILE)).unwrap();
        let err = load_or_create(&b, false).unwrap_err();
        assert!(matches!(err, IdentityError::Copied { .. }), "{err}");
        assert!(err.to_string().contains("--accept-moved-wal-dir"), "{err}");
        // Said to be moved: the identity is kept and the new place recorded.
        assert_eq!(load_or_create(&b, true).unwrap(), original);
        assert_eq!(load_or_create(&b, false).unwrap(), original);
    }

    #[test]
    fn a_schema1_log_is_marked_as_such() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("00000000000000000001.wal"), b"").unwrap();
        let before = wall_clock_nanos();
        let identity = load_or_create(dir.path(), false).unwrap();
        assert!(identity.schema1_before >= before);
    }

    #[test]
    fn damage_is_reported_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "writer=zz\nplace=1:2\n").unwrap();
        let err = load_or_create(dir.path(), false).unwrap_err();
        assert!(matches!(err, IdentityError::Corrupt { .. }), "{err}");
    }
}
