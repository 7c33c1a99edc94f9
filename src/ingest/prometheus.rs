//! Prometheus remote write 1.0: a snappy-compressed protobuf `WriteRequest` of time series,
//! each a label set and its samples.
//!
//! A series' `__name__` label is the measurement, its other labels are the tags, and each
//! sample is a reading of one float field, `value`: what InfluxDB 1.x made of remote write,
//! so `SELECT value FROM "http_requests_total"` reads what Prometheus sent.
//!
//! Skipped, not refused:
//! - stale markers, the NaN Prometheus writes when a series disappears: a marker, not a value;
//! - other NaN and ±Inf samples (a summary with no observations reports NaN quantiles): the
//!   stores keep finite numbers. They are counted rejected (`reason="value"`), and the request
//!   still succeeds, because Prometheus drops a batch it gets 400 for, the good samples with it;
//! - exemplars, metadata and native histograms, which have no reading to become.

use prost::Message as _;

use crate::http::ApiError;
use crate::ingest::point;
use crate::ingest::validate::{InputLimits, InvalidReading};
use crate::model::{FieldName, FieldValue, Reading, TimestampMs};

/// The bits of Prometheus' stale marker (`value.StaleNaN`).
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// `prometheus.WriteRequest`, the fields bucketd reads; protobuf skips the others.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// Native histograms, kept undecoded: only counted as skipped.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub histograms: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// Why a remote-write body cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum RemoteWriteError {
    #[error("the body is not snappy-compressed (block format): {0}")]
    Snappy(snap::Error),
    #[error("the body decompresses to {size} bytes, more than the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("the body is not a remote-write WriteRequest: {0}")]
    Protobuf(prost::DecodeError),
}

impl From<RemoteWriteError> for ApiError {
    fn from(e: RemoteWriteError) -> ApiError {
        match e {
            RemoteWriteError::TooLarge { limit, .. } => ApiError::PayloadTooLarge { limit },
            e => ApiError::BadRequest(e.to_string()),
        }
    }
}

/// The size `body` says it decompresses to, checked against `limit` before anything is
/// allocated for it.
pub fn decompressed_len(body: &[u8], limit: usize) -> Result<usize, RemoteWriteError> {
    let size = snap::raw::decompress_len(body).map_err(RemoteWriteError::Snappy)?;
    if size > limit {
        return Err(RemoteWriteError::TooLarge { size, limit });
    }
    Ok(size)
}

/// Decompresses and decodes a body of at most `limit` bytes decompressed.
pub fn decode(body: &[u8], limit: usize) -> Result<WriteRequest, RemoteWriteError> {
    let mut plain = vec![0; decompressed_len(body, limit)?];
    let n =
        snap::raw::Decoder::new().decompress(body, &mut plain).map_err(RemoteWriteError::Snappy)?;
    plain.truncate(n);
    WriteRequest::decode(plain.as_slice()).map_err(RemoteWriteError::Protobuf)
}

/// What a request's series became: a refused series is one entry of `rejected`; `skipped`
/// counts stale markers and native histograms.
pub type Converted = point::Converted<Rejected>;

#[derive(Debug)]
pub struct Rejected {
    /// The series' position in the request.
    pub series: usize,
    /// The series' metric name, as sent.
    pub name: String,
    pub samples: usize,
    pub error: InvalidReading,
}

/// The readings of `request`'s samples, each series checked and admitted once.
pub fn convert(request: WriteRequest, limits: &InputLimits) -> Converted {
    let mut out = Converted::default();
    let value = FieldName::interned("value");
    for (i, ts) in request.timeseries.into_iter().enumerate() {
        out.skipped += ts.histograms.len();
        if ts.samples.is_empty() {
            continue;
        }
        let mut name = None;
        let mut tags = Vec::with_capacity(ts.labels.len());
        for label in ts.labels {
            if label.name == "__name__" {
                name = Some(label.value);
            } else {
                tags.push((label.name, label.value));
            }
        }
        let name = name.unwrap_or_default();
        let reject = |error, samples, out: &mut Converted| {
            out.rejected.push(Rejected { series: i, name: name.clone(), samples, error });
        };
        let series = match point::series(&name, tags, limits) {
            Ok(series) => series,
            Err(error) => {
                reject(error, ts.samples.len(), &mut out);
                continue;
            }
        };
        for sample in ts.samples {
            if sample.value.to_bits() == STALE_NAN {
                out.skipped += 1;
                continue;
            }
            let fields = [(value.clone(), FieldValue::Float(sample.value))].into_iter().collect();
            let reading = Reading { ts: sample.timestamp as TimestampMs, fields };
            match point::reading(reading, limits) {
                Ok(reading) => out.items.push((series.clone(), reading)),
                Err(error) => reject(error, 1, &mut out),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
        TimeSeries {
            labels: labels
                .iter()
                .map(|(n, v)| Label { name: n.to_string(), value: v.to_string() })
                .collect(),
            samples: samples
                .iter()
                .map(|&(value, timestamp)| Sample { value, timestamp })
                .collect(),
            histograms: vec![],
        }
    }

    fn compress(request: &WriteRequest) -> Vec<u8> {
        snap::raw::Encoder::new().compress_vec(&request.encode_to_vec()).unwrap()
    }

    #[test]
    fn samples_become_readings_of_their_metric() {
        let request = WriteRequest {
            timeseries: vec![
                series(
                    &[("__name__", "up"), ("job", "node"), ("instance", "h:9100")],
                    &[(1.0, 1_000), (0.0, 16_000)],
                ),
                series(&[("__name__", "temp")], &[(21.5, 2_000)]),
            ],
        };
        let decoded = decode(&compress(&request), 1 << 20).unwrap();
        assert_eq!(decoded, request);
        let out = convert(decoded, &InputLimits::default());
        assert!(out.rejected.is_empty(), "{:?}", out.rejected);
        let got: Vec<(String, TimestampMs, f64)> = out
            .items
            .iter()
            .map(|(s, r)| {
                let FieldValue::Float(v) = r.fields[0].1 else { panic!() };
                assert_eq!(r.fields[0].0.as_str(), "value");
                (s.key().to_owned(), r.ts, v)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("up,instance=h:9100,job=node".into(), 1_000, 1.0),
                ("up,instance=h:9100,job=node".into(), 16_000, 0.0),
                ("temp".into(), 2_000, 21.5),
            ]
        );
    }

    #[test]
    fn stale_markers_are_skipped_and_bad_samples_rejected_alone() {
        let request = WriteRequest {
            timeseries: vec![
                series(
                    &[("__name__", "q")],
                    &[(f64::from_bits(STALE_NAN), 1), (f64::NAN, 2), (f64::INFINITY, 3), (4.0, 4)],
                ),
                series(&[("job", "no name")], &[(1.0, 1), (2.0, 2)]),
            ],
        };
        let out = convert(request, &InputLimits::default());
        assert_eq!(out.skipped, 1);
        assert_eq!(out.items.len(), 1);
        assert_eq!(out.items[0].1.ts, 4);
        let reasons: Vec<(usize, &str, usize)> =
            out.rejected.iter().map(|r| (r.series, r.error.reason(), r.samples)).collect();
        assert_eq!(reasons, [(0, "value", 1), (0, "value", 1), (1, "sensor", 2)]);
    }

    #[test]
    fn bodies_that_are_not_remote_write_are_refused_before_they_grow() {
        assert!(matches!(decode(b"not snappy at all", 1 << 20), Err(RemoteWriteError::Snappy(_))));
        let big = WriteRequest { timeseries: vec![series(&[("__name__", "x")], &[(1.0, 1)]); 100] };
        assert!(matches!(
            decode(&compress(&big), 100),
            Err(RemoteWriteError::TooLarge { limit: 100, .. })
        ));
        let junk = snap::raw::Encoder::new().compress_vec(&[0xff; 40]).unwrap();
        assert!(matches!(decode(&junk, 1 << 20), Err(RemoteWriteError::Protobuf(_))));
    }
}
