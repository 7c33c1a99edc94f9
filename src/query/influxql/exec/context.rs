//! Runs parsed statements against the store and the unflushed buffers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::stream::BoxStream;
use serde::Serialize;
use serde_json::Value;

use super::cond::compile_regex;
use super::error::{ExecError, over_time};
use crate::query::influxql::syntax::ast::Source;

use crate::model::{FieldValue, Reading, TimestampMs};
use crate::query::kept::Kept;
use crate::query::listed;
use crate::query::merge::merge;
use crate::query::points;
use crate::query::rollups::{each_step_value, merge_unflushed, merged_rollups};
use crate::query::state::QueryState;
use crate::store::{
    Need, Order, RangeQuery, RollupQuery, RollupSteps, Run, SensorInfo, SensorQuery, StepValues,
    StoreError,
};
use crate::tokens::{Grant, Scope};

/// The one retention policy: `FROM "autogen"."m"` reads `m`, any other policy is not found.
pub const RETENTION_POLICY: &str = "autogen";

/// Series one statement may read: bounds the series lists held while answering it.
pub const MAX_SERIES: usize = 100_000;

/// One series of a statement's result, in InfluxDB 1.x's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    pub columns: Vec<String>,
    #[serde(serialize_with = "as_go_writes_them")]
    pub values: Vec<Vec<Value>>,
}

/// Go's JSON writes a whole float without a fraction (`21`, not `21.0`), and clients and tests
/// written against InfluxDB compare the text. Done as the rows are written, so that the values
/// keep their types for arithmetic and fill, and no pass over the rows is made for it.
fn as_go_writes_them<S: serde::Serializer>(rows: &[Vec<Value>], s: S) -> Result<S::Ok, S::Error> {
    struct Row<'a>(&'a [Value]);
    struct Cell<'a>(&'a Value);
    impl Serialize for Row<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter().map(Cell))
        }
    }
    impl Serialize for Cell<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            // Every float from 2^63 up is whole; below, whole when it survives a round trip
            // through i64 (`fract` is a library call on the baseline x86-64 target).
            const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;
            // Floats are written here rather than through `Value`'s own `serialize`, which
            // matches on the value again to reach the same calls.
            let Value::Number(n) = self.0 else { return self.0.serialize(s) };
            let Some(f) = n.as_f64().filter(|_| n.is_f64()) else { return n.serialize(s) };
            let size = f.abs();
            if size < I64_BOUND && (f as i64) as f64 == f {
                s.serialize_i64(f as i64)
            } else if (I64_BOUND..1e21).contains(&size) {
                // Go writes digits, not an exponent, below 1e21; i128 holds those exactly.
                s.serialize_i128(f as i128)
            } else {
                s.serialize_f64(f)
            }
        }
    }
    s.collect_seq(rows.iter().map(|row| Row(row)))
}

/// How times are written: `epoch=ns|u|µ|ms|s|m|h`, or RFC 3339 strings without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epoch {
    Rfc3339,
    Ns,
    Us,
    Ms,
    S,
    M,
    H,
}

impl Epoch {
    pub fn parse(s: Option<&str>) -> Result<Epoch, String> {
        Ok(match s {
            None | Some("") => Epoch::Rfc3339,
            Some("ns" | "n") => Epoch::Ns,
            Some("u" | "µ" | "us") => Epoch::Us,
            Some("ms") => Epoch::Ms,
            Some("s") => Epoch::S,
            Some("m") => Epoch::M,
            Some("h") => Epoch::H,
            Some(other) => {
                return Err(format!("invalid epoch {other:?}: use ns, u, ms, s, m or h"));
            }
        })
    }

    pub fn format(self, ms: TimestampMs) -> Value {
        let div = |d: i64| Value::from(ms / d);
        match self {
            Epoch::Rfc3339 => Value::String(rfc3339(ms)),
            // Every millisecond bucketd keeps fits in i64 nanoseconds except past year 2262.
            Epoch::Ns => ms.checked_mul(1_000_000).map_or(Value::Null, Value::from),
            Epoch::Us => Value::from(ms * 1_000),
            Epoch::Ms => Value::from(ms),
            Epoch::S => div(1_000),
            Epoch::M => div(60_000),
            Epoch::H => div(3_600_000),
        }
    }
}

/// RFC 3339 with the fraction's trailing zeros dropped, as InfluxDB writes times.
fn rfc3339(ms: TimestampMs) -> String {
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else { return ms.to_string() };
    let mut s = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    push_fraction(&mut s, ms);
    s.push('Z');
    s
}

/// The same in a zone, with its offset (`2024-03-01T00:00:00+01:00`).
fn rfc3339_in(ms: TimestampMs, zone: chrono_tz::Tz) -> String {
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else { return ms.to_string() };
    let local = t.with_timezone(&zone);
    let mut s = local.format("%Y-%m-%dT%H:%M:%S").to_string();
    push_fraction(&mut s, ms);
    s.push_str(&local.format("%:z").to_string());
    s
}

fn push_fraction(s: &mut String, ms: TimestampMs) {
    let frac = ms.rem_euclid(1_000);
    if frac != 0 {
        let digits = format!("{frac:03}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
}

/// A field's InfluxQL type, as `SHOW FIELD KEYS` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Float,
    Integer,
    String,
    Boolean,
}

impl FieldKind {
    pub fn of(v: &FieldValue) -> FieldKind {
        match v {
            FieldValue::Float(_) => FieldKind::Float,
            FieldValue::Int(_) | FieldValue::UInt(_) => FieldKind::Integer,
            FieldValue::Str(_) => FieldKind::String,
            FieldValue::Bool(_) => FieldKind::Boolean,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FieldKind::Float => "float",
            FieldKind::Integer => "integer",
            FieldKind::String => "string",
            FieldKind::Boolean => "boolean",
        }
    }
}

/// What a statement runs with: what every statement of one request shares, and its own
/// deadline.
pub struct Ctx<'a> {
    pub state: &'a QueryState,
    /// `now()`, fixed for the whole request as in InfluxDB.
    pub now_ns: i64,
    pub epoch: Epoch,
    /// When the statement's time budget (`QueryLimits::statement_time`) runs out.
    pub deadline: std::time::Instant,
    /// Where the readings begin when `--retention` cut the statement's range: its warning.
    pub kept: Arc<Kept>,
    /// The request's token, when tokens are on: `SHOW DATABASES` lists what it may read.
    pub grant: Option<&'a Grant>,
}

impl Ctx<'_> {
    /// Whether the request's token, if any, may read `database`.
    pub fn may_read(&self, database: &str) -> bool {
        self.grant.is_none_or(|g| g.access.allow(Scope::Read, database))
    }

    pub fn time(&self, ms: TimestampMs) -> Value {
        self.epoch.format(ms)
    }

    /// A time in the statement's `tz(…)`: RFC 3339 strings carry the zone's offset; epochs are
    /// the same in every zone.
    pub fn time_in(&self, ms: TimestampMs, zone: Option<chrono_tz::Tz>) -> Value {
        match (self.epoch, zone) {
            (Epoch::Rfc3339, Some(z)) => Value::String(rfc3339_in(ms, z)),
            _ => self.epoch.format(ms),
        }
    }

    /// Fails once the statement's time budget is spent. Called by the loops that run once per
    /// reading or window, where an expensive statement spends its time without awaiting.
    pub fn check_deadline(&self) -> Result<(), ExecError> {
        if std::time::Instant::now() < self.deadline {
            return Ok(());
        }
        Err(over_time(self.state.limits.statement_time))
    }

    /// Every series (stored, or only buffered so far) of the measurements `sources` name, by
    /// measurement; every measurement when `sources` is empty. At most [`MAX_SERIES`].
    pub async fn series_of(
        &self,
        sources: &[Source],
    ) -> Result<BTreeMap<String, Vec<Arc<SensorInfo>>>, ExecError> {
        let mut names = Vec::new();
        let mut regexes = Vec::new();
        for s in sources {
            let (Source::Measurement { retention_policy, .. }
            | Source::Regex { retention_policy, .. }) = s;
            if let Some(rp) = retention_policy.as_deref().filter(|rp| *rp != RETENTION_POLICY) {
                return Err(ExecError::new(format!("retention policy not found: {rp}")));
            }
            match s {
                Source::Measurement { name, .. } => names.push(name.clone()),
                Source::Regex { pattern, .. } => regexes.push(compile_regex(pattern)?),
            }
        }
        let mut found: BTreeMap<String, Arc<SensorInfo>> = BTreeMap::new();
        let wanted = |m: &str| {
            sources.is_empty()
                || names.iter().any(|n| n == m)
                || regexes.iter().any(|r| r.is_match(m))
        };
        // A named measurement is listed by the store's index; a regex needs every series.
        let listings: Vec<Option<String>> = if regexes.is_empty() && !sources.is_empty() {
            names.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        for measurement in listings {
            self.list(measurement, &wanted, &mut found).await?;
        }
        let unstored = self.state.unflushed.unflushed_sensors_except(&|k| found.contains_key(k));
        for s in unstored {
            if !wanted(&s.measurement) {
                continue;
            }
            found.insert(s.key.clone(), Arc::new(s));
            if found.len() > MAX_SERIES {
                return Err(too_many_series());
            }
        }
        let mut by_measurement: BTreeMap<String, Vec<Arc<SensorInfo>>> = BTreeMap::new();
        for (_, s) in found {
            match by_measurement.get_mut(&s.measurement) {
                Some(series) => series.push(s),
                None => {
                    by_measurement.insert(s.measurement.clone(), vec![s]);
                }
            }
        }
        Ok(by_measurement)
    }

    /// The store's series of `measurement` (of every one: `None`) that are `wanted`, into
    /// `found`: from the listing kept since the store's series last changed, if there is one.
    async fn list(
        &self,
        measurement: Option<String>,
        wanted: &impl Fn(&str) -> bool,
        found: &mut BTreeMap<String, Arc<SensorInfo>>,
    ) -> Result<(), ExecError> {
        let listings = &self.state.listings;
        let database = self.state.database.name();
        // Read before the listing: a series created meanwhile makes the listing kept stale.
        let generation = self.state.store.series_generation();
        if let Some(g) = generation
            && let Some(kept) = listings.get(database, measurement.as_deref(), g)
        {
            for s in kept.iter().filter(|s| wanted(&s.measurement)) {
                found.insert(s.key.clone(), s.clone());
                if found.len() > MAX_SERIES {
                    return Err(too_many_series());
                }
            }
            return Ok(());
        }
        // The whole listing, to keep; dropped once it passes what may be kept.
        let mut whole: Option<(Vec<Arc<SensorInfo>>, usize)> = generation.map(|_| (Vec::new(), 0));
        let page = self.state.limits.max_sensors;
        let mut after = None;
        loop {
            let batch = self
                .state
                .store
                .sensors(SensorQuery {
                    database: Default::default(),
                    tags: Vec::new(),
                    measurement: measurement.clone(),
                    after: after.take(),
                    limit: page,
                })
                .await?;
            let full = batch.len() == page;
            after = batch.last().map(|s| s.key.clone());
            for s in batch {
                let s = Arc::new(s);
                if let Some((all, bytes)) = &mut whole {
                    *bytes += listed::bytes_of(&s);
                    all.push(s.clone());
                }
                if whole.as_ref().is_some_and(|(_, bytes)| *bytes > listed::MAX_BYTES) {
                    whole = None;
                }
                if wanted(&s.measurement) {
                    found.insert(s.key.clone(), s);
                }
            }
            if found.len() > MAX_SERIES {
                return Err(too_many_series());
            }
            if !full || after.is_none() {
                break;
            }
        }
        if let (Some(g), Some((all, bytes))) = (generation, whole) {
            listings.put(database, measurement, g, all, bytes);
        }
        Ok(())
    }

    /// The readings of one series in `[from, to)`, unflushed ones merged in; from where they
    /// are kept if `--retention` cut the range, noted for the statement's warning.
    pub fn readings(
        &self,
        key: &str,
        from: TimestampMs,
        to: TimestampMs,
        order: Order,
    ) -> BoxStream<'static, Result<Reading, StoreError>> {
        self.readings_noted(key, from, to, (order, None), &self.kept)
    }

    /// The stored runs of one series in `[from, to)`, ascending, when none of its unflushed
    /// readings falls there: a fold whose result does not depend on how readings interleave
    /// across fields may then read their columns. `Err` with those unflushed readings when
    /// some do, for [`Ctx::readings_with`].
    pub fn stored_runs(
        &self,
        key: &str,
        from: TimestampMs,
        to: TimestampMs,
    ) -> Result<BoxStream<'static, Result<Run, StoreError>>, Vec<Reading>> {
        let unflushed = self.state.unflushed.unflushed(key, from, to);
        if !unflushed.is_empty() {
            return Err(unflushed);
        }
        let query = RangeQuery { sensor: key.to_owned(), from, to, order: Order::Asc, limit: None };
        Ok(self.kept.runs(self.state.store.clone(), query))
    }

    /// [`Ctx::readings`] ascending, with the series' unflushed readings in `[from, to)`
    /// already taken from the buffers.
    pub fn readings_with(
        &self,
        key: &str,
        from: TimestampMs,
        to: TimestampMs,
        unflushed: Vec<Reading>,
    ) -> BoxStream<'static, Result<Reading, StoreError>> {
        let query = RangeQuery { sensor: key.to_owned(), from, to, order: Order::Asc, limit: None };
        merge(self.kept.readings(self.state.store.clone(), query), unflushed, Order::Asc)
    }

    /// The same for a probe that decides how to answer (field types), not what: a cut range
    /// is not noted. A probe reads a few readings: without `limit`, the store's reader reads
    /// ahead a batch of chunks before it learns that the stream was dropped.
    pub fn probe(
        &self,
        key: &str,
        (from, to): (TimestampMs, TimestampMs),
        order: Order,
        limit: usize,
    ) -> BoxStream<'static, Result<Reading, StoreError>> {
        self.readings_noted(key, from, to, (order, Some(limit)), &Arc::default())
    }

    /// `(order, limit)`: a limit bounds what the store reads, not what the buffers add.
    fn readings_noted(
        &self,
        key: &str,
        from: TimestampMs,
        to: TimestampMs,
        (order, limit): (Order, Option<usize>),
        kept: &Arc<Kept>,
    ) -> BoxStream<'static, Result<Reading, StoreError>> {
        // Buffers before the store: double counting is possible during a flush, missing is not.
        let unflushed = self.state.unflushed.unflushed(key, from, to);
        let query = RangeQuery { sensor: key.to_owned(), from, to, order, limit };
        merge(kept.readings(self.state.store.clone(), query), unflushed, order)
    }

    pub async fn rollups(
        &self,
        key: &str,
        range: super::cond::TimeRange,
        step_ms: i64,
        fields: Option<&[String]>,
        need: Need,
    ) -> Result<RollupSteps, ExecError> {
        let query = RollupQuery {
            sensor: key.to_owned(),
            from: range.from,
            to: range.to,
            step_ms,
            fields: fields.map(<[String]>::to_vec),
        };
        Ok(merged_rollups(self.state, &self.kept, query, need).await?)
    }

    /// [`Ctx::rollups`] of several series over one range, each with [`Ctx::field_kinds`], read
    /// from the store in one call each. `None` when the store answers with any error (a range
    /// past the retention among them): asked one by one, each series then gets its own answer
    /// or error.
    pub async fn rollups_of(
        &self,
        infos: &[&SensorInfo],
        range: super::cond::TimeRange,
        step_ms: i64,
        fields: Option<&[String]>,
        need: Need,
    ) -> Option<Vec<(Option<HashMap<String, FieldKind>>, RollupSteps)>> {
        // Buffers before the store, as for one series.
        let unflushed: Vec<_> = infos
            .iter()
            .map(|info| self.state.unflushed.unflushed(&info.key, range.from, range.to))
            .collect();
        let keys = infos.iter().map(|info| info.key.clone()).collect();
        let latest = self.state.store.latest_of(keys, (range.from, range.to)).await.ok()?;
        let queries = infos
            .iter()
            .map(|info| RollupQuery {
                sensor: info.key.clone(),
                from: range.from,
                to: range.to,
                step_ms,
                fields: fields.map(<[String]>::to_vec),
            })
            .collect();
        let all = self.state.store.rollup_steps_of(queries, need).await.ok()?;
        let mut out = Vec::with_capacity(infos.len());
        // A series whose unflushed readings may be stored points is asked alone, which
        // gathers their steps again (`points`).
        if points::any_may_meet(&latest, &unflushed) {
            return None;
        }
        for (((info, stored), mut steps), unflushed) in
            infos.iter().zip(latest).zip(all).zip(unflushed)
        {
            // A series with an unflushed reading in range is asked for its types as one series
            // is, since that reading may be its latest.
            let kinds = match unflushed.is_empty() {
                true => stored.map(|r| kinds_of(&r)),
                false => self.field_kinds(info, range).await.ok()?,
            };
            merge_unflushed(&mut steps, &unflushed, step_ms, fields);
            out.push((kinds, steps));
        }
        Some(out)
    }

    /// The values of `fields` (all numeric ones when `None`) in `range`, window by window of
    /// `step_ms`, the unflushed ones among them; `None` when there are more than `most`.
    pub async fn step_values(
        &self,
        key: &str,
        range: (TimestampMs, TimestampMs),
        step_ms: i64,
        fields: Option<&[String]>,
        most: usize,
    ) -> Result<Option<StepValues>, ExecError> {
        let (from, to) = range;
        let unflushed = self.state.unflushed.unflushed(key, from, to);
        let query = RollupQuery {
            sensor: key.to_owned(),
            from,
            to,
            step_ms,
            fields: fields.map(<[String]>::to_vec),
        };
        let Some(mut values) = self.kept.step_values(&*self.state.store, query, most).await? else {
            return Ok(None);
        };
        let mut steps = ValueSteps { values: &mut values, step_ms, fields };
        points::add_unflushed(&self.state.store, key, unflushed, range, step_ms, &mut steps)
            .await?;
        Ok(Some(values))
    }

    /// [`Ctx::step_values`] of several series over one range together (each step holds the
    /// values of them all), read from the store in one call. `None` when they hold more than
    /// `most` together, and when the store answers with any error (a range past the
    /// retention among them): asked one by one, each series then gets its own answer or
    /// error.
    pub async fn step_values_of(
        &self,
        keys: &[&str],
        (from, to): (TimestampMs, TimestampMs),
        step_ms: i64,
        fields: Option<&[String]>,
        most: usize,
        lists: Vec<Vec<f64>>,
    ) -> Option<StepValues> {
        let unflushed: Vec<_> =
            keys.iter().map(|key| self.state.unflushed.unflushed(key, from, to)).collect();
        let queries = keys
            .iter()
            .map(|key| RollupQuery {
                sensor: (*key).to_owned(),
                from,
                to,
                step_ms,
                fields: fields.map(<[String]>::to_vec),
            })
            .collect();
        // A series whose unflushed readings may be stored points is asked alone, which
        // gathers their steps again (`points`).
        let live: Vec<String> = keys
            .iter()
            .zip(&unflushed)
            .filter(|(_, u)| !u.is_empty())
            .map(|(k, _)| (*k).to_owned())
            .collect();
        if !live.is_empty() {
            let latest = self.state.store.latest_of(live, (from, to)).await.ok()?;
            let live_unflushed = unflushed.iter().filter(|u| !u.is_empty());
            if points::any_may_meet(&latest, live_unflushed) {
                return None;
            }
        }
        let mut all = self.state.store.step_values_of(queries, most, lists).await.ok()??;
        for unflushed in unflushed {
            add_unflushed(&mut all, &unflushed, step_ms, fields);
        }
        Some(all)
    }

    /// The types of the fields of a series' latest reading in range: what decides whether
    /// bucket statistics (numbers only) can answer. `None` without a reading in range that is
    /// still kept.
    pub async fn field_kinds(
        &self,
        info: &SensorInfo,
        range: super::cond::TimeRange,
    ) -> Result<Option<HashMap<String, FieldKind>>, ExecError> {
        use futures::StreamExt;
        let mut latest = self.probe(&info.key, (range.from, range.to), Order::Desc, 1);
        Ok(latest.next().await.transpose()?.map(|r| kinds_of(&r)))
    }
}

fn kinds_of(r: &Reading) -> HashMap<String, FieldKind> {
    r.fields.iter().map(|(k, v)| (k.to_string(), FieldKind::of(v))).collect()
}

/// Step values that unflushed readings are added to.
struct ValueSteps<'a> {
    values: &'a mut StepValues,
    step_ms: i64,
    fields: Option<&'a [String]>,
}

impl points::Steps for ValueSteps<'_> {
    fn clear_step(&mut self, start: TimestampMs) {
        self.values.clear_step(start);
    }

    fn add(&mut self, readings: &[Reading]) {
        add_unflushed(self.values, readings, self.step_ms, self.fields);
    }
}

/// Adds the `unflushed` readings' values of `fields` (all numeric ones when `None`) to
/// `values`, step by step of `step_ms`.
fn add_unflushed(
    values: &mut StepValues,
    unflushed: &[Reading],
    step_ms: i64,
    fields: Option<&[String]>,
) {
    each_step_value(unflushed, step_ms, fields, |name, start, _, v| values.add(name, start, &[v]));
}

fn too_many_series() -> ExecError {
    ExecError::new(format!(
        "the statement reads more than {MAX_SERIES} series: name a measurement or add a tag \
         condition"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_floats_are_written_without_a_fraction_and_keep_their_type() {
        let series = Series {
            name: Some("m".into()),
            tags: None,
            columns: vec!["time".into(), "v".into()],
            values: vec![
                vec![Value::from(1), Value::from(21.0)],
                vec![Value::from(2), Value::from(21.5)],
                vec![Value::from(3), Value::from(-4.0)],
                vec![Value::from(4), Value::from(1e20)],
                vec![Value::from(4), Value::from(1e21)],
                vec![Value::from(4), Value::from(-9_223_372_036_854_775_808.0)],
                vec![Value::from(4), Value::from(9_223_372_036_854_775_808.0)],
                vec![Value::from(4), Value::from(-0.5)],
                vec![Value::from(4), Value::from(1e15 + 0.5)],
                vec![Value::from(5), Value::Null],
                vec![Value::from(6), Value::from("x")],
            ],
        };
        assert_eq!(
            serde_json::to_string(&series).unwrap(),
            r#"{"name":"m","columns":["time","v"],"values":[[1,21],[2,21.5],[3,-4],[4,100000000000000000000],[4,1e+21],[4,-9223372036854775808],[4,9223372036854775808],[4,-0.5],[4,1000000000000000.5],[5,null],[6,"x"]]}"#
        );
        assert!(series.values[0][1].is_f64(), "the rows themselves stay floats");
    }

    #[test]
    fn times_are_written_as_influxdb_writes_them() {
        assert_eq!(rfc3339(1_709_251_200_000), "2024-03-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_200_120), "2024-03-01T00:00:00.12Z");
        assert_eq!(Epoch::Ns.format(5), Value::from(5_000_000));
        assert_eq!(Epoch::S.format(5_999), Value::from(5));
        assert!(Epoch::parse(Some("fortnight")).is_err());
    }
}
