//! Aggregates and selectors per time window and tag group, folded from readings or from the
//! stores' rollups (hour statistics for whole hours); then `fill(…)`, arithmetic, and one row
//! per window.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;

use super::fill::{Cell, fill};
use super::plan::{
    ColExpr, Kind, Measurement, NS_PER_MS, Plan, Statement, dedupe, readings_of, too_many_points,
    too_many_rows,
};
use super::rows::{Columns, OutCol, Picked, calls_of, column_of, distinct_rows, rows};
use super::windows::Windows;
use crate::model::{FieldValue, HOUR_MS, Reading, TimestampMs};
use crate::query::influxql::exec::agg::{Acc, Func, arrange_modes};
use crate::query::influxql::exec::context::{Ctx, FieldKind, Series};
use crate::query::influxql::exec::error::ExecError;
use crate::query::influxql::syntax::ast::Fill;
use crate::store::{FieldStats, Need, Order, RollupSteps, Run, SensorInfo, StepValues, StoreError};

/// One group's state: per call, per field, per window start.
struct Group {
    accs: Vec<BTreeMap<String, Windows>>,
    /// Per window, the reading (and its series) a lone selector picked, for the fields and
    /// tags selected beside it (`max(v), host`).
    aux: Picked,
}

pub(super) async fn run(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    measurements: &[Measurement],
) -> Result<Vec<Series>, ExecError> {
    let plan = st.plan;
    // The stores' rollups: whole hours from bucket statistics, finer steps computed by the store
    // from its readings (MongoDB: `$unwind` + `$group`), so no reading crosses the wire. Their
    // steps are multiples of the step since the epoch: a zone's windows match them only where
    // its offset is a multiple of the window (and a daylight-saving hour keeps it so).
    let aligned = |w: &super::plan::Window| match w.zone {
        None => true,
        Some(z) => {
            w.interval <= HOUR_MS
                && HOUR_MS % w.interval == 0
                && [st.range.from, st.range.to - 1]
                    .iter()
                    .all(|t| super::plan::zone_offset_ms(z, *t) % w.interval == 0)
        }
    };
    let rollups_ok = st.window.is_some_and(|w| aligned(&w) && w.offset == 0)
        && plan.kind == Kind::Aggregate
        && !plan.aux
        && plan.calls.iter().all(|c| c.func.from_rollups());

    let mut scan = Scan {
        held: 0,
        cells: Cells { made: 0, limit: ctx.state.limits.max_cells },
        fields_seen: vec![BTreeSet::new(); plan.calls.len()],
        numeric: HashMap::new(),
        folded: HashSet::new(),
        rollups_ahead: HashMap::new(),
        rollups_alone: false,
        ahead_pace: None,
        lists: Vec::new(),
    };
    let slices = st.window.filter(|_| answered_by_slice(plan));
    let mut scanned: Vec<Vec<Group>> = Vec::new();
    for m in measurements {
        let by_rollups = rollups_ok && st.condition.is_none_or(|c| c.only_tags(&m.tag_keys));
        // Every series of the measurement, in the order they are folded.
        let queue: Vec<&Arc<SensorInfo>> =
            m.groups.iter().flat_map(|(_, members)| members.iter()).collect();
        let mut next = 0;
        let mut groups = Vec::new();
        for (_, members) in &m.groups {
            let mut g = Group {
                accs: plan.calls.iter().map(|_| BTreeMap::new()).collect(),
                aux: BTreeMap::new(),
            };
            if let Some(w) = slices {
                by_slices(ctx, st, m, members, w, &mut g, &mut scan).await?;
                groups.push(g);
                continue;
            }
            for (series, info) in members.iter().enumerate() {
                next += 1;
                if by_rollups {
                    if !scan.rollups_ahead.contains_key(&info.key) {
                        read_rollups_ahead(ctx, st, &queue[next - 1..], &mut scan).await;
                    }
                    let ahead = scan.rollups_ahead.remove(&info.key);
                    if from_rollups(ctx, st, info, ahead, &mut g, &mut scan).await? {
                        continue;
                    }
                }
                let range = (st.range.from, st.range.to);
                fold_readings(ctx, st, m, (series, info), range, &mut g, &mut scan).await?;
            }
            groups.push(g);
        }
        scanned.push(groups);
    }
    let fields_seen = scan.fields_seen;

    let mut cols = Vec::new();
    for c in &plan.columns {
        match (&c.expr, c.wildcard) {
            (ColExpr::Call(i), true) => {
                let prefix = if c.aliased { c.name.as_str() } else { plan.calls[*i].func.name() };
                for f in &fields_seen[*i] {
                    let name = format!("{prefix}_{f}");
                    cols.push(OutCol { name, expr: c.expr.clone(), field: Some(f.clone()) });
                }
            }
            _ => cols.push(OutCol { name: c.name.clone(), expr: c.expr.clone(), field: None }),
        }
    }
    let mut names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
    dedupe(&mut names);
    let header: Vec<String> = std::iter::once("time".to_owned()).chain(names).collect();
    // A selector alone takes its reading's time, unless windows say otherwise.
    let lone_selector = st.window.is_none()
        && plan.calls.len() == 1
        && plan.calls[0].func.is_selector()
        && cols.iter().filter(|c| matches!(c.expr, ColExpr::Call(_))).count() == 1;

    let mut out = Vec::new();
    let mut total_rows = 0usize;
    for (m, groups) in measurements.iter().zip(scanned) {
        for ((group, _), mut g) in m.groups.iter().zip(groups) {
            let starts: Vec<TimestampMs> = {
                let mut windows = g.accs.iter().flat_map(|f| f.values().flat_map(Windows::starts));
                let Some(any) = windows.next() else { continue };
                match st.window {
                    Some(w) if st.fill != Fill::None => {
                        // Counted before they are made: a long range of short windows is refused,
                        // not built.
                        let n =
                            (w.start(st.range.to - 1) - w.start(st.range.from)) / w.interval + 2;
                        total_rows =
                            total_rows.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
                        if total_rows > super::plan::MAX_ROWS {
                            return Err(too_many_rows());
                        }
                        w.starts(st.range.from, st.range.to).collect()
                    }
                    _ => {
                        let windows: BTreeSet<TimestampMs> =
                            std::iter::once(any).chain(windows).collect();
                        windows.into_iter().collect()
                    }
                }
            };
            if plan.kind == Kind::Distinct {
                let values = distinct_rows(plan, &cols, &g.accs, &starts);
                if !values.is_empty() {
                    out.push(m.series(group, header.clone(), values));
                }
                continue;
            }
            // Each function's values over the windows, filled before any arithmetic, as
            // InfluxDB fills (`mean(x) * 2 fill(0)` is 0 where nothing was).
            let mut cells: Columns = Vec::new();
            for c in &cols {
                for i in calls_of(&c.expr) {
                    let call = &plan.calls[i];
                    let Some(field) = call.field.clone().or_else(|| c.field.clone()) else {
                        continue;
                    };
                    if column_of(&cells, i, &field).is_some() {
                        continue;
                    }
                    let column: Vec<Cell> = match g.accs[i].get_mut(&field) {
                        None => vec![None; starts.len()],
                        Some(windows) => {
                            if call.func == Func::Mode {
                                arrange_modes(windows.map(), st.descending);
                            }
                            // Both ascending: walked together, not looked up per window.
                            let mut made = windows.iter_mut().peekable();
                            starts
                                .iter()
                                .map(|s| {
                                    while made.next_if(|(w, _)| *w < *s).is_some() {}
                                    let (_, acc) = made.next_if(|(w, _)| *w == *s)?;
                                    acc.finish(call.func)
                                })
                                .collect()
                        }
                    };
                    cells.push(((i, field), column));
                }
            }
            // A series none of whose windows has a value (a percentile of too few values in
            // each) is not answered, not even filled, as in InfluxDB.
            if cells.iter().all(|(_, c)| c.iter().all(Option::is_none)) {
                continue;
            }
            if st.window.is_some() {
                for ((i, _), column) in cells.iter_mut() {
                    // A count of a field the group has no value of stays null, as InfluxDB
                    // answers for a field its series do not have.
                    let count = matches!(plan.calls[*i].func, Func::Count | Func::CountDistinct)
                        && column.iter().any(Option::is_some);
                    fill(column, &starts, st.fill, count, st.descending);
                }
            }
            let aux = &g.aux;
            let values = rows(st, &cols, &cells, &starts, lone_selector, aux, &m.tag_keys);
            if !values.is_empty() {
                out.push(m.series(group, header.clone(), values));
            }
        }
    }
    Ok(out)
}

/// What a statement's scan keeps across its groups and series.
struct Scan {
    /// Values kept for functions that need them all (`median`, `mode`, …), not yet answered.
    held: usize,
    cells: Cells,
    /// Per call, the fields it took a value of: a wildcard call's columns.
    fields_seen: Vec<BTreeSet<String>>,
    /// Per series (by key), whether the fields the calls read are numbers: asked once a
    /// statement, not once a slice.
    numeric: HashMap<String, bool>,
    /// The series whose step values in the slice were folded together ([`fold_together`]):
    /// [`fold_step_values`] has nothing left to add of them.
    folded: HashSet<String>,
    /// Rollups read ahead for the series to come ([`read_rollups_ahead`]), by series key,
    /// with the field types of each series' latest reading in range.
    rollups_ahead: HashMap<String, (Option<HashMap<String, FieldKind>>, RollupSteps)>,
    /// The store did not answer a read ahead whole: each series is asked alone.
    rollups_alone: bool,
    /// How long the last read ahead took per series.
    ahead_pace: Option<Duration>,
    /// The lists of values of the windows answered, for the store to fill again: a slice's
    /// lists made anew were fresh pages to fault in, slice after slice. Room for at most the
    /// values a statement may hold is kept ([`keep_lists`]); a read lets go of those it does
    /// not fill.
    lists: Vec<Vec<f64>>,
}

/// Lets go of the `lists` past room for `most` values in all.
fn keep_lists(lists: &mut Vec<Vec<f64>>, most: usize) {
    let mut room = most;
    lists.retain(|list| {
        let keep = list.capacity() <= room;
        room -= if keep { list.capacity() } else { 0 };
        keep
    });
}

/// Folds one series' readings in `from..to` into its group: column by column from the store's
/// runs when no reading needs to be seen whole (no field condition, no field or tag picked
/// beside a selector, no unflushed reading in range), else reading by reading. Each
/// accumulator holds one field's values of one window, which come in time order either way.
async fn fold_readings(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    m: &Measurement,
    (series, info): (usize, &Arc<SensorInfo>),
    (from, to): (TimestampMs, TimestampMs),
    g: &mut Group,
    scan: &mut Scan,
) -> Result<(), ExecError> {
    let plan = st.plan;
    let limit = ctx.state.limits.max_held;
    let series = series as u32;
    let per_reading = st.condition.filter(|c| !c.series_matches(&info.tags, &m.tag_keys));
    if per_reading.is_none()
        && !plan.aux
        && fold_step_values(ctx, st, info, (from, to), g, scan).await?
    {
        return Ok(());
    }
    let stream = if per_reading.is_some() || plan.aux {
        ctx.readings(&info.key, from, to, Order::Asc)
    } else {
        match ctx.stored_runs(&info.key, from, to) {
            Ok(runs) => return fold_runs(ctx, st, (series, info), runs, g, scan).await,
            Err(unflushed) => ctx.readings_with(&info.key, from, to, unflushed),
        }
    };
    readings_of(ctx, st, m, info, stream, |r| fold_reading(st, (series, info), r, g, scan, limit))
        .await
}

/// Folds a series' stored runs, column by column where the store gives columns.
async fn fold_runs(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    (series, info): (u32, &Arc<SensorInfo>),
    mut runs: BoxStream<'static, Result<Run, StoreError>>,
    g: &mut Group,
    scan: &mut Scan,
) -> Result<(), ExecError> {
    let limit = ctx.state.limits.max_held;
    while let Some(run) = runs.next().await {
        ctx.check_deadline()?;
        match run? {
            Run::Columns(c) => {
                for (col, name) in c.names().iter().enumerate() {
                    for (i, call) in st.plan.calls.iter().enumerate() {
                        if call.field.as_ref().is_none_or(|f| f.as_str() == name.as_str()) {
                            fold_column(st, (i, name), c.column(col), series, g, scan, limit)?;
                        }
                    }
                }
            }
            Run::Readings(readings) => {
                for r in &readings {
                    fold_reading(st, (series, info), r, g, scan, limit)?;
                }
            }
        }
    }
    Ok(())
}

/// The window a statement folds `ts` into, with the end of that window: without GROUP BY
/// time, one window at the lower bound as written (or the epoch).
fn window_of(st: &Statement<'_>, ts: TimestampMs) -> (TimestampMs, TimestampMs) {
    match st.window {
        Some(w) => w.bounds(ts),
        None => {
            let single =
                if st.range.has_lower { st.range.lower_ns.div_euclid(NS_PER_MS) } else { 0 };
            (single, TimestampMs::MAX)
        }
    }
}

/// The accumulators of call `i` over field `name`, made when first asked.
fn windows_of<'g>(
    g: &'g mut Group,
    scan: &mut Scan,
    i: usize,
    name: &str,
) -> &'g mut BTreeMap<TimestampMs, Acc> {
    windows_entry(g, scan, i, name).map()
}

/// [`windows_of`], as the windows are held.
fn windows_entry<'g>(g: &'g mut Group, scan: &mut Scan, i: usize, name: &str) -> &'g mut Windows {
    if !scan.fields_seen[i].contains(name) {
        scan.fields_seen[i].insert(name.to_owned());
    }
    // Looked up before it is made: a name made per reading was a large part of a median's time.
    if !g.accs[i].contains_key(name) {
        g.accs[i].insert(name.to_owned(), Windows::default());
    }
    g.accs[i].get_mut(name).expect("just made")
}

/// The call's error for a value it does not take, unless it takes every field (`mean(*)`
/// passes strings by).
fn refuse(call: &super::plan::Call, name: &str, v: &FieldValue) -> Result<(), ExecError> {
    if call.field.is_none() {
        return Ok(());
    }
    Err(ExecError::new(format!(
        "unsupported {}() of the {} field {name:?}",
        call.func.name(),
        FieldKind::of(v).name()
    )))
}

/// Counts a value an accumulator keeps, refusing past the statement's limit.
fn hold(acc: &Acc, scan: &mut Scan, limit: usize) -> Result<(), ExecError> {
    if matches!(acc, Acc::Values(_) | Acc::Floats(_) | Acc::Distinct(_) | Acc::Mode(_)) {
        scan.held += 1;
        if scan.held > limit {
            return Err(too_many_points(limit));
        }
    }
    Ok(())
}

/// Folds one column of a run into call `i`'s windows of the column's field (one the call
/// takes), finding a window's accumulator once per window rather than once per value.
fn fold_column<'v>(
    st: &Statement<'_>,
    (i, name): (usize, &str),
    values: impl Iterator<Item = (TimestampMs, &'v FieldValue)>,
    series: u32,
    g: &mut Group,
    scan: &mut Scan,
    limit: usize,
) -> Result<(), ExecError> {
    let call = &st.plan.calls[i];
    let mut values = values.peekable();
    while let Some((ts, v)) = values.next() {
        if !call.func.accepts(v) {
            refuse(call, name, v)?;
            continue;
        }
        let (start, end) = window_of(st, ts);
        let windows = windows_of(g, scan, i, name);
        let acc = scan.cells.acc(windows, start, call.func)?;
        hold(acc, scan, limit)?;
        acc.push_from(series, ts, v);
        // The rest of the window's values, into the same accumulator.
        while let Some((ts, v)) = values.next_if(|(t, _)| *t < end) {
            if !call.func.accepts(v) {
                refuse(call, name, v)?;
                continue;
            }
            hold(acc, scan, limit)?;
            acc.push_from(series, ts, v);
        }
    }
    Ok(())
}

/// Folds one reading into every call that takes its fields.
fn fold_reading(
    st: &Statement<'_>,
    (series, info): (u32, &Arc<SensorInfo>),
    r: &Reading,
    g: &mut Group,
    scan: &mut Scan,
    limit: usize,
) -> Result<(), ExecError> {
    let plan = st.plan;
    let w = window_of(st, r.ts).0;
    for (i, call) in plan.calls.iter().enumerate() {
        for (name, v) in &r.fields {
            if call.field.as_ref().is_some_and(|f| f.as_str() != name.as_str()) {
                continue;
            }
            if !call.func.accepts(v) {
                refuse(call, name, v)?;
                continue;
            }
            let windows = windows_of(g, scan, i, name);
            let acc = scan.cells.acc(windows, w, call.func)?;
            hold(acc, scan, limit)?;
            if acc.push_from(series, r.ts, v) && plan.aux {
                g.aux.insert(w, (r.clone(), info.clone()));
            }
        }
    }
    Ok(())
}

/// Whether a statement's windows are answered slice by slice ([`by_slices`]): it keeps values
/// (`median`, `percentile`, `stddev`), and none of its functions needs the whole range at once
/// (`mode` meets its values in an order the whole range decides, `distinct` lists them all).
fn answered_by_slice(plan: &Plan) -> bool {
    let keeps = |f: Func| matches!(f, Func::Median | Func::Stddev | Func::Percentile(_));
    let whole = |f: Func| matches!(f, Func::Mode | Func::Distinct | Func::CountDistinct);
    plan.calls.iter().any(|c| keeps(c.func)) && !plan.calls.iter().any(|c| whole(c.func))
}

/// Reads a group's range in slices of whole windows, every series of the group for one slice
/// before the next, and answers each slice's windows before reading on. What the values held
/// at once then grow with is one slice of the group, not the range: a median over 30 days of
/// every sensor holds a few windows' values. The first slice is the whole range, so a group
/// that fits is read once; one that holds too many values, or whose series read so far say
/// it will, is forgotten and read again in slices of the length those series suggest, toward
/// a quarter of the limit ([`QueryLimits::max_held`]), and only a single window over the
/// limit is refused.
///
/// [`QueryLimits::max_held`]: crate::query::state::QueryLimits::max_held
async fn by_slices(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    m: &Measurement,
    members: &[Arc<SensorInfo>],
    w: super::plan::Window,
    g: &mut Group,
    scan: &mut Scan,
) -> Result<(), ExecError> {
    let limit = ctx.state.limits.max_held;
    let target = (limit / 4).max(1) as i128;
    // Slices are reckoned in time and end on a window's start.
    let (mut from, mut span) = (st.range.from, st.range.to.saturating_sub(st.range.from));
    while from < st.range.to {
        let (first, first_end) = w.bounds(from);
        let to = match from.saturating_add(span.max(1)) {
            t if t >= st.range.to => st.range.to,
            t => match w.bounds(t) {
                (start, _) if start > from => start,
                _ => first_end.min(st.range.to),
            },
        };
        let (held, made) = (scan.held, scan.cells.made);
        // The first slice is the whole range, and a group too large for it is found so as
        // its series are read one by one: read together as well, it would be read twice.
        let whole = (from, to) == (st.range.from, st.range.to);
        let mut read = Ok(());
        if !whole {
            read = fold_together(ctx, st, m, members, (from, to), g, scan).await;
        }
        // Those folded together were read whole before the limit was met.
        let mut done = scan.folded.len().saturating_sub(1);
        // Whether the series read whole so far say the group will not fit the whole range,
        // which is then sliced at once rather than read on until the limit is met (where it
        // holds more than one window).
        let mut foreseen = false;
        let foreseeable = whole && to > first_end;
        if read.is_ok() {
            done = 0;
            for (series, info) in members.iter().enumerate() {
                read = fold_readings(ctx, st, m, (series, info), (from, to), g, scan).await;
                if read.is_err() {
                    break;
                }
                done += 1;
                let seen = scan.held - held;
                if foreseeable
                    && done < members.len()
                    && seen.saturating_mul(members.len()) > limit.saturating_mul(done)
                {
                    (foreseen, read) = (true, Err(too_many_points(limit)));
                    break;
                }
            }
        }
        scan.folded.clear();
        if let Err(e) = read {
            if (scan.held <= limit && !foreseen) || to <= first_end {
                return Err(e);
            }
            // Too many values for this slice: forget it (its lists kept to fill again), and
            // read it again in a slice as long as the series read so far say a quarter of the
            // limit takes.
            for windows in g.accs.iter_mut().flat_map(BTreeMap::values_mut) {
                let forgotten = windows.map().split_off(&first);
                scan.cells.made -= forgotten.len();
                scan.lists.extend(forgotten.into_values().filter_map(Acc::into_list));
            }
            debug_assert_eq!(scan.cells.made, made);
            g.aux.split_off(&first);
            let seen = (scan.held - held) as i128;
            scan.held = held;
            // The series read, the last one in part unless the limit was foreseen.
            let read = if foreseen { done } else { done + 1 };
            let estimate = seen * members.len() as i128 / read as i128;
            let length = i128::from(to - from);
            span = i64::try_from(length * target / estimate.max(1))
                .unwrap_or(0)
                .clamp(1, ((to - from) / 2).max(1));
            continue;
        }
        let in_slice = (scan.held - held) as i128;
        for (call, fields) in st.plan.calls.iter().zip(g.accs.iter_mut()) {
            for windows in fields.values_mut() {
                for acc in windows.since(first) {
                    scan.held -= acc.seal(call.func, &mut scan.lists);
                }
            }
        }
        keep_lists(&mut scan.lists, limit);
        // Toward a quarter of the limit, growing at most fourfold per slice.
        let length = i128::from(to - from);
        let grown = (length * 4).min(i128::from(i64::MAX));
        span =
            i64::try_from((length * target / in_slice.max(1)).clamp(1, grown)).unwrap_or(i64::MAX);
        from = to;
    }
    Ok(())
}

/// Folds the step values of a slice's series into their group together, read in one store
/// call into the same steps: asked one series at a time, the handoffs to the store's threads
/// were the larger part of a median of many series over many slices, and each series' steps
/// were copied again into the group's. A series whose readings are read whole (a condition
/// on its fields, fields picked beside the calls) or whose fields are not numbers is left
/// out, and nothing is folded when the store's answer is not whole (more than the values
/// left to hold, an error): each series is then asked alone, as before.
async fn fold_together(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    m: &Measurement,
    members: &[Arc<SensorInfo>],
    range: (TimestampMs, TimestampMs),
    g: &mut Group,
    scan: &mut Scan,
) -> Result<(), ExecError> {
    scan.folded.clear();
    let Some(w) = step_values_window(st).filter(|_| !st.plan.aux) else { return Ok(()) };
    let mut keys: Vec<&str> = Vec::new();
    for info in members {
        if st.condition.is_none_or(|c| c.series_matches(&info.tags, &m.tag_keys))
            && numeric(ctx, st, info, scan).await?
        {
            keys.push(info.key.as_str());
        }
    }
    if keys.len() < 2 {
        return Ok(());
    }
    let most = ctx.state.limits.max_held.saturating_sub(scan.held);
    let named = named_fields(st);
    let lists = std::mem::take(&mut scan.lists);
    let Some(values) =
        ctx.step_values_of(&keys, range, w.interval, named.as_deref(), most, lists).await
    else {
        return Ok(());
    };
    scan.folded.extend(keys.into_iter().map(str::to_owned));
    fold_values(ctx, st, values, g, scan)
}

/// The window of a statement whose every call is a median (which needs a window's values,
/// not their order) over windows of whole steps since the epoch: what step values answer.
fn step_values_window(st: &Statement<'_>) -> Option<super::plan::Window> {
    let all_medians = st.plan.calls.iter().all(|c| c.func == Func::Median);
    st.window.filter(|w| w.zone.is_none() && w.offset == 0 && all_medians)
}

/// The fields the calls name, or `None` when one takes every field.
fn named_fields(st: &Statement<'_>) -> Option<Vec<String>> {
    st.plan.calls.iter().map(|c| c.field.as_ref().map(|f| f.to_string())).collect()
}

/// Rollup steps held at once by a read ahead: bounds what the series read ahead hold before
/// they are folded.
const AHEAD_STEPS: i64 = 1 << 16;

/// About how long one read ahead may take: the statement's time budget is checked between
/// store calls, so a call must not gather many slow series.
const AHEAD_TIME: Duration = Duration::from_millis(50);

/// Reads the rollups of the next series of `queue` (the first one's on), with their field
/// types, in one store call each: asked one series at a time, the handoffs to the store's
/// threads were the larger part of a panel of many series. The first read ahead takes one
/// series; the next take as many as [`AHEAD_STEPS`] allows and as the last one's pace fits in
/// [`AHEAD_TIME`]. Nothing is read ahead after the store's answer was not whole (an error, a
/// range past the retention): each series is then asked alone.
async fn read_rollups_ahead(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    queue: &[&Arc<SensorInfo>],
    scan: &mut Scan,
) {
    let Some(w) = st.window.filter(|_| !scan.rollups_alone && !queue.is_empty()) else { return };
    let per_series = ((st.range.to - st.range.from) / w.interval).saturating_add(2);
    let by_steps = usize::try_from(AHEAD_STEPS / per_series.max(1)).unwrap_or(1);
    let by_time = match scan.ahead_pace {
        None => 1,
        Some(pace) => {
            usize::try_from(AHEAD_TIME.as_nanos() / pace.as_nanos().max(1)).unwrap_or(usize::MAX)
        }
    };
    let n = by_steps.min(by_time).clamp(1, queue.len());
    let infos: Vec<&SensorInfo> = queue[..n].iter().map(|info| info.as_ref()).collect();
    let named = named_fields(st);
    let began = Instant::now();
    let Some(ahead) =
        ctx.rollups_of(&infos, st.range, w.interval, named.as_deref(), need_of(st)).await
    else {
        scan.rollups_alone = true;
        return;
    };
    scan.ahead_pace = Some(began.elapsed() / u32::try_from(n).unwrap_or(u32::MAX));
    scan.rollups_ahead.extend(infos.iter().map(|info| info.key.clone()).zip(ahead));
}

/// What the statement's calls need of the statistics.
fn need_of(st: &Statement<'_>) -> Need {
    st.plan.calls.iter().fold(Need::COUNT, |need, c| need.and(c.func.needs()))
}

/// Folds one series' rollups from the store (or `ahead`, read before) into the group, when
/// they can answer: numeric fields, and statistics that know what is asked (first/last are
/// unknown in whole-hour steps over buckets written before schema 3). `false`: read its
/// readings here instead.
async fn from_rollups(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    info: &Arc<SensorInfo>,
    ahead: Option<(Option<HashMap<String, FieldKind>>, RollupSteps)>,
    g: &mut Group,
    scan: &mut Scan,
) -> Result<bool, ExecError> {
    let Some(w) = st.window else { return Ok(false) };
    let (kinds, steps) = match ahead {
        Some((kinds, steps)) => (kinds, Some(steps)),
        // Without a kept reading in range (none, or all past --retention) the types are
        // unknown: the statistics hold numeric fields only, so what they hold is taken as
        // floats.
        None => (ctx.field_kinds(info, st.range).await?, None),
    };
    if !all_numeric(st, kinds.as_ref()) {
        return Ok(false);
    }
    let steps = match steps {
        Some(steps) => steps,
        // Only the fields named, unless a wildcard call takes them all.
        None => {
            let named = named_fields(st);
            ctx.rollups(&info.key, st.range, w.interval, named.as_deref(), need_of(st)).await?
        }
    };
    let (fields_seen, cells) = (&mut scan.fields_seen, &mut scan.cells);
    let edges = st.plan.calls.iter().any(|c| matches!(c.func, Func::First | Func::Last));
    let unknown_edge = |(_, s): &(TimestampMs, FieldStats)| s.first.is_none() || s.last.is_none();
    if edges && steps.fields.iter().any(|(_, steps)| steps.iter().any(unknown_edge)) {
        return Ok(false);
    }
    for (i, call) in st.plan.calls.iter().enumerate() {
        for (name, steps) in &steps.fields {
            if steps.is_empty() || call.field.as_ref().is_some_and(|f| f != name) {
                continue;
            }
            let integer =
                kinds.as_ref().is_some_and(|k| k.get(name.as_str()) == Some(&FieldKind::Integer));
            if !fields_seen[i].contains(name) {
                fields_seen[i].insert(name.clone());
            }
            let windows = match g.accs[i].get_mut(name) {
                Some(windows) => windows,
                None => g.accs[i].entry(name.clone()).or_default(),
            };
            if windows.is_empty() {
                // The group's first series (the only one under `GROUP BY` every tag): its
                // windows come in order and are built at once, not inserted one by one.
                let made: Vec<(TimestampMs, Acc)> = steps
                    .iter()
                    .map(|(start, stats)| {
                        let mut acc = Acc::new(call.func);
                        acc.push_stats(stats, integer, *start);
                        (*start, acc)
                    })
                    .collect();
                cells.count(made.len())?;
                *windows = Windows::sorted(made);
                continue;
            }
            fold_steps(windows.map(), steps, call.func, integer, cells)?;
        }
    }
    Ok(true)
}

/// Folds a series' steps (ascending) into the windows the group's earlier series made, walking
/// both in order: the series of a group mostly share their windows, so a step finds its
/// window without a lookup, and only the others are looked up (and made).
fn fold_steps(
    windows: &mut BTreeMap<TimestampMs, Acc>,
    steps: &[(TimestampMs, FieldStats)],
    func: Func,
    integer: bool,
    cells: &mut Cells,
) -> Result<(), ExecError> {
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else { return Ok(()) };
    let steps = steps.iter().map(|(start, stats)| (*start, stats));
    merge_in_order(windows, (first.0, last.0), steps, func, cells, |acc, stats, start| {
        acc.push_stats(stats, integer, start);
    })
}

/// Adds each of a series' `steps` (ascending, from `first` to `last`) to its window with
/// `add`, walking the windows and the steps together: only a step whose window the group has
/// not made yet is looked up.
fn merge_in_order<T>(
    windows: &mut BTreeMap<TimestampMs, Acc>,
    (first, last): (TimestampMs, TimestampMs),
    steps: impl IntoIterator<Item = (TimestampMs, T)>,
    func: Func,
    cells: &mut Cells,
    mut add: impl FnMut(&mut Acc, T, TimestampMs),
) -> Result<(), ExecError> {
    let mut missing = Vec::new();
    let mut have = windows.range_mut(first..=last).peekable();
    for (start, step) in steps {
        while have.next_if(|(at, _)| **at < start).is_some() {}
        match have.peek_mut() {
            Some((at, acc)) if **at == start => add(acc, step, start),
            _ => missing.push((start, step)),
        }
    }
    for (start, step) in missing {
        add(cells.acc(windows, start, func)?, step, start);
    }
    Ok(())
}

/// Whether every field the calls read is a number, by the types `kinds` the series' latest
/// reading in range has (numbers are all the stores' statistics and step values hold).
fn all_numeric(st: &Statement<'_>, kinds: Option<&HashMap<String, FieldKind>>) -> bool {
    let numeric = |k: &FieldKind| matches!(k, FieldKind::Float | FieldKind::Integer);
    kinds.is_none_or(|kinds| {
        st.plan.calls.iter().all(|c| match &c.field {
            Some(f) => kinds.get(f.as_str()).is_some_and(numeric),
            None => kinds.values().all(numeric),
        })
    })
}

/// Folds one series' values in `from..to` from the store's step values, when every call is a
/// median (which needs a window's values, not their order) over windows of whole steps since
/// the epoch, of numeric fields: no reading is made of each. `false`: read its readings here
/// instead.
async fn fold_step_values(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    info: &Arc<SensorInfo>,
    range: (TimestampMs, TimestampMs),
    g: &mut Group,
    scan: &mut Scan,
) -> Result<bool, ExecError> {
    let Some(w) = step_values_window(st) else {
        return Ok(false);
    };
    if scan.folded.contains(&info.key) {
        return Ok(true);
    }
    if !numeric(ctx, st, info, scan).await? {
        return Ok(false);
    }
    let limit = ctx.state.limits.max_held;
    let most = limit.saturating_sub(scan.held);
    let named = named_fields(st);
    let Some(values) =
        ctx.step_values(&info.key, range, w.interval, named.as_deref(), most).await?
    else {
        // Counted as more than the limit, so that a slice is read again shorter.
        scan.held = scan.held.saturating_add(most).saturating_add(1);
        return Err(too_many_points(limit));
    };
    fold_values(ctx, st, values, g, scan)?;
    Ok(true)
}

/// Whether the fields the calls read are numbers in series `info` (by its latest reading in
/// the statement's range), asked once a statement.
async fn numeric(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    info: &SensorInfo,
    scan: &mut Scan,
) -> Result<bool, ExecError> {
    if let Some(numeric) = scan.numeric.get(&info.key) {
        return Ok(*numeric);
    }
    let numeric = all_numeric(st, ctx.field_kinds(info, st.range).await?.as_ref());
    scan.numeric.insert(info.key.clone(), numeric);
    Ok(numeric)
}

/// Adds step `values` (of one series or of several together) to the group's windows of
/// every median call that reads their fields.
fn fold_values(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    values: StepValues,
    g: &mut Group,
    scan: &mut Scan,
) -> Result<(), ExecError> {
    let limit = ctx.state.limits.max_held;
    for (name, mut steps) in values.fields {
        let calls: Vec<usize> = (0..st.plan.calls.len())
            .filter(|&i| st.plan.calls[i].field.as_ref().is_none_or(|f| *f == name))
            .collect();
        for (k, &i) in calls.iter().enumerate() {
            if steps.is_empty() {
                break;
            }
            let func = st.plan.calls[i].func;
            scan.held += steps.iter().map(|(_, held)| held.len()).sum::<usize>();
            let windows = windows_entry(g, scan, i, &name);
            // The last call that reads the field takes the steps' values, the others a copy.
            let taken =
                if k + 1 == calls.len() { std::mem::take(&mut steps) } else { steps.clone() };
            if !windows.is_empty() {
                // A window no earlier series or slice made (every window of a slice after the
                // first) keeps its step's values as they are.
                let span = (taken[0].0, taken[taken.len() - 1].0);
                let cells = &mut scan.cells;
                merge_in_order(windows.map(), span, taken, func, cells, add_held)?;
                continue;
            }
            // The group's first series (the only one under `GROUP BY` every tag): its steps
            // come in order and their values become the windows' own, neither copied nor
            // inserted one by one.
            scan.cells.count(taken.len())?;
            let made = taken.into_iter().map(|(start, held)| {
                let mut acc = Acc::new(func);
                if let Acc::Floats(all) = &mut acc {
                    *all = held;
                }
                (start, acc)
            });
            *windows = Windows::sorted(made.collect());
        }
    }
    if scan.held > limit {
        return Err(too_many_points(limit));
    }
    Ok(())
}

/// Adds a step's values to a median's window: those of a window that has none yet become
/// its own.
fn add_held(acc: &mut Acc, held: Vec<f64>, _: TimestampMs) {
    if let Acc::Floats(all) = acc {
        if all.is_empty() {
            *all = held;
        } else {
            all.extend_from_slice(&held);
        }
    }
}

/// The (function, field, window) cells a statement folds into: each holds an accumulator,
/// so their number is what a statement's memory grows with (a window for every reading
/// under `fill(none)`, a group for every series under `GROUP BY *`).
struct Cells {
    made: usize,
    limit: usize,
}

impl Cells {
    /// The accumulator of window `start` among a field's `windows`, made (and counted) when
    /// the window has none yet.
    fn acc<'w>(
        &mut self,
        windows: &'w mut BTreeMap<TimestampMs, Acc>,
        start: TimestampMs,
        func: Func,
    ) -> Result<&'w mut Acc, ExecError> {
        // Readings come in time order: their window is mostly the latest one made.
        if windows.last_key_value().is_some_and(|(last, _)| *last == start) {
            return Ok(windows.last_entry().expect("a last window").into_mut());
        }
        match windows.entry(start) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                self.count(1)?;
                Ok(e.insert(Acc::new(func)))
            }
        }
    }

    /// Counts `n` cells about to be made, refusing past the limit.
    fn count(&mut self, n: usize) -> Result<(), ExecError> {
        self.made = self.made.saturating_add(n);
        if self.made > self.limit {
            return Err(ExecError::new(format!(
                "the statement would keep more than {} windows of its functions in memory: \
                 narrow the time range, use a longer GROUP BY time interval, or group fewer \
                 series",
                self.limit
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_kept_for_the_next_slice_are_bounded_by_their_room() {
        let mut lists: Vec<Vec<f64>> =
            [10, 5, 20, 1].iter().map(|&n| Vec::with_capacity(n)).collect();
        let rooms = |lists: &[Vec<f64>]| lists.iter().map(Vec::capacity).sum::<usize>();
        keep_lists(&mut lists, 16);
        assert!(rooms(&lists) <= 16, "kept room for {} values", rooms(&lists));
        assert_eq!(lists.len(), 3, "the list too large for what is left goes, the others stay");
        keep_lists(&mut lists, 0);
        assert!(lists.is_empty());
    }
}
