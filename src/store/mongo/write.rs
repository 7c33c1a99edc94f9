//! `Store::write`: every batch of a flush becomes one or more upsert statements of unordered
//! `update` commands, with no read before the write.
//!
//! A statement targets "any bucket of this sensor and hour with room for these readings":
//! its filter is `{s, start, v, n <= cap_n - k, bytes <= cap_bytes - size}`. When no bucket has
//! room the upsert creates one, which is how a bucket spills. The `update` command (MongoDB
//! 3.6+) is used rather than the driver's `Client::bulk_write`, which needs MongoDB 8.0; we
//! support 7.0 and later.
//!
//! A statement that MongoDB refuses because the bucket would pass 16 MiB (our size estimate
//! is approximate: statistics of many distinct fields, or buckets written under other caps)
//! is retried into a new bucket with a fresh `_id`, and if even a new bucket is too large, in
//! halves. Only a single reading that cannot fit any document is rejected.
//!
//! # Order within a batch
//! Every statement `$max`es the bucket's `w.<writer>` to the sequence number of its last
//! reading, in the same atomic document update as its readings. A batch larger than one bucket
//! becomes several statements ("runs"); they are sent one per round, in order, and a batch stops
//! at its first failed run. So what a failed batch leaves behind is always a prefix, and the
//! hour's highest `w.<writer>` says exactly how long it is
//! ([`crate::store::Store::high_water`]). A flush whose batches each fit one bucket, the common
//! case, is still a single round. A batch folded into points (`Batch::points`) raises its last
//! run's mark to the unfolded batch's last number; one that meets stored points is written as
//! [`super::points`] says, its mark raised only once all of it is stored.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::Ordering;

use bson::oid::ObjectId;
use bson::{Bson, Document, RawArrayBuf, RawBson, RawDocumentBuf};

use super::document::{self as d, EncodedReading};
use super::points::{self, Plan};
use super::{Inner, error_from_code, error_from_driver, hours, is_too_large};
use crate::model::{Batch, HOUR_MS, MINUTE_MS, Reading, Seq, WriterId};
use crate::store::{BucketLimits, FieldStats, StoreError, WriteReport};

/// Bytes of the `update` command around its statements: the command name and collection,
/// `ordered`, and the array header, rounded up generously.
const COMMAND_OVERHEAD: usize = 256;

/// Each write call gives up after this many rounds of retries. A statement is retried only
/// after a "too large" answer, and each retry either moves it to a new bucket or halves it,
/// so a write of caps up to 2^20 readings needs at most ~22 rounds.
const MAX_ROUNDS: usize = 40;

#[derive(Clone, Copy, Debug)]
enum Target {
    /// Any bucket of the hour with room, or a new one.
    Open,
    /// A new bucket with this `_id`: the filter cannot match an existing document.
    New(ObjectId),
}

struct Work {
    batch: usize,
    readings: Range<usize>,
    target: Target,
    /// Its hour statistics landed (`hours`): a retry of this run (too large) must not send them
    /// again.
    stats_done: bool,
}

/// What [`write`] holds beside its batches' rows: every reading made into a `Reading` and a
/// BSON document up front, then statements that copy the documents, then commands that copy
/// the statements, and the driver's message: about four copies of each value with its field
/// name, and for a batch its filter, tags and statistics paths per field and per field and
/// minute. An estimate on the
/// high side; `the_write_overhead_covers_what_a_write_makes` checks it.
pub(super) const WRITE_OVERHEAD: crate::store::WriteOverhead = crate::store::WriteOverhead {
    per_batch: 2048,
    per_batch_field: 512,
    per_reading: 192,
    per_value: 96,
    per_field_minute: 640,
};

struct BatchState<'a> {
    batch: &'a Batch,
    /// Whose high-water mark the statements raise.
    writer: WriterId,
    /// The mark of the batch's last run: its last sequence number, or the one of the batch it
    /// was folded from (`Batch::points`); `None`: no mark.
    mark: Option<Seq>,
    /// The batch's readings, made once from its rows for the statements' statistics.
    plain: Vec<Reading>,
    /// The same readings as BSON.
    readings: Vec<EncodedReading>,
    report: WriteReport,
    error: Option<StoreError>,
}

impl<'a> BatchState<'a> {
    fn new(batch: &'a Batch, writer: WriterId, mark: Option<Seq>) -> Self {
        let plain: Vec<Reading> = batch.readings().collect();
        let readings = plain.iter().map(d::encode_reading).collect();
        let report = WriteReport::default();
        BatchState { batch, writer, mark, plain, readings, report, error: None }
    }
}

struct Statement {
    work: Work,
    doc: RawDocumentBuf,
}

pub(super) async fn write(
    inner: &Inner,
    writer: WriterId,
    batches: &[Batch],
) -> Vec<Result<WriteReport, StoreError>> {
    let mut outcomes: Vec<Option<Result<WriteReport, StoreError>>> = vec![None; batches.len()];
    let mut appends: Vec<(usize, Cow<'_, Batch>)> = Vec::new();
    let mut overlays: Vec<(usize, points::Overlay)> = Vec::new();
    for (i, plan) in points::plan(inner, batches).await.into_iter().enumerate() {
        match plan {
            Err(e) => outcomes[i] = Some(Err(e)),
            Ok(Plan::Append(batch)) => appends.push((i, batch)),
            // Their met points first (`points`, step 1).
            Ok(Plan::Overlay(o)) => match points::replace_buckets(inner, &o, batches[i].hour).await
            {
                Ok(()) => overlays.push((i, o)),
                Err(e) => outcomes[i] = Some(Err(e)),
            },
        }
    }
    let jobs: Vec<(&Batch, Option<Seq>)> = appends
        .iter()
        .map(|(i, batch)| (&**batch, batches[*i].last_seq()))
        .chain(overlays.iter().map(|(_, o)| (&o.fresh, None)))
        .collect();
    let mut appended = append(inner, writer, &jobs).await.into_iter();
    for ((i, _), outcome) in appends.iter().zip(appended.by_ref()) {
        outcomes[*i] = Some(outcome);
    }
    for ((i, o), outcome) in overlays.iter().zip(appended) {
        let batch = &batches[*i];
        outcomes[*i] = Some(match outcome {
            Ok(report) => points::finish(inner, writer, batch.series.key(), batch.hour, o)
                .await
                .map(|()| report),
            Err(e) => Err(e),
        });
    }
    let outcomes: Vec<Result<WriteReport, StoreError>> =
        outcomes.into_iter().map(|o| o.expect("every batch written or failed")).collect();
    for (batch, outcome) in batches.iter().zip(&outcomes) {
        if outcome.is_ok()
            && let Some(last) = batch.rows().timestamps().max()
        {
            inner.latest.note(batch.series.key(), batch.hour, last);
        }
    }
    outcomes
}

/// Appends each batch's readings, raising the writer's mark of its hour to the batch's `Seq`.
async fn append(
    inner: &Inner,
    writer: WriterId,
    batches: &[(&Batch, Option<Seq>)],
) -> Vec<Result<WriteReport, StoreError>> {
    let mut states: Vec<BatchState> =
        batches.iter().map(|&(batch, mark)| BatchState::new(batch, writer, mark)).collect();

    // Only packing shrinks this; a statement is judged against the server's real limit.
    let mut command_budget = inner.server.max_command_bytes;
    // Per batch, its runs still to write, in order (module doc: "Order within a batch").
    let mut queues: Vec<VecDeque<Work>> = states
        .iter()
        .enumerate()
        .map(|(i, state)| {
            let statement_budget = inner.server.max_command_bytes.saturating_sub(COMMAND_OVERHEAD);
            chunks(state, inner.limits, statement_budget as u64)
                .into_iter()
                .map(|readings| Work {
                    batch: i,
                    readings,
                    target: Target::Open,
                    stats_done: false,
                })
                .collect()
        })
        .collect();

    let mut rounds = 0;
    loop {
        let mut statements = Vec::new();
        for queue in queues.iter_mut() {
            if let Some(work) = queue.pop_front()
                && states[work.batch].error.is_none()
            {
                build(&mut states, work, inner, queue, &mut statements);
            }
        }
        if inner.hour_stats {
            statements = with_stats(inner, writer, &mut states, statements).await;
        }
        // Empty: every batch popped this round has failed (what is left queued is theirs).
        if statements.is_empty() {
            break;
        }
        rounds += 1;
        if rounds > MAX_ROUNDS {
            for st in &statements {
                states[st.work.batch].error.get_or_insert_with(|| {
                    StoreError::Internal(format!("write still retrying after {MAX_ROUNDS} rounds"))
                });
            }
            break;
        }
        for command in pack(statements, inner.server.max_statements, command_budget) {
            let retry = run(inner, &mut states, command).await;
            let works = match retry {
                Retry::Statements(works) => works,
                Retry::SmallerCommands(works) => {
                    // Our estimate of the command size disagreed with the server's: resend
                    // in commands half as large rather than fail batches for our own mistake.
                    command_budget /= 2;
                    works
                }
            };
            // Each goes back to the head of its batch's queue, in order.
            for work in works.into_iter().rev() {
                queues[work.batch].push_front(work);
            }
        }
    }

    states
        .into_iter()
        .map(|s| match s.error {
            Some(e) => Err(e),
            None => Ok(s.report),
        })
        .collect()
}

/// Sends the hour statistics of the statements' runs that have not sent them yet, and keeps
/// only the statements whose statistics landed: a bucket is never ahead of its statistics
/// (`hours`). A batch whose statistics failed fails as a whole, with that error.
async fn with_stats(
    inner: &Inner,
    writer: WriterId,
    states: &mut [BatchState<'_>],
    statements: Vec<Statement>,
) -> Vec<Statement> {
    let todo: Vec<usize> =
        (0..statements.len()).filter(|&i| !statements[i].work.stats_done).collect();
    let runs: Vec<hours::Run<'_>> = todo
        .iter()
        .map(|&i| hours::Run {
            batch: states[statements[i].work.batch].batch,
            readings: statements[i].work.readings.clone(),
        })
        .collect();
    let outcomes = hours::write(inner, writer, &runs).await;
    drop(runs);
    let mut failed = vec![false; statements.len()];
    for (&i, outcome) in todo.iter().zip(outcomes) {
        if let Err(e) = outcome {
            failed[i] = true;
            states[statements[i].work.batch].error.get_or_insert(e);
        }
    }
    statements
        .into_iter()
        .zip(failed)
        .filter(|(st, failed)| !failed && states[st.work.batch].error.is_none())
        .map(|(mut st, _)| {
            st.work.stats_done = true;
            st
        })
        .collect()
}

/// The upsert statements (`{q, u, upsert}`) a flush of `batch` sends when every bucket has
/// room, exactly as [`write`] builds them, without a server. Public for the BSON encoding
/// benchmark; `statement_budget` is the server's command size limit less the command overhead.
pub fn encode_batch(
    batch: &Batch,
    writer: WriterId,
    limits: BucketLimits,
    statement_budget: u64,
) -> Vec<RawDocumentBuf> {
    let state = BatchState::new(batch, writer, batch.last_seq());
    chunks(&state, limits, statement_budget)
        .into_iter()
        .map(|readings| {
            let work = Work { batch: 0, readings, target: Target::Open, stats_done: false };
            statement(&state, &work, limits, super::MINUTE_STATS_BUCKET_VERSION)
        })
        .collect()
}

/// A field's statistics in one statement: the hour's and each minute's, minutes in the order
/// they first appear.
struct RunStats {
    hour: FieldStats,
    minutes: Vec<(i64, FieldStats)>,
}

impl RunStats {
    fn add(&mut self, minute: i64, point: &FieldStats) {
        self.hour.merge(point);
        // Readings mostly come in time order: the latest minute first.
        match self.minutes.iter_mut().rev().find(|(m, _)| *m == minute) {
            Some((_, s)) => s.merge(point),
            None => self.minutes.push((minute, *point)),
        }
    }
}

/// The update's `$inc`, `$min` and `$max` documents, to which a set of statistics adds its six
/// paths.
struct StatsDocs<'a> {
    inc: &'a mut RawDocumentBuf,
    min: &'a mut RawDocumentBuf,
    max: &'a mut RawDocumentBuf,
}

impl StatsDocs<'_> {
    /// Adds `s` under the path `prefix` holds (`stats.<f>` or `ms.<f>.<mm>`), which it leaves
    /// as it found it.
    fn add(&mut self, prefix: &mut String, s: &FieldStats) {
        let len = prefix.len();
        let mut at = |doc: &mut RawDocumentBuf, stat: &str, value: RawBson| {
            prefix.truncate(len);
            prefix.push('.');
            prefix.push_str(stat);
            doc.append(prefix.as_str(), value);
        };
        at(self.inc, d::STAT_SUM, RawBson::Double(s.sum));
        at(self.inc, d::STAT_COUNT, RawBson::Int64(s.count as i64));
        at(self.min, d::STAT_MIN, RawBson::Double(s.min));
        at(self.max, d::STAT_MAX, RawBson::Double(s.max));
        // Always `Some` for statistics of readings; `{t, v}` documents order by time first.
        if let (Some(first), Some(last)) = (s.first, s.last) {
            at(self.min, d::STAT_FIRST, RawBson::Document(d::point(first)));
            at(self.max, d::STAT_LAST, RawBson::Document(d::point(last)));
        }
        prefix.truncate(len);
    }
}

/// Cuts a batch into runs of readings that each fit an empty bucket: at most `max_readings`
/// readings and `max_bytes` of encoded readings, and a statement (readings plus one set of
/// statistics paths per distinct numeric field, and one per field and minute) well under the
/// command budget. A reading larger than the size cap forms a run of its own.
fn chunks(state: &BatchState, limits: BucketLimits, statement_budget: u64) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    let mut statement = 0u64;
    // The numeric fields of the current run, each with the minutes it has statistics for (a
    // bit per minute of the hour).
    let mut fields: Slots<'_, u64> = Slots::default();
    let hour = state.batch.hour;
    for (i, (encoded, reading)) in state.readings.iter().zip(&state.plain).enumerate() {
        let count = (i - start) as u64;
        let bit = 1u64 << (reading.ts - hour).div_euclid(MINUTE_MS).clamp(0, 63);
        let numeric =
            || reading.fields.iter().enumerate().filter(|(_, (_, v))| v.as_f64().is_some());
        let cost = |fields: &Slots<'_, u64>| -> u64 {
            numeric()
                .map(|(at, (name, _))| match fields.find(at, name) {
                    None => 2 * stats_paths_cost(name),
                    Some(minutes) if minutes & bit == 0 => stats_paths_cost(name),
                    Some(_) => 0,
                })
                .sum()
        };
        let mut stats_cost = cost(&fields);
        let full = count >= u64::from(limits.max_readings.max(1))
            || bytes + encoded.size > u64::from(limits.max_bytes)
            || statement + encoded.size + stats_cost > statement_budget;
        if count > 0 && full {
            out.push(start..i);
            start = i;
            bytes = 0;
            statement = 0;
            fields.clear();
            stats_cost = cost(&fields);
        }
        for (at, (name, _)) in numeric() {
            *fields.get_or_insert(at, name, || 0).0 |= bit;
        }
        bytes += encoded.size;
        statement += encoded.size + stats_cost;
    }
    if start < state.readings.len() {
        out.push(start..state.readings.len());
    }
    out
}

/// A value per field name, in the order names first came. Readings of a batch mostly have the
/// same fields in the same order, so a name is first looked for at its position in its
/// reading, and hashed only when it is not there.
struct Slots<'a, T> {
    slots: Vec<(&'a str, T)>,
    index: HashMap<&'a str, usize>,
}

impl<T> Default for Slots<'_, T> {
    fn default() -> Self {
        Slots { slots: Vec::new(), index: HashMap::new() }
    }
}

impl<'a, T> Slots<'a, T> {
    fn position(&self, at: usize, name: &str) -> Option<usize> {
        match self.slots.get(at) {
            Some((n, _)) if *n == name => Some(at),
            _ => self.index.get(name).copied(),
        }
    }

    fn find(&self, at: usize, name: &str) -> Option<&T> {
        self.position(at, name).map(|i| &self.slots[i].1)
    }

    /// The value of `name` (the field at position `at` of its reading), made by `new` if the
    /// name is new; `true` with it when it was.
    fn get_or_insert(
        &mut self,
        at: usize,
        name: &'a str,
        new: impl FnOnce() -> T,
    ) -> (&mut T, bool) {
        let (i, made) = match self.position(at, name) {
            Some(i) => (i, false),
            None => {
                self.index.insert(name, self.slots.len());
                self.slots.push((name, new()));
                (self.slots.len() - 1, true)
            }
        };
        (&mut self.slots[i].1, made)
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
    }
}

/// Upper bound of what one set of a numeric field's statistics adds to a statement, the hour's
/// (`stats.<f>.<stat>`) or a minute's (`ms.<f>.<mm>.<stat>`): six paths of at most 12 bytes
/// beside the name, each with an element header and a value of at most 27 bytes (a `{t, v}`
/// point).
fn stats_paths_cost(name: &str) -> u64 {
    6 * (d::encode_name(name).len() as u64 + 12 + 2 + 27)
}

/// Builds the statement for `work`, halving it until it fits a command on its own; the second
/// half of a split goes back to the head of the batch's `queue` for a later round. A single
/// reading that cannot fit fails its batch.
fn build(
    states: &mut [BatchState<'_>],
    mut work: Work,
    inner: &Inner,
    queue: &mut VecDeque<Work>,
    out: &mut Vec<Statement>,
) {
    loop {
        let doc = statement(&states[work.batch], &work, inner.limits, inner.bucket_version());
        if doc.as_bytes().len() + COMMAND_OVERHEAD + 16 <= inner.server.max_command_bytes {
            out.push(Statement { work, doc });
            return;
        }
        if work.readings.len() <= 1 {
            let size = doc.as_bytes().len();
            states[work.batch].error.get_or_insert(StoreError::Rejected(format!(
                "a reading of {} encodes to a {size}-byte update, more than MongoDB accepts in \
                 one document",
                states[work.batch].batch.series.key()
            )));
            return;
        }
        let [first, second] = halves(&work);
        queue.push_front(second);
        work = first;
    }
}

fn halves(work: &Work) -> [Work; 2] {
    let mid = work.readings.start + work.readings.len() / 2;
    let target = |t: Target| match t {
        Target::Open => Target::Open,
        Target::New(_) => Target::New(ObjectId::new()),
    };
    let half = |readings: Range<usize>| Work {
        batch: work.batch,
        readings,
        target: target(work.target),
        stats_done: work.stats_done,
    };
    [half(work.readings.start..mid), half(mid..work.readings.end)]
}

/// `{q, u, upsert: true}` for `work`; see the module documentation for the document shape.
/// `version`: the bucket's `v` (`Inner::bucket_version`).
fn statement(
    state: &BatchState,
    work: &Work,
    limits: BucketLimits,
    version: i32,
) -> RawDocumentBuf {
    let batch = state.batch;
    let encoded = &state.readings[work.readings.clone()];
    let readings = &state.plain[work.readings.clone()];
    let k = readings.len() as i64;
    let size: i64 = encoded.iter().map(|e| e.size as i64).sum();
    let first = readings.iter().map(|r| r.ts).min().unwrap_or(batch.hour);
    let last = readings.iter().map(|r| r.ts).max().unwrap_or(batch.hour);

    // Statistics of this run, per field in the order fields first appear, and per minute.
    let mut fields: Slots<'_, RunStats> = Slots::default();
    for reading in readings {
        let minute = (reading.ts - batch.hour).div_euclid(MINUTE_MS);
        for (at, (name, value)) in reading.fields.iter().enumerate() {
            if let Some(v) = value.as_f64() {
                let point = FieldStats::of(reading.ts, v);
                let new = || RunStats { hour: point, minutes: vec![(minute, point)] };
                if let (stats, false) = fields.get_or_insert(at, name, new) {
                    stats.add(minute, &point);
                }
            }
        }
    }

    let mut filter = RawDocumentBuf::new();
    let mut on_insert = RawDocumentBuf::new();
    match work.target {
        Target::Open => {
            filter.append(d::SENSOR, batch.series.key());
            filter.append(d::START, d::date(batch.hour));
            filter.append(d::VERSION, version);
            let mut n = RawDocumentBuf::new();
            n.append("$lte", i64::from(limits.max_readings) - k);
            filter.append(d::COUNT, n);
            let mut b = RawDocumentBuf::new();
            b.append("$lte", i64::from(limits.max_bytes) - size);
            filter.append(d::BYTES, b);
        }
        Target::New(id) => {
            filter.append(d::ID, id);
            on_insert.append(d::SENSOR, batch.series.key());
            on_insert.append(d::START, d::date(batch.hour));
            on_insert.append(d::VERSION, version);
        }
    }
    on_insert.append(d::END, d::date(batch.hour + HOUR_MS));
    on_insert.append(d::MEASUREMENT, batch.series.measurement());
    if crate::databases::is_qualified(batch.series.key()) {
        on_insert.append(d::DATABASE, crate::databases::split(batch.series.key()).0);
    }
    let mut tags = RawArrayBuf::new();
    for (k, v) in batch.series.tags() {
        let mut tag = RawDocumentBuf::new();
        tag.append(d::TAG_KEY, k);
        tag.append(d::TAG_VALUE, v);
        tags.push(tag);
    }
    on_insert.append(d::TAGS, tags);

    let mut each = RawArrayBuf::new();
    for e in encoded {
        each.push(e.doc.clone());
    }
    let mut push_each = RawDocumentBuf::new();
    push_each.append("$each", each);
    let mut push = RawDocumentBuf::new();
    push.append(d::READINGS, push_each);

    let mut inc = RawDocumentBuf::new();
    inc.append(d::COUNT, k);
    inc.append(d::BYTES, size);
    let mut min = RawDocumentBuf::new();
    min.append(d::FIRST, d::date(first));
    let mut max = RawDocumentBuf::new();
    max.append(d::LAST, d::date(last));
    let seq = if work.readings.end == state.readings.len() {
        state.mark
    } else {
        work.readings.end.checked_sub(1).and_then(|i| batch.seq(i))
    };
    if let Some(seq) = seq {
        // BSON has no unsigned 64-bit integer; sequence numbers (nanoseconds since 1970 and
        // counting) stay below i64::MAX until the year 2262.
        max.append(d::writer_mark(state.writer), i64::try_from(seq).unwrap_or(i64::MAX));
    }
    // One path buffer for every statistic: `<prefix>.<stat>`.
    let mut path = String::new();
    let mut docs = StatsDocs { inc: &mut inc, min: &mut min, max: &mut max };
    for (name, field) in &fields.slots {
        let key = d::encode_name(name);
        path.clear();
        path.push_str(d::STATS);
        path.push('.');
        path.push_str(&key);
        docs.add(&mut path, &field.hour);
        for (minute, s) in &field.minutes {
            path.clear();
            path.push_str(d::MINUTE_STATS);
            path.push('.');
            path.push_str(&key);
            path.push('.');
            path.push_str(d::minute_key(*minute));
            docs.add(&mut path, s);
        }
    }

    let mut update = RawDocumentBuf::new();
    update.append("$push", push);
    update.append("$inc", inc);
    update.append("$min", min);
    update.append("$max", max);
    update.append("$setOnInsert", on_insert);

    let mut st = RawDocumentBuf::new();
    st.append("q", filter);
    st.append("u", update);
    st.append("upsert", true);
    st
}

/// Groups statements into commands within the server's `maxWriteBatchSize` and a byte
/// budget. `run_command` sends the command as one BSON document, which mongod accepts up to
/// maxBsonObjectSize + 16 KiB; we keep our part within maxBsonObjectSize and leave the 16 KiB
/// to the fields the driver appends (`$db`, `lsid`, `$clusterTime`).
fn pack(statements: Vec<Statement>, max_statements: usize, budget: usize) -> Vec<Vec<Statement>> {
    let mut commands = Vec::new();
    let mut current: Vec<Statement> = Vec::new();
    let mut size = COMMAND_OVERHEAD;
    for st in statements {
        let element = st.doc.as_bytes().len() + 2 + decimal_digits(current.len());
        if !current.is_empty() && (current.len() >= max_statements || size + element > budget) {
            commands.push(std::mem::take(&mut current));
            size = COMMAND_OVERHEAD;
        }
        size += st.doc.as_bytes().len() + 2 + decimal_digits(current.len());
        current.push(st);
    }
    if !current.is_empty() {
        commands.push(current);
    }
    commands
}

fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

enum Retry {
    Statements(Vec<Work>),
    SmallerCommands(Vec<Work>),
}

/// Sends one command and settles each statement: success, a retry (too large), or an error
/// for its batch.
async fn run(inner: &Inner, states: &mut [BatchState<'_>], command: Vec<Statement>) -> Retry {
    let mut updates = RawArrayBuf::new();
    let mut works = Vec::with_capacity(command.len());
    for st in command {
        updates.push(st.doc);
        works.push(st.work);
    }
    let mut cmd = RawDocumentBuf::new();
    cmd.append("update", super::COLLECTION);
    cmd.append("updates", updates);
    cmd.append("ordered", false);
    // The server abandons the command by itself after this long, so a write whose reply we
    // gave up on cannot still land after the flusher has asked for the high-water mark.
    cmd.append("maxTimeMS", i64::try_from(inner.op_timeout.as_millis()).unwrap_or(i64::MAX));

    inner.counters.write_commands.fetch_add(1, Ordering::Relaxed);
    inner.counters.write_statements.fetch_add(works.len() as u64, Ordering::Relaxed);
    let deadline = inner.op_timeout + super::CLIENT_TIMEOUT_MARGIN;
    let reply = match tokio::time::timeout(deadline, inner.db.run_raw_command(cmd)).await {
        Err(_) => {
            Err(StoreError::Unavailable(format!("update command timed out after {deadline:?}")))
        }
        Ok(Err(e)) => {
            if let mongodb::error::ErrorKind::Command(c) = e.kind.as_ref()
                && c.code == 10334
                && works.len() > 1
            {
                return Retry::SmallerCommands(works);
            }
            Err(error_from_driver(e))
        }
        Ok(Ok(reply)) => Ok(reply),
    };
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            for work in &works {
                states[work.batch].error.get_or_insert_with(|| e.clone());
            }
            return Retry::Statements(Vec::new());
        }
    };
    settle(states, works, &reply)
}

fn settle(states: &mut [BatchState<'_>], works: Vec<Work>, reply: &Document) -> Retry {
    // Per statement: Ok(whether it created a bucket) or its write error.
    let mut outcome: Vec<Result<bool, (i32, String)>> = vec![Ok(false); works.len()];
    if let Ok(upserted) = reply.get_array("upserted") {
        for u in upserted {
            if let Some(i) = u.as_document().and_then(|u| index_of(u, works.len())) {
                outcome[i] = Ok(true);
            }
        }
    }
    if let Ok(errors) = reply.get_array("writeErrors") {
        for e in errors.iter().filter_map(Bson::as_document) {
            if let Some(i) = index_of(e, works.len()) {
                let code = e.get("code").and_then(d::number).unwrap_or(0.0) as i32;
                let msg = e.get_str("errmsg").unwrap_or("").to_owned();
                outcome[i] = Err((code, msg));
            }
        }
    }
    // The statements were applied on the primary but not acknowledged as the write concern
    // asks; retrying may store them twice, losing them is worse (at-least-once).
    let concern = reply.get_document("writeConcernError").ok().map(|wce| {
        let code = wce.get("code").and_then(d::number).unwrap_or(0.0) as i32;
        let msg = wce.get_str("errmsg").unwrap_or("").to_owned();
        StoreError::Unavailable(format!("write concern error {code}: {msg}"))
    });

    let mut retry = Vec::new();
    for (work, outcome) in works.into_iter().zip(outcome) {
        let state = &mut states[work.batch];
        match outcome {
            Ok(created) => {
                if created {
                    state.report.buckets_created += 1;
                }
                if let Some(e) = &concern {
                    state.error.get_or_insert_with(|| e.clone());
                }
            }
            Err((code, msg)) if is_too_large(code, &msg) => match work.target {
                Target::Open => retry.push(Work { target: Target::New(ObjectId::new()), ..work }),
                Target::New(_) if work.readings.len() > 1 => retry.extend(halves(&work)),
                Target::New(_) => {
                    state.error.get_or_insert_with(|| {
                        StoreError::Rejected(format!(
                            "a reading of {} does not fit a MongoDB document: {msg}",
                            state.batch.series.key()
                        ))
                    });
                }
            },
            Err((code, msg)) => {
                state.error.get_or_insert_with(|| error_from_code(code, &msg));
            }
        }
    }
    Retry::Statements(retry)
}

fn index_of(doc: &Document, len: usize) -> Option<usize> {
    let i = doc.get("index").and_then(d::number)? as usize;
    (i < len).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, Reading, SeriesMeta};

    fn batch(sizes: &[usize]) -> Batch {
        Batch::numbered(
            crate::model::Series::from(SeriesMeta::untagged("s", "m")),
            0,
            sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Reading {
                    ts: i as i64,
                    fields: smallvec::smallvec![("x".into(), FieldValue::Str("x".repeat(n)))],
                })
                .collect(),
            vec![],
        )
    }

    fn state(batch: &Batch) -> BatchState<'_> {
        BatchState::new(batch, WriterId(1), batch.last_seq())
    }

    /// The overhead the flusher counts for a write covers what `write` makes of a batch: a
    /// `Reading` and an encoding per reading, and the statements with two more copies of them
    /// (the command and the driver's message), for narrow and wide readings alike, within one
    /// minute or each in a minute of its own.
    #[test]
    fn the_write_overhead_covers_what_a_write_makes() {
        let cases = [(1, 1, 1), (1, 2, 1), (10, 2, 1), (60, 2, 1), (100, 256, 1)];
        let spread = [(10, 2, MINUTE_MS), (60, 3, MINUTE_MS), (100, 2, 30_000), (30, 256, 90_000)];
        for (n, fields, apart) in cases.into_iter().chain(spread) {
            let readings: Vec<Reading> = (0..n)
                .map(|i| Reading {
                    ts: (i as i64 * apart) % HOUR_MS,
                    fields: (0..fields)
                        .map(|f| (format!("f{f}").into(), FieldValue::Float(f as f64 + 0.5)))
                        .collect(),
                })
                .collect();
            let series = SeriesMeta::new(
                "env,site=north,sensor=s000042",
                "env",
                &[("sensor", "s000042"), ("site", "north")],
            );
            let b = Batch::numbered(series, 0, readings, (1..=n as u64).collect());
            let st = state(&b);
            let objects: usize = st
                .plain
                .iter()
                .map(|r| size_of::<Reading>() + r.fields.len() * size_of_val(&r.fields[0]))
                .sum();
            let encodings: usize = st.readings.iter().map(|e| e.doc.as_bytes().len()).sum();
            let limits = BucketLimits { max_readings: 1000, max_bytes: 16 << 20 };
            let statements: usize = encode_batch(&b, WriterId(1), limits, 16 << 20)
                .iter()
                .map(|s| s.as_bytes().len())
                .sum();
            let held = objects + encodings + 3 * statements;
            let counted = WRITE_OVERHEAD.of(n, fields);
            assert!(
                counted >= held,
                "{n} readings of {fields} fields {apart} ms apart: {counted} < {held}"
            );
        }
    }

    #[test]
    fn chunks_respect_count_and_size_caps() {
        let b = batch(&[10; 7]);
        let by_count = BucketLimits { max_readings: 3, max_bytes: 1 << 20 };
        assert_eq!(chunks(&state(&b), by_count, 1 << 24), vec![0..3, 3..6, 6..7]);
        let one = state(&b).readings[0].size as u32;
        let by_size = BucketLimits { max_readings: 100, max_bytes: 2 * one + 1 };
        assert_eq!(chunks(&state(&b), by_size, 1 << 24), vec![0..2, 2..4, 4..6, 6..7]);
    }

    #[test]
    fn an_oversized_reading_is_a_chunk_of_its_own() {
        let b = batch(&[10, 5000, 10, 10]);
        let limits = BucketLimits { max_readings: 100, max_bytes: 1000 };
        assert_eq!(chunks(&state(&b), limits, 1 << 24), vec![0..1, 1..2, 2..4]);
    }

    #[test]
    fn chunks_stay_under_the_statement_budget() {
        let b = batch(&[100; 10]);
        let limits = BucketLimits { max_readings: 100, max_bytes: 1 << 20 };
        let sizes: Vec<Range<usize>> = chunks(&state(&b), limits, 450);
        assert!(sizes.iter().all(|r| r.len() <= 3), "{sizes:?}");
        assert_eq!(sizes.iter().map(|r| r.len()).sum::<usize>(), 10);
    }

    fn statement_of(len: usize) -> Statement {
        let mut doc = RawDocumentBuf::new();
        doc.append("p", "p".repeat(len));
        Statement {
            work: Work { batch: 0, readings: 0..1, target: Target::Open, stats_done: false },
            doc,
        }
    }

    #[test]
    fn commands_respect_statement_count_and_bytes() {
        let sizes =
            |commands: &Vec<Vec<Statement>>| commands.iter().map(Vec::len).collect::<Vec<_>>();
        let by_count = pack((0..25).map(|_| statement_of(10)).collect(), 10, 1 << 20);
        assert_eq!(sizes(&by_count), vec![10, 10, 5]);
        let by_bytes = pack((0..10).map(|_| statement_of(1000)).collect(), 100, 3500);
        assert_eq!(sizes(&by_bytes), vec![3, 3, 3, 1]);
        for command in &by_bytes {
            let total: usize = command.iter().map(|s| s.doc.as_bytes().len() + 2 + 1).sum();
            assert!(total + COMMAND_OVERHEAD <= 3500);
        }
        // A statement larger than the budget still goes, alone.
        assert_eq!(sizes(&pack(vec![statement_of(10), statement_of(5000)], 100, 3500)), vec![1, 1]);
    }

    #[test]
    fn digits() {
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
        assert_eq!(decimal_digits(99_999), 5);
    }
}
