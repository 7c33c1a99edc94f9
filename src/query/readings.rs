//! `GET /api/v1/readings`: one page of a sensor's readings as JSON, NDJSON or CSV.
//!
//! JSON and NDJSON stream: each reading is serialized as it arrives from the store, and a chunk
//! goes out whenever 64 KiB are ready or the store has nothing ready yet, so the first bytes reach
//! the client before the store has produced the last reading. CSV needs its column set (the union
//! of the page's field names) before the first row, so it collects the page first; a page is
//! bounded by the maximum `limit`. CSV is RFC 4180 with CRLF line ends; values are written as in
//! JSON (strings unquoted unless they need quoting), missing values as empty cells. Collecting also makes the next cursor known before the headers
//! go out, so CSV carries it in `X-Next-Cursor` while JSON carries it in the body's last member
//! and NDJSON in a final `{"next_cursor": ...}` line.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt};

use super::cursor::{ReadingsCursor, sensor_hash};
use super::encode::{TsWriter, format_ts, write_csv_field, write_json_value};
use super::error::QueryError;
use super::kept::Kept;
use super::params::{Params, parse_limit, parse_time, resolve_range};
use super::source::Source;
use super::state::{QueryState, now_ms, sensor_known};
use crate::model::{FieldValue, Reading, TimestampMs};
use crate::store::{Order, RangeQuery};

/// A response chunk is sent once it reaches this size (or earlier when the store is not ready).
const CHUNK_BYTES: usize = 64 * 1024;

pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

/// Where the page's readings begin when `--retention` deleted the start of its range.
pub const KEPT_FROM_HEADER: &str = "x-kept-from";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Ndjson,
    Csv,
}

impl Format {
    fn parse(s: Option<&str>) -> Result<Format, QueryError> {
        match s {
            None | Some("json") => Ok(Format::Json),
            Some("ndjson") => Ok(Format::Ndjson),
            Some("csv") => Ok(Format::Csv),
            Some(other) => Err(QueryError::BadParam {
                param: "format",
                why: format!("{other:?} is not one of json, ndjson, csv"),
            }),
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Ndjson => "application/x-ndjson",
            Format::Csv => "text/csv; charset=utf-8",
        }
    }
}

fn parse_order(s: Option<&str>) -> Result<Option<Order>, QueryError> {
    match s {
        None => Ok(None),
        Some("asc") => Ok(Some(Order::Asc)),
        Some("desc") => Ok(Some(Order::Desc)),
        Some(other) => Err(QueryError::BadParam {
            param: "order",
            why: format!("{other:?} is not asc or desc"),
        }),
    }
}

/// The page being served: the full range and order, and where it resumes if a cursor was given.
#[derive(Clone, Copy, Debug)]
struct Page {
    order: Order,
    from: TimestampMs,
    to: TimestampMs,
    /// `(t, k)`: resume after the first `k` readings at time `t`.
    resume: Option<(TimestampMs, u64)>,
    sensor_hash: u64,
    limit: usize,
}

impl Page {
    /// The range still to read: a resumed ascending page starts at the cursor's timestamp, a
    /// resumed descending page ends just after it.
    fn remaining(&self) -> (TimestampMs, TimestampMs) {
        match (self.resume, self.order) {
            (None, _) => (self.from, self.to),
            (Some((t, _)), Order::Asc) => (t, self.to),
            (Some((t, _)), Order::Desc) => (self.from, t + 1),
        }
    }
}

/// Counts what a page has emitted, to decide when it is full and what its cursor is.
struct Tracker {
    page: Page,
    emitted: usize,
    last_ts: TimestampMs,
    /// Readings at `last_ts` emitted by this page.
    at_last: u64,
    more: bool,
}

impl Tracker {
    fn new(page: Page) -> Tracker {
        Tracker { page, emitted: 0, last_ts: 0, at_last: 0, more: false }
    }

    /// True if the reading at `ts` belongs to the page; false if the page is already full
    /// (more readings follow).
    fn accept(&mut self, ts: TimestampMs) -> bool {
        if self.emitted == self.page.limit {
            self.more = true;
            return false;
        }
        if self.emitted > 0 && ts == self.last_ts {
            self.at_last += 1;
        } else {
            self.last_ts = ts;
            self.at_last = 1;
        }
        self.emitted += 1;
        true
    }

    fn next_cursor(&self) -> Option<String> {
        if !self.more {
            return None;
        }
        // A page made entirely of readings at the resume timestamp continues the count.
        let before = match self.page.resume {
            Some((t, k)) if t == self.last_ts => k,
            _ => 0,
        };
        Some(
            ReadingsCursor {
                order: self.page.order,
                from: self.page.from,
                to: self.page.to,
                last_ts: self.last_ts,
                skip: before + self.at_last,
                sensor_hash: self.page.sensor_hash,
            }
            .encode(),
        )
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/readings",
    tag = "query",
    params(
        ("db" = Option<String>, Query, example = "bucketd", description = "The database; `bucketd` when absent. One that does not exist gets 404."),
        ("sensor" = String, Query, example = "temp,site=a", description = "Sensor key (for line protocol: the series key, e.g. `temp,site=a`)."),
        ("from" = Option<String>, Query, description = "Start, inclusive: RFC 3339 or epoch milliseconds. Default: `to` minus one hour."),
        ("to" = Option<String>, Query, description = "End, exclusive: RFC 3339 or epoch milliseconds. Default: now."),
        ("order" = Option<String>, Query, pattern = "^(asc|desc)$", example = "desc", description = "`asc` (default) or `desc`."),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 100_000, example = 100, description = "Readings per page, 1 to 100000 (default 1000). Larger values are refused with 400, not clamped."),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page. It carries the range and order; `from`, `to` and `order` may be left out, and if given must match."),
        ("format" = Option<String>, Query, pattern = "^(json|ndjson|csv)$", example = "csv", description = "`json` (default), `ndjson` or `csv`."),
    ),
    responses(
        (status = 200, description = "One page of readings, ordered by time. JSON carries `next_cursor` last; NDJSON has one `{\"t\",\"fields\"}` object per line, then a final `{\"next_cursor\": \"...\"}` line only when more readings follow; CSV has a header row `t,<field>...` (the union of the page's field names in order of first appearance; missing values are empty cells) and the cursor in `X-Next-Cursor`.",
            headers(
                ("X-Next-Cursor" = String, description = "CSV only: present when more readings follow."),
                ("X-Kept-From" = String, description = "Present when `--retention` deleted the readings of the range's start: where the readings kept begin (RFC 3339 UTC). The page holds those readings."),
            ),
            content(
                (super::schemas::ReadingsPage = "application/json"),
                (String = "application/x-ndjson"),
                (String = "text/csv"),
            )),
        (status = 400, description = "Bad parameter or cursor.", body = crate::http::ErrorBody),
        (status = 404, description = "No data of this sensor at all, in the store or in the buffers, or no such database.", body = crate::http::ErrorBody),
        (status = 503, description = "Store unavailable; retry.", body = crate::http::ErrorBody),
    )
)]
pub async fn get_readings(
    State(state): State<QueryState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, QueryError> {
    let p = Params::parse(raw.as_deref())?;
    let state = state.open(p.get("db")?)?;
    let sensor = p.required("sensor")?.to_owned();
    let format = Format::parse(p.get("format")?)?;
    let limit =
        parse_limit(p.get("limit")?, state.limits.default_readings, state.limits.max_readings)?;
    let order = parse_order(p.get("order")?)?;
    let from = p.get("from")?.map(|s| parse_time("from", s)).transpose()?;
    let to = p.get("to")?.map(|s| parse_time("to", s)).transpose()?;
    let hash = sensor_hash(&sensor);

    let page = match p.get("cursor")?.map(ReadingsCursor::decode).transpose()? {
        Some(c) => {
            if c.sensor_hash != hash {
                return Err(QueryError::BadCursor("it belongs to another sensor"));
            }
            if order.is_some_and(|o| o != c.order) {
                return Err(QueryError::BadCursor("it belongs to the other order"));
            }
            if from.is_some_and(|f| f != c.from) || to.is_some_and(|t| t != c.to) {
                return Err(QueryError::BadCursor("it belongs to another range"));
            }
            Page {
                order: c.order,
                from: c.from,
                to: c.to,
                resume: Some((c.last_ts, c.skip)),
                sensor_hash: hash,
                limit,
            }
        }
        None => {
            let (from, to) = resolve_range(from, to, now_ms(), state.limits.default_range_ms)?;
            Page {
                order: order.unwrap_or_default(),
                from,
                to,
                resume: None,
                sensor_hash: hash,
                limit,
            }
        }
    };

    let (qfrom, qto) = page.remaining();
    let skip = page.resume.map_or(0, |(_, k)| k);
    // Buffers before the store: a reading whose write lands in between is then seen twice at
    // worst, never missed. The store's snapshot is taken when the stream is first polled.
    let mut unflushed = state.unflushed.unflushed(&sensor, qfrom, qto);
    if page.order == Order::Desc {
        unflushed.reverse();
    }
    let kept = Arc::new(Kept::default());
    let store = kept.runs(
        state.store.clone(),
        RangeQuery {
            sensor: sensor.clone(),
            from: qfrom,
            to: qto,
            order: page.order,
            // One more than the page, to know whether another page follows.
            limit: Some(
                usize::try_from(skip).unwrap_or(usize::MAX).saturating_add(limit).saturating_add(1),
            ),
        },
    );
    let mut source = Source::new(store, unflushed, page.order, page.resume);

    let first = std::future::poll_fn(|cx| source.poll_row(cx)).await.transpose()?;
    if first.is_none() && page.resume.is_none() && !sensor_known(&state, &sensor).await? {
        return Err(QueryError::UnknownSensor(sensor));
    }

    let mut tracker = Tracker::new(page);
    let mut builder = Response::builder().header(header::CONTENT_TYPE, format.content_type());
    // Known once the first row was asked for: the store checks the range before it reads.
    let kept_from = kept.from().map(format_ts);
    if let Some(from) = &kept_from {
        builder = builder.header(KEPT_FROM_HEADER, from.as_str());
    }
    let body = match format {
        Format::Json | Format::Ndjson => {
            PageBody::new(source, format, &sensor, kept_from.as_deref(), tracker, Vec::new())
        }
        Format::Csv => {
            let collected = collect_page(&mut source, &mut tracker).await?;
            if let Some(cursor) = tracker.next_cursor() {
                builder = builder.header(
                    NEXT_CURSOR_HEADER,
                    HeaderValue::from_str(&cursor).expect("cursors are URL-safe base64"),
                );
            }
            let columns = column_set(&collected);
            let tracker = Tracker::new(Page { limit: collected.len(), ..page });
            // In page order already: nothing to merge, order or skip.
            let rows = Source::new(stream::empty().boxed(), collected, Order::Asc, None);
            PageBody::new(rows, format, &sensor, None, tracker, columns)
        }
    };
    Ok(builder.body(Body::from_stream(body)).expect("static headers are valid"))
}

async fn collect_page(
    source: &mut Source,
    tracker: &mut Tracker,
) -> Result<Vec<Reading>, QueryError> {
    let mut out = Vec::new();
    while let Some(ts) = std::future::poll_fn(|cx| source.poll_row(cx)).await.transpose()? {
        if !tracker.accept(ts) {
            break;
        }
        out.push(source.take());
    }
    Ok(out)
}

/// CSV columns: every field name of the page, in order of first appearance.
fn column_set(rows: &[Reading]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut columns = Vec::new();
    for r in rows {
        for (name, _) in &r.fields {
            if !seen.contains(name.as_str()) {
                seen.insert(name.as_str());
                columns.push(name.to_string());
            }
        }
    }
    columns
}

/// The response body: serializes readings as they come, in chunks.
struct PageBody {
    source: Source,
    /// The page is complete (or broken off): nothing more is read.
    finished: bool,
    format: Format,
    ts: TsWriter,
    tracker: Tracker,
    buf: Vec<u8>,
    prefix: Option<Vec<u8>>,
    csv: Option<CsvRows>,
}

struct CsvRows {
    index: HashMap<String, usize>,
    /// Per column, the position of its value in the current reading's fields.
    cells: Vec<Option<usize>>,
    cell: Vec<u8>,
}

impl PageBody {
    fn new(
        source: Source,
        format: Format,
        sensor: &str,
        kept_from: Option<&str>,
        tracker: Tracker,
        columns: Vec<String>,
    ) -> PageBody {
        let mut prefix = Vec::new();
        let mut csv = None;
        match format {
            Format::Json => {
                prefix.extend(b"{\"sensor\":");
                serde_json::to_writer(&mut prefix, sensor).expect("writing to a Vec");
                if let Some(from) = kept_from {
                    prefix.extend(b",\"kept_from\":");
                    serde_json::to_writer(&mut prefix, from).expect("writing to a Vec");
                }
                prefix.extend(b",\"readings\":[");
            }
            Format::Ndjson => {}
            Format::Csv => {
                prefix.push(b't');
                for c in &columns {
                    prefix.push(b',');
                    write_csv_field(&mut prefix, c.as_bytes());
                }
                prefix.extend(b"\r\n");
                let index = columns.iter().enumerate().map(|(i, c)| (c.clone(), i)).collect();
                csv = Some(CsvRows { index, cells: vec![None; columns.len()], cell: Vec::new() });
            }
        }
        PageBody {
            source,
            finished: false,
            format,
            ts: TsWriter::new(),
            tracker,
            buf: Vec::new(),
            prefix: Some(prefix),
            csv,
        }
    }

    fn write_row(&mut self) {
        match self.format {
            Format::Json => {
                if self.tracker.emitted > 1 {
                    self.buf.push(b',');
                }
                self.source.write_json(&mut self.buf, &mut self.ts);
            }
            Format::Ndjson => {
                self.source.write_json(&mut self.buf, &mut self.ts);
                self.buf.push(b'\n');
            }
            Format::Csv => {
                let csv = self.csv.as_mut().expect("csv state exists in csv format");
                csv.write_row(&mut self.buf, &mut self.ts, &self.source.take());
            }
        }
    }

    fn write_end(&mut self) {
        let cursor = self.tracker.next_cursor();
        match self.format {
            Format::Json => {
                self.buf.extend(b"],\"next_cursor\":");
                serde_json::to_writer(&mut self.buf, &cursor).expect("writing to a Vec");
                self.buf.push(b'}');
            }
            Format::Ndjson => {
                if let Some(cursor) = cursor {
                    self.buf.extend(b"{\"next_cursor\":");
                    serde_json::to_writer(&mut self.buf, &cursor).expect("writing to a Vec");
                    self.buf.extend(b"}\n");
                }
            }
            // The cursor went out in `X-Next-Cursor`: the body is rows only.
            Format::Csv => {}
        }
    }

    fn take_chunk(&mut self) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        Poll::Ready(Some(Ok(Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK_BYTES + 1024),
        )))))
    }
}

impl CsvRows {
    fn write_row(&mut self, buf: &mut Vec<u8>, ts: &mut TsWriter, r: &Reading) {
        self.cells.iter_mut().for_each(|c| *c = None);
        for (at, (name, _)) in r.fields.iter().enumerate() {
            if let Some(&i) = self.index.get(name.as_str()) {
                self.cells[i] = Some(at);
            }
        }
        ts.write(buf, r.ts);
        for cell in &self.cells {
            buf.push(b',');
            self.cell.clear();
            match cell.map(|at| &r.fields[at].1) {
                None => {}
                Some(FieldValue::Str(s)) => self.cell.extend(s.as_bytes()),
                Some(v) => write_json_value(&mut self.cell, v),
            }
            write_csv_field(buf, &self.cell);
        }
        buf.extend(b"\r\n");
    }
}

impl Stream for PageBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            this.buf = prefix;
        }
        loop {
            if this.finished {
                return Poll::Ready(None);
            }
            match this.source.poll_row(cx) {
                Poll::Ready(Some(Ok(ts))) => {
                    if this.tracker.accept(ts) {
                        this.write_row();
                        if this.buf.len() >= CHUNK_BYTES {
                            return this.take_chunk();
                        }
                        continue;
                    }
                    // The page is full: release the store's cursor now rather than at drop.
                    this.source.close();
                    this.finished = true;
                    this.write_end();
                    return this.take_chunk();
                }
                Poll::Ready(None) => {
                    this.finished = true;
                    this.write_end();
                    return this.take_chunk();
                }
                Poll::Ready(Some(Err(e))) => {
                    // Headers are gone already: the only way left to tell the client is to break
                    // the body off, which every HTTP client reports as an error.
                    tracing::error!(error = %e, "store failed while streaming readings");
                    this.finished = true;
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Poll::Pending if !this.buf.is_empty() => return this.take_chunk(),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_continues_the_tie_count_across_pages() {
        let page = Page {
            order: Order::Asc,
            from: 0,
            to: 10,
            resume: Some((5, 3)),
            sensor_hash: 9,
            limit: 2,
        };
        let mut t = Tracker::new(page);
        assert!(t.accept(5));
        assert!(t.accept(5));
        assert!(!t.accept(5));
        let c = ReadingsCursor::decode(&t.next_cursor().unwrap()).unwrap();
        assert_eq!((c.last_ts, c.skip), (5, 5));

        let mut t = Tracker::new(page);
        assert!(t.accept(5));
        assert!(t.accept(6));
        assert!(!t.accept(7));
        let c = ReadingsCursor::decode(&t.next_cursor().unwrap()).unwrap();
        assert_eq!((c.last_ts, c.skip), (6, 1));
    }
}
