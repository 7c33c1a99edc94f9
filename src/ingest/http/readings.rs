//! `POST /api/v1/readings`: bucketd's JSON API, one document read whole or NDJSON streamed.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;

use super::body::{Encoding, GzipStream, IDENTITY_OR_GZIP, content_encoding, read_body};
use super::schemas::{AcceptedBody, IngestBody};
use super::state::{IngestState, NDJSON_PUSH_READINGS, now_ms, push};
use crate::http::error::{MAX_LISTED_ERRORS, RejectedItem, RejectedItems};
use crate::http::{ApiError, ErrorBody};
use crate::ingest::json::{self, ItemError, NdjsonDecoder};
use crate::ingest::memory::Charge;
use crate::ingest::metrics::{Protocol, count_received, count_rejected};
use crate::ingest::validate::InputLimits;
use crate::model::Item;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JsonBody {
    /// One reading or an array of them, read whole.
    Document,
    /// One reading per line, streamed.
    Ndjson,
}

fn json_body_kind(headers: &HeaderMap) -> Result<JsonBody, ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(JsonBody::Document);
    };
    let mime = value.to_str().unwrap_or("").split(';').next().unwrap_or("").trim();
    let mime = mime.to_ascii_lowercase();
    match mime.as_str() {
        "application/json" => Ok(JsonBody::Document),
        "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/x-jsonlines" => Ok(JsonBody::Ndjson),
        _ if mime.ends_with("+json") => Ok(JsonBody::Document),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Type {mime:?}; use application/json or application/x-ndjson"
        ))),
    }
}

/// Tally of one JSON request: what was accepted, and the first rejected items.
struct JsonTally {
    protocol: Protocol,
    pending: Vec<Item>,
    accepted: usize,
    rejected: Vec<RejectedItem>,
    rejected_count: usize,
}

impl JsonTally {
    fn new(protocol: Protocol) -> Self {
        JsonTally {
            protocol,
            pending: Vec::new(),
            accepted: 0,
            rejected: Vec::new(),
            rejected_count: 0,
        }
    }

    fn add(&mut self, parsed: json::Parsed) {
        for item in parsed {
            match item {
                Ok(reading) => self.pending.push(reading),
                Err(e) => self.reject(&e),
            }
        }
    }

    fn reject(&mut self, e: &ItemError) {
        count_rejected(self.protocol, e.reason, 1);
        self.rejected_count += 1;
        if self.rejected.len() < MAX_LISTED_ERRORS {
            self.rejected.push(RejectedItem { index: e.index, error: e.message.clone() });
        }
    }

    /// Pushes what is pending, in pieces of at most `piece` readings. Each piece is
    /// all-or-nothing; pieces pushed before a failure stay accepted.
    async fn push_pending(&mut self, state: &IngestState, piece: usize) -> Result<(), ApiError> {
        let mut items = std::mem::take(&mut self.pending);
        while !items.is_empty() {
            let rest = items.split_off(items.len().min(piece.max(1)));
            match push(&state.intake, items, self.protocol, &state.http).await {
                Ok(n) => self.accepted += n,
                Err(refused) => {
                    count_rejected(self.protocol, refused.reason, rest.len());
                    return Err(refused.error.with_accepted(self.accepted));
                }
            }
            items = rest;
        }
        Ok(())
    }

    fn into_response(self) -> Result<Response, ApiError> {
        if self.rejected_count > 0 {
            return Err(ApiError::InvalidItems(Box::new(RejectedItems {
                accepted: self.accepted,
                rejected: self.rejected,
                rejected_count: self.rejected_count,
            })));
        }
        Ok((StatusCode::ACCEPTED, Json(json!({ "accepted": self.accepted }))).into_response())
    }
}

/// The database a write or a query names: `db`, the default one when absent.
#[derive(Debug, Default, serde::Deserialize)]
pub struct DbParam {
    pub db: Option<String>,
}

/// `POST /api/v1/readings`: 202 `{"accepted": n}`; 400 listing rejected items (the valid ones
/// are accepted); 503 when the buffers are full.
#[utoipa::path(
    post,
    path = "/api/v1/readings",
    tag = "ingest",
    params(("db" = Option<String>, Query, description = "The database; `bucketd` when absent. One that does not exist gets 404.")),
    request_body(
        description = "One reading, an array of readings (`application/json`), or one reading per line (`application/x-ndjson`). Bodies may be gzip-encoded.",
        content(
            (IngestBody = "application/json"),
            (String = "application/x-ndjson"),
        )
    ),
    responses(
        (status = 202, description = "Every reading accepted: in the fsync'd write-ahead log (or, with `--ack=buffered`, in memory). `{\"accepted\": N}`.", body = AcceptedBody),
        (status = 400, description = "Some or all readings rejected; the body lists each rejected item by index.", body = ErrorBody),
        (status = 404, description = "The database does not exist.", body = ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = ErrorBody),
        (status = 413, description = "Body too large, or more readings than the buffers can ever hold.", body = ErrorBody),
        (status = 415, description = "Content type other than JSON or NDJSON, or an encoding other than gzip.", body = ErrorBody),
        (status = 503, description = "Buffers or write-ahead log full, or too many writes in progress; retry after the `Retry-After` delay.", body = ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged; writes are taken again, without a restart, once there is room (`Retry-After`).", body = ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = ErrorBody),
    )
)]
pub(crate) async fn write_readings(
    State(state): State<IngestState>,
    params: Result<Query<DbParam>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let limits = state.limits_in(params.db.as_deref())?;
    match json_body_kind(&headers)? {
        JsonBody::Document => {
            let limit = state.http.max_body_bytes;
            let read =
                read_body(body, &headers, IDENTITY_OR_GZIP, limit, &state.memory, Protocol::Json)
                    .await?;
            // Held until the readings are pushed (see `write_line_protocol`).
            let (bytes, _held) = (read.bytes, read.held);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Err(ApiError::BadRequest(
                    "empty body: send one JSON reading, an array of them, or NDJSON".into(),
                ));
            }
            let mut tally = JsonTally::new(Protocol::Json);
            tally.add(json::parse_document(&bytes, now_ms(), &limits));
            drop(bytes);
            tally.push_pending(&state, usize::MAX).await?;
            tally.into_response()
        }
        JsonBody::Ndjson => {
            let encoding = content_encoding(&headers, IDENTITY_OR_GZIP)?;
            stream_ndjson(&state, &limits, body, encoding).await
        }
    }
}

async fn stream_ndjson(
    state: &IngestState,
    limits: &InputLimits,
    body: Body,
    encoding: Encoding,
) -> Result<Response, ApiError> {
    let now = now_ms();
    let mut decoder = NdjsonDecoder::new(state.http.max_body_bytes);
    let mut gzip = (encoding == Encoding::Gzip).then(GzipStream::new);
    let mut tally = JsonTally::new(Protocol::Ndjson);
    let mut stream = body.into_data_stream();
    let push_every = NDJSON_PUSH_READINGS.min(state.http.max_buffered_readings);
    // What was fed since the last push, charged to the memory budget until it is pushed (and
    // a piece is pushed once it holds the body limit, whatever its count of readings).
    let mut charge = Charge::default();
    let mut unpushed = 0usize;

    // Readings already pushed stay accepted whatever happens later in the stream, so every
    // failure from here on reports how many there were.
    let mid_stream = |accepted: usize, e: ApiError| match e {
        ApiError::BadRequest(msg) => ApiError::BadRequest(format!(
            "{msg} ({accepted} readings from earlier lines were accepted)"
        )),
        other => other.with_accepted(accepted),
    };

    while let Some(chunk) = stream.next().await {
        let chunk: Bytes = chunk.map_err(|e| {
            mid_stream(tally.accepted, ApiError::BadRequest(format!("reading the body: {e}")))
        })?;
        count_received(Protocol::Ndjson, chunk.len());
        let mut feed = |plain: &[u8]| -> Result<(), ApiError> {
            state.memory.try_charge(&mut charge, plain.len())?;
            unpushed += plain.len();
            tally.add(decoder.feed(plain, now, limits));
            Ok(())
        };
        match gzip.as_mut() {
            None => feed(&chunk),
            Some(gz) => gz.feed(&chunk, feed),
        }
        .map_err(|e| mid_stream(tally.accepted, e))?;
        if tally.pending.len() >= push_every || unpushed >= state.http.max_body_bytes {
            tally.push_pending(state, push_every).await?;
            charge.release_beyond(decoder.partial_len());
            unpushed = decoder.partial_len();
        }
    }
    if let Some(gz) = gzip {
        gz.finish(|plain| {
            state.memory.try_charge(&mut charge, plain.len())?;
            tally.add(decoder.feed(plain, now, limits));
            Ok(())
        })
        .map_err(|e| mid_stream(tally.accepted, e))?;
    }
    tally.add(decoder.finish(now, limits));
    tally.push_pending(state, push_every).await?;
    tally.into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::super::body::{Encoding, content_encoding};
    use super::*;

    #[test]
    fn content_types_and_encodings() {
        let mut h = HeaderMap::new();
        assert_eq!(json_body_kind(&h).unwrap(), JsonBody::Document);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        assert_eq!(json_body_kind(&h).unwrap(), JsonBody::Document);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        assert_eq!(json_body_kind(&h).unwrap(), JsonBody::Ndjson);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv"));
        assert!(matches!(json_body_kind(&h), Err(ApiError::UnsupportedMediaType(_))));

        assert_eq!(content_encoding(&h, IDENTITY_OR_GZIP).unwrap(), Encoding::Identity);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
        assert_eq!(content_encoding(&h, IDENTITY_OR_GZIP).unwrap(), Encoding::Gzip);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        assert!(matches!(
            content_encoding(&h, IDENTITY_OR_GZIP),
            Err(ApiError::UnsupportedMediaType(_))
        ));
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("snappy"));
        assert!(matches!(
            content_encoding(&h, IDENTITY_OR_GZIP),
            Err(ApiError::UnsupportedMediaType(_))
        ));
        assert_eq!(content_encoding(&h, &[Encoding::Snappy]).unwrap(), Encoding::Snappy);
        h.remove(header::CONTENT_ENCODING);
        assert!(matches!(
            content_encoding(&h, &[Encoding::Snappy]),
            Err(ApiError::UnsupportedMediaType(_))
        ));
    }
}
