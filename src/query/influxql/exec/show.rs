//! The metadata statements: databases, retention policies, measurements, tag keys and values,
//! field keys and series. A database's only retention policy is `autogen`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::cond::{Condition, compile_regex, split_time};
use super::context::{Ctx, FieldKind, Series};
use super::error::ExecError;
use crate::databases::go_duration;
use crate::model::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};
use crate::query::influxql::syntax::ast::{KeyMatch, NameMatch, Source, Statement};
use crate::store::{Order, SensorInfo};

/// The shard group duration InfluxDB 1.x picks for a retention: shown, not used.
fn shard_group(keep: Option<Duration>) -> Duration {
    const DAY: u64 = 86_400;
    match keep.map(|d| d.as_secs()) {
        Some(s) if s > 0 && s < 2 * DAY => Duration::from_secs(3_600),
        Some(s) if s > 0 && s <= 180 * DAY => Duration::from_secs(DAY),
        _ => Duration::from_secs(7 * DAY),
    }
}

/// Readings read from each end of a series to find its fields and their types: bucketd keeps
/// no field schema, so `SHOW FIELD KEYS` looks at the first and last readings of every series.
const FIELD_PROBE: usize = 100;

pub async fn show(ctx: &Ctx<'_>, statement: &Statement) -> Result<Vec<Series>, ExecError> {
    match statement {
        Statement::ShowDatabases => {
            let names = ctx
                .state
                .databases
                .names()
                .into_iter()
                .filter(|db| ctx.may_read(db))
                .map(|db| vec![db.into()])
                .collect();
            Ok(vec![one("databases", &["name"], names)])
        }
        Statement::ShowRetentionPolicies { .. } => {
            let keep = ctx.state.databases.retention_of(ctx.state.database.name());
            Ok(vec![Series {
                name: None,
                tags: None,
                columns: ["name", "duration", "shardGroupDuration", "replicaN", "default"]
                    .map(String::from)
                    .to_vec(),
                values: vec![vec![
                    super::context::RETENTION_POLICY.into(),
                    go_duration(keep).into(),
                    go_duration(Some(shard_group(keep))).into(),
                    Value::from(1),
                    Value::Bool(true),
                ]],
            }])
        }
        Statement::ShowMeasurements { with, condition, limit, offset, .. } => {
            let sources = match with {
                None => Vec::new(),
                Some(NameMatch::Eq(name)) => vec![measurement(name)],
                Some(NameMatch::Regex(pattern)) => vec![Source::Regex {
                    database: None,
                    retention_policy: None,
                    pattern: pattern.clone(),
                }],
            };
            let filter = Filter::new(ctx, condition.as_ref())?;
            let mut names = Vec::new();
            for (m, series) in ctx.series_of(&sources).await? {
                if filter.any(&series) {
                    names.push(vec![Value::String(m)]);
                }
            }
            let names = page(names, *limit, *offset);
            Ok(non_empty(one("measurements", &["name"], names)))
        }
        Statement::ShowTagKeys { from, condition, limit, offset, .. } => {
            let filter = Filter::new(ctx, condition.as_ref())?;
            let mut out = Vec::new();
            for (m, series) in ctx.series_of(from).await? {
                let keys: BTreeSet<&str> = filter
                    .matching(&series)
                    .flat_map(|s| s.tags.iter().map(|(k, _)| k.as_str()))
                    .collect();
                let rows = keys.into_iter().map(|k| vec![Value::from(k)]).collect();
                out.extend(non_empty(one(&m, &["tagKey"], page(rows, *limit, *offset))));
            }
            Ok(out)
        }
        Statement::ShowTagValues { from, key, condition, limit, offset, .. } => {
            let filter = Filter::new(ctx, condition.as_ref())?;
            let key_matches = KeyFilter::new(key)?;
            let mut out = Vec::new();
            for (m, series) in ctx.series_of(from).await? {
                let pairs: BTreeSet<(&str, &str)> = filter
                    .matching(&series)
                    .flat_map(|s| s.tags.iter())
                    .filter(|(k, _)| key_matches.matches(k))
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let rows =
                    pairs.into_iter().map(|(k, v)| vec![Value::from(k), Value::from(v)]).collect();
                out.extend(non_empty(one(&m, &["key", "value"], page(rows, *limit, *offset))));
            }
            Ok(out)
        }
        Statement::ShowFieldKeys { from, limit, offset, .. } => {
            let mut out = Vec::new();
            for (m, series) in ctx.series_of(from).await? {
                let mut kinds: BTreeMap<String, FieldKind> = BTreeMap::new();
                for s in &series {
                    for (name, kind) in probe_fields(ctx, s).await? {
                        kinds.entry(name).or_insert(kind);
                    }
                }
                let rows = kinds
                    .into_iter()
                    .map(|(k, kind)| vec![Value::from(k), Value::from(kind.name())])
                    .collect();
                out.extend(non_empty(one(
                    &m,
                    &["fieldKey", "fieldType"],
                    page(rows, *limit, *offset),
                )));
            }
            Ok(out)
        }
        Statement::ShowSeries { from, condition, limit, offset, .. } => {
            let filter = Filter::new(ctx, condition.as_ref())?;
            let mut keys = BTreeSet::new();
            for (_, series) in ctx.series_of(from).await? {
                keys.extend(filter.matching(&series).map(series_key));
            }
            let rows = keys.into_iter().map(|k| vec![Value::from(k)]).collect();
            Ok(non_empty(Series {
                name: None,
                tags: None,
                columns: vec!["key".into()],
                values: page(rows, *limit, *offset),
            }))
        }
        other => Err(ExecError::new(format!("{other:?} is not a SHOW statement"))),
    }
}

fn measurement(name: &str) -> Source {
    Source::Measurement { database: None, retention_policy: None, name: name.to_owned() }
}

fn one(name: &str, columns: &[&str], values: Vec<Vec<Value>>) -> Series {
    Series {
        name: Some(name.to_owned()),
        tags: None,
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        values,
    }
}

/// InfluxDB leaves a series without rows out of the result.
fn non_empty(s: Series) -> Vec<Series> {
    if s.values.is_empty() { Vec::new() } else { vec![s] }
}

fn page(rows: Vec<Vec<Value>>, limit: Option<u64>, offset: Option<u64>) -> Vec<Vec<Value>> {
    let skip = offset.unwrap_or(0) as usize;
    let take = limit.map_or(usize::MAX, |l| l as usize);
    rows.into_iter().skip(skip).take(take).collect()
}

/// A metadata statement's `WHERE`: tag conditions choose series; time bounds are ignored
/// (InfluxDB 1.x ignores them too without an index by time).
struct Filter {
    condition: Option<Condition>,
}

impl Filter {
    fn new(
        ctx: &Ctx<'_>,
        condition: Option<&crate::query::influxql::syntax::ast::Expr>,
    ) -> Result<Filter, ExecError> {
        let (_, rest) = split_time(condition, ctx.now_ns)?;
        Ok(Filter { condition: rest.map(Condition::new).transpose()? })
    }

    fn matching<'a>(
        &'a self,
        series: &'a [Arc<SensorInfo>],
    ) -> impl Iterator<Item = &'a SensorInfo> + 'a {
        series
            .iter()
            .map(|s| &**s)
            .filter(move |s| self.condition.as_ref().is_none_or(|c| c.series_matches_tags(&s.tags)))
    }

    fn any(&self, series: &[Arc<SensorInfo>]) -> bool {
        self.matching(series).next().is_some()
    }
}

enum KeyFilter {
    Names(Vec<String>, bool),
    Regex(regex::Regex, bool),
}

impl KeyFilter {
    fn new(key: &KeyMatch) -> Result<KeyFilter, ExecError> {
        Ok(match key {
            KeyMatch::Eq(k) => KeyFilter::Names(vec![k.clone()], true),
            KeyMatch::NotEq(k) => KeyFilter::Names(vec![k.clone()], false),
            KeyMatch::In(ks) => KeyFilter::Names(ks.clone(), true),
            KeyMatch::Regex(p) => KeyFilter::Regex(compile_regex(p)?, true),
            KeyMatch::NotRegex(p) => KeyFilter::Regex(compile_regex(p)?, false),
        })
    }

    fn matches(&self, key: &str) -> bool {
        match self {
            KeyFilter::Names(names, want) => names.iter().any(|n| n == key) == *want,
            KeyFilter::Regex(re, want) => re.is_match(key) == *want,
        }
    }
}

/// InfluxDB's series key: the measurement and its tags sorted by key, escaped as in line
/// protocol (a JSON sensor's key need not be written that way, so it is built, not copied).
pub fn series_key(s: &SensorInfo) -> String {
    let mut tags = s.tags.clone();
    tags.sort();
    crate::model::series_key(&s.measurement, &tags)
}

/// Field names and types seen in the first and last [`FIELD_PROBE`] readings of a series.
pub(super) async fn probe_fields(
    ctx: &Ctx<'_>,
    s: &SensorInfo,
) -> Result<HashMap<String, FieldKind>, ExecError> {
    let mut kinds = HashMap::new();
    for order in [Order::Asc, Order::Desc] {
        let range = (MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1);
        // The buffers' readings come beside the store's limited ones.
        let mut readings = ctx.probe(&s.key, range, order, FIELD_PROBE).take(FIELD_PROBE);
        while let Some(r) = readings.next().await {
            for (name, v) in &r?.fields {
                kinds.entry(name.to_string()).or_insert_with(|| FieldKind::of(v));
            }
        }
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_keys_sort_and_escape_tags() {
        let s = SensorInfo {
            key: "x".into(),
            measurement: "my cpu".into(),
            tags: vec![("z".into(), "a,b".into()), ("a".into(), "1=2".into())],
            first: 0,
            last: 0,
        };
        assert_eq!(series_key(&s), "my\\ cpu,a=1\\=2,z=a\\,b");
    }
}
