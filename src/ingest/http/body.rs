//! Reading request bodies: whole (bounded before and after gzip decompression) or, for
//! NDJSON, as a stream decompressed piecewise.

use std::io::{Read, Write};

use axum::body::Body;
use axum::http::{HeaderMap, header};
use futures::StreamExt;

use crate::http::ApiError;
use crate::ingest::memory::{Charge, RequestMemory};
use crate::ingest::metrics::{Protocol, count_received};

/// Compressed bytes handed to the streaming gzip decoder at a time. Deflate expands at most
/// ~1032:1, so one slice yields at most about 1 MiB however hostile the input.
const GZIP_STREAM_SLICE: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Encoding {
    Identity,
    Gzip,
    /// Snappy's block format, which Prometheus' remote write requires. [`read_body`] hands it
    /// on compressed: its decoder checks the size it declares.
    Snappy,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::Identity => "none",
            Encoding::Gzip => "gzip",
            Encoding::Snappy => "snappy",
        }
    }
}

/// What the route's clients send: bucketd's and InfluxDB's writes.
pub(super) const IDENTITY_OR_GZIP: &[Encoding] = &[Encoding::Identity, Encoding::Gzip];

/// The request's `Content-Encoding`, if it is one of `allowed`.
pub(super) fn content_encoding(
    headers: &HeaderMap,
    allowed: &[Encoding],
) -> Result<Encoding, ApiError> {
    let given = match headers.get(header::CONTENT_ENCODING) {
        None => Some(Encoding::Identity),
        Some(value) => match value.to_str().map(|v| v.trim().to_ascii_lowercase()) {
            Ok(v) if v.is_empty() || v == "identity" => Some(Encoding::Identity),
            Ok(v) if v == "gzip" || v == "x-gzip" => Some(Encoding::Gzip),
            Ok(v) if v == "snappy" => Some(Encoding::Snappy),
            _ => None,
        },
    };
    match given {
        Some(encoding) if allowed.contains(&encoding) => Ok(encoding),
        _ => {
            let value = headers.get(header::CONTENT_ENCODING);
            let names: Vec<&str> = allowed.iter().map(|e| e.name()).collect();
            Err(ApiError::UnsupportedMediaType(match value {
                Some(value) => {
                    format!("unsupported Content-Encoding {value:?}; use {}", names.join(" or "))
                }
                None => format!("missing Content-Encoding; use {}", names.join(" or ")),
            }))
        }
    }
}

/// A body read whole, with the share of the memory budget it holds: keep it until its readings
/// are pushed.
pub(super) struct ReadBody {
    pub bytes: Vec<u8>,
    pub held: Charge,
}

/// Reads a body whole, in one of the `allowed` encodings, refusing to hold more than `limit`
/// bytes before or after decompression, or more than `memory` has room for.
pub(super) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    allowed: &[Encoding],
    limit: usize,
    memory: &RequestMemory,
    protocol: Protocol,
) -> Result<ReadBody, ApiError> {
    let encoding = content_encoding(headers, allowed)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let mut held = Charge::default();
    // Trust the declared length only up to the limit, so a lie costs at most the limit.
    let reserve = declared.unwrap_or(0).min(limit as u64) as usize;
    memory.try_charge(&mut held, reserve)?;
    let mut charged = reserve;
    let mut raw = Vec::with_capacity(reserve);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("reading the body: {e}")))?;
        count_received(protocol, chunk.len());
        if raw.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        let len = raw.len() + chunk.len();
        if len > charged {
            memory.try_charge(&mut held, len - charged)?;
            charged = len;
        }
        raw.extend_from_slice(&chunk);
    }
    let bytes = match encoding {
        Encoding::Identity | Encoding::Snappy => raw,
        Encoding::Gzip => {
            let plain = gunzip_limited(&raw, limit)?;
            memory.try_charge(&mut held, plain.len())?;
            plain
        }
    };
    Ok(ReadBody { bytes, held })
}

/// Decompresses gzip (concatenated members too, as Go's reader does) into at most `limit`
/// bytes. The output buffer grows by doubling but is capped at `limit`, so a gzip bomb costs
/// no more than the limit before it is refused with 413.
pub fn gunzip_limited(data: &[u8], limit: usize) -> Result<Vec<u8>, ApiError> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(data);
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ApiError::BadRequest(format!("invalid gzip body: {e}"))),
        };
        if out.len() + n > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        if out.capacity() - out.len() < n {
            let target = (out.capacity() * 2).max(64 * 1024).min(limit).max(out.len() + n);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Decompresses a gzip stream piecewise, handing each bounded piece of output on.
pub(super) struct GzipStream {
    decoder: flate2::write::MultiGzDecoder<Vec<u8>>,
}

impl GzipStream {
    pub(super) fn new() -> Self {
        GzipStream { decoder: flate2::write::MultiGzDecoder::new(Vec::new()) }
    }

    pub(super) fn feed(
        &mut self,
        compressed: &[u8],
        mut sink: impl FnMut(&[u8]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        for slice in compressed.chunks(GZIP_STREAM_SLICE) {
            self.decoder.write_all(slice).map_err(gzip_error)?;
            let out = std::mem::take(self.decoder.get_mut());
            sink(&out)?;
        }
        Ok(())
    }

    pub(super) fn finish(
        mut self,
        mut sink: impl FnMut(&[u8]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        self.decoder.try_finish().map_err(gzip_error)?;
        let out = std::mem::take(self.decoder.get_mut());
        sink(&out)
    }
}

fn gzip_error(e: std::io::Error) -> ApiError {
    ApiError::BadRequest(format!("invalid gzip body: {e}"))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gunzip_within_the_limit() {
        let plain = b"m,host=a v=1 1\nm,host=b v=2 2\n".repeat(100);
        assert_eq!(gunzip_limited(&gzip(&plain), plain.len()).unwrap(), plain);
        assert!(matches!(
            gunzip_limited(&gzip(&plain), plain.len() - 1),
            Err(ApiError::PayloadTooLarge { .. })
        ));
        assert!(matches!(gunzip_limited(b"not gzip at all", 1000), Err(ApiError::BadRequest(_))));
        assert_eq!(gunzip_limited(b"", 10).unwrap(), b"");
    }

    #[test]
    fn gunzip_reads_concatenated_members() {
        let mut both = gzip(b"a v=1\n");
        both.extend(gzip(b"b v=2\n"));
        assert_eq!(gunzip_limited(&both, 100).unwrap(), b"a v=1\nb v=2\n");
    }

    #[test]
    fn gunzip_never_holds_more_than_the_limit() {
        // 64 MiB of zeros compress to ~64 KiB; with a 1 MiB limit the output must stop there.
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let limit = 1 << 20;
        // Capacity is what was allocated; check it through a success just under the limit.
        let ok = gunzip_limited(&gzip(&vec![7u8; limit]), limit).unwrap();
        assert!(ok.capacity() <= limit, "capacity {} > limit {limit}", ok.capacity());
        assert!(matches!(gunzip_limited(&bomb, limit), Err(ApiError::PayloadTooLarge { .. })));
    }

    #[test]
    fn streaming_gzip_yields_bounded_pieces() {
        let plain = b"{\"sensor\":\"s\",\"v\":1}\n".repeat(10_000);
        let compressed = gzip(&plain);
        let mut gz = GzipStream::new();
        let mut out = Vec::new();
        let mut largest = 0;
        for piece in compressed.chunks(7_000) {
            gz.feed(piece, |p| {
                largest = largest.max(p.len());
                out.extend_from_slice(p);
                Ok(())
            })
            .unwrap();
        }
        gz.finish(|p| {
            out.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(out, plain);
        assert!(largest <= GZIP_STREAM_SLICE * 1100, "piece of {largest} bytes");
    }
}
