//! `POST /api/v1/dead-letters/replay`: writes the readings the store refused for good back
//! through the intake, once their cause is fixed (`flush::dead_letter` keeps them).
//!
//! Each file is read whole (a file is at most `dead_letter::FILE_BYTES` plus one block),
//! parsed as line protocol, and accepted in pieces of [`NDJSON_PUSH_READINGS`], each as a
//! write is (logged, then buffered); after each piece the file's marker records how far the
//! replay got, and a file wholly back is removed. A refused piece (full buffers, full log)
//! ends the replay with the write's own error, naming how many readings went back before it:
//! calling again continues where it stopped.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::state::{IngestState, NDJSON_PUSH_READINGS, now_ms, push};
use crate::flush::dead_letter::{self, DeadLetterError};
use crate::http::ApiError;
use crate::ingest::line_protocol::{self, Precision};
use crate::ingest::metrics::Protocol;
use crate::model::{Item, Series, SeriesMeta};

impl From<DeadLetterError> for ApiError {
    fn from(e: DeadLetterError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

/// What a replay wrote back.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ReplayBody {
    /// Readings accepted again.
    #[schema(example = 120)]
    pub replayed: usize,
    /// Files written back whole and removed.
    pub files: usize,
}

/// Writes the dead letters back.
#[utoipa::path(
    post,
    path = "/api/v1/dead-letters/replay",
    tag = "ingest",
    responses(
        (status = 200, description = "Every dead-letter file was written back and removed.", body = ReplayBody),
        (status = 409, description = "A replay is already running.", body = crate::http::ErrorBody),
        (status = 500, description = "A dead-letter file cannot be read or parsed.", body = crate::http::ErrorBody),
        (status = 503, description = "The buffers or the log are full: what went back before stays back; call again later.", body = crate::http::ErrorBody),
    )
)]
pub(crate) async fn replay(State(state): State<IngestState>) -> Result<Json<ReplayBody>, ApiError> {
    // On a task of its own: a request given up on (its timeout, a client gone) must not stop
    // the replay between accepting a piece and recording it, or the next replay repeats it.
    tokio::spawn(replay_all(state))
        .await
        .map_err(|e| ApiError::Internal(format!("dead-letter replay: {e}")))?
        .map(Json)
}

async fn replay_all(state: IngestState) -> Result<ReplayBody, ApiError> {
    let Some(dead_letters) = state.dead_letters.clone() else {
        return Ok(ReplayBody { replayed: 0, files: 0 });
    };
    let Some(_replaying) = dead_letters.start_replay() else {
        return Err(ApiError::Conflict("a dead-letter replay is already running".into()));
    };
    let mut body = ReplayBody { replayed: 0, files: 0 };
    for file in dead_letters.files()? {
        let text = tokio::fs::read_to_string(&file)
            .await
            .map_err(|e| ApiError::Internal(format!("dead-letter file {}: {e}", file.display())))?;
        let mut items: Vec<Item> = Vec::new();
        let mut at = dead_letters.replayed_up_to(&file)?;
        for block in dead_letter::blocks(&text, at) {
            let (good, bad) = line_protocol::parse_body_split(
                block.lines.as_bytes(),
                Precision::Nanoseconds,
                now_ms(),
                &state.limits,
            );
            if let Some(e) = bad.first() {
                return Err(ApiError::Internal(format!(
                    "dead-letter file {} (block at byte {at}): {e}",
                    file.display()
                )));
            }
            items.extend(good.into_iter().map(|(series, reading)| match &block.sensor {
                Some(key) => (under_key(&series, key), reading),
                None => (series, reading),
            }));
            at = block.end;
            if items.len() >= NDJSON_PUSH_READINGS {
                body.replayed += accept(&state, std::mem::take(&mut items), body.replayed).await?;
                dead_letters.mark_replayed(&file, at, text.len())?;
            }
        }
        body.replayed += accept(&state, items, body.replayed).await?;
        dead_letters.mark_replayed(&file, text.len(), text.len())?;
        body.files += 1;
    }
    if body.replayed > 0 {
        tracing::info!(readings = body.replayed, files = body.files, "dead letters written back");
    }
    Ok(body)
}

/// Accepts one piece; a refusal says how much of the replay went back before it.
async fn accept(state: &IngestState, items: Vec<Item>, before: usize) -> Result<usize, ApiError> {
    push(&state.intake, items, Protocol::DeadLetters, &state.http)
        .await
        .map_err(|refused| ApiError::from(refused).with_accepted(before))
}

/// The series a JSON sensor key named: its measurement and tags, under that key.
fn under_key(series: &Series, key: &str) -> Series {
    Series::from(Arc::new(SeriesMeta::new(
        key,
        series.measurement(),
        &series.tags().collect::<Vec<_>>(),
    )))
}
