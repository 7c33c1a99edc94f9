//! Dead letters: readings the store refused for good, kept on disk in line protocol instead of
//! dropped, so that an acknowledged reading is never lost without a trace.
//!
//! # Files
//! `<dir>/<unix ms>-<n>.lp`, appended to until [`FILE_BYTES`], then a new one. Each refused
//! batch is a block:
//!
//! ```text
//! # rejected 2026-11-28T09:30:00.123Z by mongodb: <the store's reason, on one line>
//! # sensor "boiler"
//! boiler,room=cellar value=71.2 1714564800000000000
//! ```
//!
//! The `# sensor` line is there only when the series' key is not the line-protocol text of its
//! measurement and tags (a JSON sensor key such as `boiler`): replaying through the server
//! (`POST /api/v1/dead-letters/replay`) puts the readings back under that key. Timestamps are
//! nanoseconds, line protocol's default precision, so a file is also a valid body for any
//! InfluxDB-compatible `/write`; comment lines are ignored there.
//!
//! A block is written and fsync'd before the flusher settles its readings, so the log keeps
//! them until they are in a dead-letter file. The directory is bounded ([`DeadLetters::open`]'s
//! `max_bytes`): when a block does not fit, [`DeadLetters::write`] fails and the flusher keeps
//! the batch for retry, as for a store outage (the buffers fill, then writes spill or are
//! refused), rather than drop it.
//!
//! # Replay
//! [`DeadLetters::files`] lists the files oldest first; [`blocks`] splits one into its blocks.
//! A replay records how far it got in `<file>.done` (the byte offset of the first block not yet
//! accepted) after each piece, and removes the file and its marker once all of it is back: a
//! crash during a replay so repeats at most the piece in flight.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::DEAD_LETTER_BYTES;
use crate::model::{Batch, FieldValue};

/// A file takes blocks until it is this long; a replay reads a whole file at once.
pub const FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The suffix of a dead-letter file.
const SUFFIX: &str = "lp";
/// The suffix of a replay's progress marker beside its file.
const DONE_SUFFIX: &str = "done";

#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error(
        "the dead-letter directory {dir} is full ({used} of {limit} bytes): replay or remove \
         its files (POST /api/v1/dead-letters/replay) or raise --dead-letter-max-bytes"
    )]
    Full { dir: PathBuf, used: u64, limit: u64 },
    #[error("dead-letter file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DeadLetterError {
    fn io(path: &Path, source: std::io::Error) -> DeadLetterError {
        DeadLetterError::Io { path: path.to_owned(), source }
    }
}

/// What the dead-letter directory holds now, and what was put there since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterCounts {
    /// Files waiting for a replay.
    pub files: u64,
    /// Bytes they take.
    pub bytes: u64,
    /// Readings written to them since the server started.
    pub readings_total: u64,
    /// The store's reason for the latest refusal since start.
    pub last_reason: Option<String>,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("dir", &self.dir)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

pub struct DeadLetters {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    /// Set while a replay runs: two at once would write the same readings back twice.
    replaying: AtomicBool,
}

/// A replay under way; dropping it lets the next one start.
pub struct Replaying<'a>(&'a AtomicBool);

impl Drop for Replaying<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

struct State {
    /// The file being appended to, and its length.
    current: Option<(PathBuf, File, u64)>,
    /// Files made by this process, for unique names within one millisecond.
    made: u64,
    counts: DeadLetterCounts,
}

impl DeadLetters {
    /// Opens `dir` (creating it), counting what an earlier run left there.
    pub fn open(dir: PathBuf, max_bytes: u64) -> Result<DeadLetters, DeadLetterError> {
        std::fs::create_dir_all(&dir).map_err(|e| DeadLetterError::io(&dir, e))?;
        let mut counts = DeadLetterCounts::default();
        for path in list(&dir)? {
            counts.files += 1;
            counts.bytes +=
                std::fs::metadata(&path).map_err(|e| DeadLetterError::io(&path, e))?.len();
        }
        ::metrics::gauge!(DEAD_LETTER_BYTES).set(counts.bytes as f64);
        let state = State { current: None, made: 0, counts };
        Ok(DeadLetters {
            dir,
            max_bytes,
            state: Mutex::new(state),
            replaying: AtomicBool::new(false),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `None` while another replay runs.
    pub fn start_replay(&self) -> Option<Replaying<'_>> {
        let free = self
            .replaying
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        free.then_some(Replaying(&self.replaying))
    }

    pub fn counts(&self) -> DeadLetterCounts {
        self.lock().counts.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one block per refused batch (its readings and `reason`, from `store`) and
    /// fsyncs them: all of them, or an error and none counted.
    pub fn write(&self, store: &str, refused: &[(&Batch, &str)]) -> Result<(), DeadLetterError> {
        if refused.is_empty() {
            return Ok(());
        }
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut text = String::new();
        let mut readings = 0u64;
        for (batch, reason) in refused {
            write_block(&mut text, &now, store, batch, reason);
            readings += batch.len() as u64;
        }
        let len = text.len() as u64;
        let mut state = self.lock();
        let used = state.counts.bytes;
        if used + len > self.max_bytes {
            return Err(DeadLetterError::Full {
                dir: self.dir.clone(),
                used,
                limit: self.max_bytes,
            });
        }
        if state.current.as_ref().is_none_or(|(_, _, n)| *n > 0 && n + len > FILE_BYTES) {
            state.made += 1;
            let name = format!("{}-{}.{SUFFIX}", chrono::Utc::now().timestamp_millis(), state.made);
            let path = self.dir.join(name);
            let file = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .map_err(|e| DeadLetterError::io(&path, e))?;
            // The new name must survive a crash as well as the bytes in it.
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| DeadLetterError::io(&self.dir, e))?;
            state.counts.files += 1;
            state.current = Some((path, file, 0));
        }
        let (path, file, n) = state.current.as_mut().expect("a current file");
        let written = file.write_all(text.as_bytes()).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Whatever part of the block reached the file is cut off again, so that a retry
            // does not leave it there twice; failing that, the next block goes to a new file.
            let path = path.clone();
            if file.set_len(*n).and_then(|()| file.sync_data()).is_err() {
                state.current = None;
            }
            return Err(DeadLetterError::io(&path, e));
        }
        *n += len;
        state.counts.bytes += len;
        state.counts.readings_total += readings;
        state.counts.last_reason = refused.last().map(|(_, r)| (*r).to_owned());
        ::metrics::gauge!(DEAD_LETTER_BYTES).set(state.counts.bytes as f64);
        Ok(())
    }

    /// The files waiting for a replay, oldest first. The file being appended to is closed
    /// first, so that the next refusal starts a new one rather than grow a file being replayed.
    pub fn files(&self) -> Result<Vec<PathBuf>, DeadLetterError> {
        self.lock().current = None;
        list(&self.dir)
    }

    /// Where a replay of `file` got to: the offset of its first block not yet accepted.
    pub fn replayed_up_to(&self, file: &Path) -> Result<usize, DeadLetterError> {
        let done = done_path(file);
        match std::fs::read_to_string(&done) {
            Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(DeadLetterError::io(&done, e)),
        }
    }

    /// Records that `file` is replayed up to `offset`; removes it (and its marker) when that
    /// is its end.
    pub fn mark_replayed(
        &self,
        file: &Path,
        offset: usize,
        len: usize,
    ) -> Result<(), DeadLetterError> {
        let done = done_path(file);
        if offset < len {
            let mut marker = File::create(&done).map_err(|e| DeadLetterError::io(&done, e))?;
            marker
                .write_all(offset.to_string().as_bytes())
                .and_then(|()| marker.sync_data())
                .map_err(|e| DeadLetterError::io(&done, e))?;
            return Ok(());
        }
        std::fs::remove_file(file).map_err(|e| DeadLetterError::io(file, e))?;
        match std::fs::remove_file(&done) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(DeadLetterError::io(&done, e)),
        }
        let mut state = self.lock();
        state.counts.files = state.counts.files.saturating_sub(1);
        state.counts.bytes = state.counts.bytes.saturating_sub(len as u64);
        ::metrics::gauge!(DEAD_LETTER_BYTES).set(state.counts.bytes as f64);
        Ok(())
    }
}

fn done_path(file: &Path) -> PathBuf {
    file.with_extension(format!("{SUFFIX}.{DONE_SUFFIX}"))
}

/// The dead-letter files in `dir`, oldest first (names start with their creation time).
fn list(dir: &Path) -> Result<Vec<PathBuf>, DeadLetterError> {
    let entries = std::fs::read_dir(dir).map_err(|e| DeadLetterError::io(dir, e))?;
    let mut files: Vec<(u64, u64, PathBuf)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == SUFFIX))
        .filter_map(|p| {
            let stem = p.file_stem()?.to_str()?;
            let (ms, n) = stem.split_once('-')?;
            Some((ms.parse().ok()?, n.parse().ok()?, p))
        })
        .collect();
    files.sort();
    Ok(files.into_iter().map(|(_, _, p)| p).collect())
}

/// One block of a dead-letter file: its line-protocol lines, and the sensor key they go back
/// under when it is not their series' text.
#[derive(Debug, PartialEq, Eq)]
pub struct Block<'a> {
    pub sensor: Option<String>,
    pub lines: &'a str,
    /// The offset in the file just past this block.
    pub end: usize,
}

/// The blocks of a dead-letter file's `text` from offset `from` (a block's start).
pub fn blocks(text: &str, from: usize) -> impl Iterator<Item = Block<'_>> + '_ {
    let mut at = from.min(text.len());
    std::iter::from_fn(move || {
        // Skip the block's comment lines, taking its sensor key.
        let mut sensor = None;
        while text[at..].starts_with('#') {
            let end = text[at..].find('\n').map_or(text.len(), |i| at + i + 1);
            if let Some(quoted) = text[at..end].trim_end().strip_prefix("# sensor ") {
                sensor = serde_json::from_str::<String>(quoted).ok();
            }
            at = end;
        }
        if at >= text.len() {
            return None;
        }
        // The lines run to the next block's first comment (a line that starts with `#` can
        // only be a comment: a measurement never starts with one in what bucketd writes).
        let start = at;
        let mut end = at;
        while end < text.len() && !text[end..].starts_with('#') {
            end = next_line(text, end);
        }
        at = end;
        Some(Block { sensor, lines: &text[start..end], end })
    })
}

/// The offset past the line-protocol entry at `at` (a newline inside a quoted string does not
/// end it).
fn next_line(text: &str, at: usize) -> usize {
    let bytes = text.as_bytes();
    let (mut i, mut quoted) = (at, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'\n' if !quoted => return i + 1,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

fn write_block(out: &mut String, now: &str, store: &str, batch: &Batch, reason: &str) {
    let reason: String = reason.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let _ = writeln!(out, "# rejected {now} by {store}: {reason}");
    let series = &batch.series;
    let text = series.series_key();
    if text != series.key() {
        let _ = writeln!(out, "# sensor {}", serde_json::Value::from(series.key()));
    }
    for r in batch.readings() {
        out.push_str(&text);
        for (i, (name, value)) in r.fields.iter().enumerate() {
            out.push(if i == 0 { ' ' } else { ',' });
            escape(out, name, b",= ");
            out.push('=');
            match value {
                FieldValue::Float(f) => {
                    let _ = write!(out, "{f:?}");
                }
                FieldValue::Int(i) => {
                    let _ = write!(out, "{i}i");
                }
                FieldValue::UInt(u) => {
                    let _ = write!(out, "{u}u");
                }
                FieldValue::Bool(b) => {
                    let _ = write!(out, "{b}");
                }
                FieldValue::Str(s) => {
                    out.push('"');
                    escape(out, s, b"\"\\");
                    out.push('"');
                }
            }
        }
        let _ = writeln!(out, " {}", i128::from(r.ts) * 1_000_000);
    }
}

/// Writes `s` with a backslash before each byte of `special`.
fn escape(out: &mut String, s: &str, special: &[u8]) {
    for c in s.chars() {
        if c.is_ascii() && special.contains(&(c as u8)) {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Reading, SeriesMeta};

    fn batch(
        key: &str,
        measurement: &str,
        tags: &[(&str, &str)],
        fields: Vec<(&str, FieldValue)>,
    ) -> Batch {
        let meta = SeriesMeta::new(key, measurement, tags);
        let reading = Reading {
            ts: 3_600_000 + 5,
            fields: fields
                .into_iter()
                .map(|(k, v)| (crate::model::FieldName::from(k), v))
                .collect(),
        };
        Batch::new(meta, 3_600_000, vec![reading])
    }

    #[test]
    fn a_block_is_line_protocol_with_its_reason_and_a_key_line_only_where_needed() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::open(dir.path().to_owned(), 1 << 20).unwrap();
        let lp = batch(
            "c\\,pu,host=a\\ b",
            "c,pu",
            &[("host", "a b")],
            vec![
                ("f", FieldValue::Float(1.0)),
                ("i", FieldValue::Int(-2)),
                ("u", FieldValue::UInt(3)),
                ("b", FieldValue::Bool(true)),
                ("s", FieldValue::Str("say \"hi\"\\\nbye".into())),
            ],
        );
        let json = batch(
            "boiler",
            "boiler",
            &[("room", "cellar")],
            vec![("value", FieldValue::Float(71.25))],
        );
        dl.write("memory", &[(&lp, "no\nroom"), (&json, "too big")]).unwrap();

        let files = dl.files().unwrap();
        assert_eq!(files.len(), 1);
        let text = std::fs::read_to_string(&files[0]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("# rejected ") && lines[0].ends_with(" by memory: no room"),
            "{text}"
        );
        assert_eq!(lines[1], r#"c\,pu,host=a\ b f=1.0,i=-2i,u=3u,b=true,s="say \"hi\"\\"#,);
        assert_eq!(lines[2], "bye\" 3600005000000");
        assert!(lines[3].ends_with("by memory: too big"));
        assert_eq!(lines[4], r#"# sensor "boiler""#);
        assert_eq!(lines[5], "boiler,room=cellar value=71.25 3600005000000");

        let found: Vec<Block<'_>> = blocks(&text, 0).collect();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].sensor, None);
        assert_eq!(found[0].lines.lines().count(), 2, "the string's newline stays in its entry");
        assert_eq!(found[1].sensor.as_deref(), Some("boiler"));
        assert_eq!(found[1].end, text.len());
        // From the second block's start, only it.
        assert_eq!(blocks(&text, found[0].end).count(), 1);

        let counts = dl.counts();
        assert_eq!((counts.files, counts.bytes, counts.readings_total), (1, text.len() as u64, 2));
        assert_eq!(counts.last_reason.as_deref(), Some("too big"));
    }

    /// A series of a database other than the default keeps its database through the file: its
    /// key line names the stored key, prefix and all, for the replay to put it back under.
    #[test]
    fn a_databases_series_keeps_its_key_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::open(dir.path().to_owned(), 1 << 20).unwrap();
        let key = crate::databases::Database::named("telegraf").unwrap().qualify("cpu,host=a");
        let b = batch(&key, "cpu", &[("host", "a")], vec![("v", FieldValue::Float(2.0))]);
        dl.write("memory", &[(&b, "refused")]).unwrap();
        let text = std::fs::read_to_string(&dl.files().unwrap()[0]).unwrap();
        let found: Vec<Block<'_>> = blocks(&text, 0).collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].sensor.as_deref(), Some(key.as_str()), "{text}");
        assert_eq!(found[0].lines.trim_end(), "cpu,host=a v=2.0 3600005000000");
    }

    #[test]
    fn a_full_directory_refuses_the_block_and_a_replay_removes_what_it_finished() {
        let dir = tempfile::tempdir().unwrap();
        let one = batch("m", "m", &[], vec![("v", FieldValue::Float(1.5))]);
        let dl = DeadLetters::open(dir.path().to_owned(), 100).unwrap();
        dl.write("memory", &[(&one, "r")]).unwrap();
        let used = dl.counts().bytes;
        assert!(matches!(dl.write("memory", &[(&one, "r")]), Err(DeadLetterError::Full { .. })));
        assert_eq!(dl.counts().bytes, used, "a refused block takes no room");

        // Another process finds the file and replays it in two steps.
        drop(dl);
        let dl = DeadLetters::open(dir.path().to_owned(), 100).unwrap();
        assert_eq!(dl.counts().files, 1);
        let file = dl.files().unwrap().remove(0);
        let len = std::fs::metadata(&file).unwrap().len() as usize;
        assert_eq!(dl.replayed_up_to(&file).unwrap(), 0);
        dl.mark_replayed(&file, 3, len).unwrap();
        assert_eq!(dl.replayed_up_to(&file).unwrap(), 3);
        dl.mark_replayed(&file, len, len).unwrap();
        assert!(dl.files().unwrap().is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the marker went too");
        assert_eq!((dl.counts().files, dl.counts().bytes), (0, 0));
    }
}
