//! OpenTelemetry metrics (OTLP), protobuf or JSON: an `ExportMetricsServiceRequest`, whose data
//! points become readings.
//!
//! A metric's name is the measurement, and a point's tags are its resource's attributes and its
//! own (the point's win where both name one). Attribute values are written as text; empty ones
//! are dropped, as line protocol has no empty tag. The fields:
//! - gauges and sums: `value`, a float, or an integer for integer points. A sum's temporality
//!   and monotonicity are not kept;
//! - histograms: `count`, `sum`, `min`, `max` (those the point has), and one field per bucket,
//!   `le_<bound>`, holding the cumulative count of values at or below the bound, as
//!   Prometheus' `_bucket` series do; `le_+Inf` equals `count`;
//! - exponential histograms: `count`, `sum`, `min`, `max`, `zero_count`, not their buckets;
//! - summaries: `count`, `sum`, and `quantile_<q>` per quantile.
//!
//! A point's time is `time_unix_nano`, floored to the millisecond; 0 is the time of arrival.
//! Points flagged "no recorded value" are skipped.

use std::fmt::Write as _;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::{AnyValue as AnyValueBox, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::{DataPointFlags, number_data_point};
use prost::Message as _;

use crate::http::ApiError;
use crate::ingest::point;
use crate::ingest::validate::{InputLimits, InvalidReading};
use crate::model::{FieldName, FieldValue, Fields, Reading, TimestampMs};

/// How a request's body is encoded, from its content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Why an OTLP body cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("the body is not an OTLP ExportMetricsServiceRequest in protobuf: {0}")]
    Protobuf(prost::DecodeError),
    #[error("the body is not an OTLP ExportMetricsServiceRequest in JSON: {0}")]
    Json(serde_json::Error),
}

impl From<OtlpError> for ApiError {
    fn from(e: OtlpError) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

pub fn decode(body: &[u8], encoding: Encoding) -> Result<ExportMetricsServiceRequest, OtlpError> {
    match encoding {
        Encoding::Protobuf => {
            ExportMetricsServiceRequest::decode(body).map_err(OtlpError::Protobuf)
        }
        Encoding::Json => serde_json::from_slice(body).map_err(OtlpError::Json),
    }
}

/// What a request's points became; `skipped` counts points without a recorded value and
/// metrics without data.
pub type Converted = point::Converted<Rejected>;

#[derive(Debug)]
pub struct Rejected {
    /// The metric's name, as sent.
    pub metric: String,
    pub error: InvalidReading,
}

/// One data point, whatever its kind: its attributes, time and fields.
struct Point<'a> {
    attributes: &'a [KeyValue],
    time_unix_nano: u64,
    flags: u32,
    fields: Fields,
}

impl<'a> Point<'a> {
    fn new(attributes: &'a [KeyValue], time_unix_nano: u64, flags: u32, fields: Fields) -> Self {
        Point { attributes, time_unix_nano, flags, fields }
    }
}

/// The readings of `request`'s data points, each checked as a line-protocol point is.
pub fn convert(
    request: ExportMetricsServiceRequest,
    now: TimestampMs,
    limits: &InputLimits,
) -> Converted {
    let mut out = Converted::default();
    for resource_metrics in &request.resource_metrics {
        let resource: &[KeyValue] =
            resource_metrics.resource.as_ref().map_or(&[], |r| &r.attributes);
        for scope in &resource_metrics.scope_metrics {
            for metric in &scope.metrics {
                let Some(data) = &metric.data else {
                    out.skipped += 1;
                    continue;
                };
                for p in points(data) {
                    if p.flags & DataPointFlags::NoRecordedValueMask as u32 != 0 {
                        out.skipped += 1;
                        continue;
                    }
                    let ts = match p.time_unix_nano {
                        0 => now,
                        nanos => (nanos / 1_000_000) as TimestampMs,
                    };
                    let reading = Reading { ts, fields: p.fields };
                    let item = point::series(&metric.name, tags(resource, p.attributes), limits)
                        .and_then(|series| Ok((series, point::reading(reading, limits)?)));
                    match item {
                        Ok(item) => out.items.push(item),
                        Err(error) => {
                            out.rejected.push(Rejected { metric: metric.name.clone(), error })
                        }
                    }
                }
            }
        }
    }
    out
}

/// The data points of one metric, made fields.
fn points(data: &Data) -> Vec<Point<'_>> {
    let name = FieldName::interned;
    let int = |n: u64| FieldValue::Int(i64::try_from(n).unwrap_or(i64::MAX));
    match data {
        Data::Gauge(g) => g.data_points.iter().map(number).collect(),
        Data::Sum(s) => s.data_points.iter().map(number).collect(),
        Data::Histogram(h) => h
            .data_points
            .iter()
            .map(|p| {
                let mut fields: Fields = [(name("count"), int(p.count))].into_iter().collect();
                optional_floats(&mut fields, [("sum", p.sum), ("min", p.min), ("max", p.max)]);
                let mut cumulative = 0u64;
                for (i, n) in p.bucket_counts.iter().enumerate() {
                    cumulative = cumulative.saturating_add(*n);
                    let bound = match p.explicit_bounds.get(i) {
                        Some(bound) => format!("le_{bound}"),
                        None => "le_+Inf".to_owned(),
                    };
                    fields.push((FieldName::from(bound.as_str()), int(cumulative)));
                }
                Point::new(&p.attributes, p.time_unix_nano, p.flags, fields)
            })
            .collect(),
        Data::ExponentialHistogram(h) => h
            .data_points
            .iter()
            .map(|p| {
                let mut fields: Fields = [(name("count"), int(p.count))].into_iter().collect();
                optional_floats(&mut fields, [("sum", p.sum), ("min", p.min), ("max", p.max)]);
                fields.push((name("zero_count"), int(p.zero_count)));
                Point::new(&p.attributes, p.time_unix_nano, p.flags, fields)
            })
            .collect(),
        Data::Summary(s) => s
            .data_points
            .iter()
            .map(|p| {
                let mut fields: Fields =
                    [(name("count"), int(p.count)), (name("sum"), FieldValue::Float(p.sum))]
                        .into_iter()
                        .collect();
                for q in &p.quantile_values {
                    let field = format!("quantile_{}", q.quantile);
                    fields.push((FieldName::from(field.as_str()), FieldValue::Float(q.value)));
                }
                Point::new(&p.attributes, p.time_unix_nano, p.flags, fields)
            })
            .collect(),
    }
}

fn number(p: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint) -> Point<'_> {
    let value = match p.value {
        Some(number_data_point::Value::AsDouble(f)) => Some(FieldValue::Float(f)),
        Some(number_data_point::Value::AsInt(i)) => Some(FieldValue::Int(i)),
        None => None,
    };
    let fields = value.map(|v| (FieldName::interned("value"), v)).into_iter().collect();
    Point::new(&p.attributes, p.time_unix_nano, p.flags, fields)
}

fn optional_floats<const N: usize>(fields: &mut Fields, values: [(&str, Option<f64>); N]) {
    for (name, value) in values {
        if let Some(v) = value {
            fields.push((FieldName::interned(name), FieldValue::Float(v)));
        }
    }
}

/// The resource's attributes, then the point's over them, as text (empty ones are dropped by
/// [`point::series`]). Sorted by key, so that a repeated key costs a comparison with its
/// neighbour rather than a search: a body may carry very many attributes.
fn tags(resource: &[KeyValue], point: &[KeyValue]) -> Vec<(String, String)> {
    let mut tags: Vec<(String, String)> = resource
        .iter()
        .chain(point)
        .map(|kv| (kv.key.clone(), kv.value.as_ref().map(text).unwrap_or_default()))
        .collect();
    // Stable: of equal keys, the later (the point's) comes last, and its value is kept.
    tags.sort_by(|a, b| a.0.cmp(&b.0));
    tags.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        same
    });
    tags
}

/// An attribute's value as a tag's text: arrays and maps as JSON.
fn text(value: &AnyValueBox) -> String {
    match &value.value {
        None => String::new(),
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(f)) => f.to_string(),
        Some(AnyValue::BytesValue(b)) => {
            b.iter().fold(String::with_capacity(2 * b.len()), |mut s, byte| {
                let _ = write!(s, "{byte:02x}");
                s
            })
        }
        Some(_) => serde_json::to_string(value).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics example of the OTLP specification (opentelemetry-proto's
    /// `examples/metrics.json`), with a summary and an integer gauge added.
    const EXAMPLE: &str = r#"{
      "resourceMetrics": [{
        "resource": {"attributes": [
          {"key": "service.name", "value": {"stringValue": "my.service"}},
          {"key": "host.cores", "value": {"intValue": "8"}},
          {"key": "empty", "value": {"stringValue": ""}}
        ]},
        "scopeMetrics": [{
          "scope": {"name": "my.library", "version": "1.0.0"},
          "metrics": [
            {"name": "my.counter", "unit": "1", "sum": {"aggregationTemporality": 1, "isMonotonic": true,
              "dataPoints": [{"asDouble": 5, "startTimeUnixNano": "1544712660300000000",
                "timeUnixNano": "1544712660300000000",
                "attributes": [{"key": "my.counter.attr", "value": {"stringValue": "some value"}}]}]}},
            {"name": "my.gauge", "unit": "1", "gauge": {"dataPoints": [{"asInt": "10",
              "timeUnixNano": "1544712660300000000",
              "attributes": [{"key": "service.name", "value": {"stringValue": "overridden"}}]}]}},
            {"name": "my.histogram", "unit": "1", "histogram": {"aggregationTemporality": 1,
              "dataPoints": [{"startTimeUnixNano": "1544712660300000000", "timeUnixNano": "1544712660300000000",
                "count": "3", "sum": 2.5, "bucketCounts": ["1", "1", "1"], "explicitBounds": [1, 2.5],
                "min": 0, "max": 2}]}},
            {"name": "my.summary", "summary": {"dataPoints": [{"timeUnixNano": "1544712660301999999",
              "count": "4", "sum": 10, "quantileValues": [{"quantile": 0.5, "value": 2}]}]}},
            {"name": "my.unset", "gauge": {"dataPoints": [{"asDouble": 1, "flags": 1,
              "timeUnixNano": "1544712660300000000"}]}}
          ]
        }]
      }]
    }"#;

    fn readings(out: &Converted) -> Vec<(String, TimestampMs, String)> {
        out.items
            .iter()
            .map(|(series, r)| {
                let fields: Vec<String> =
                    r.fields.iter().map(|(k, v)| format!("{}={v:?}", k.as_str())).collect();
                (series.key().to_owned(), r.ts, fields.join(" "))
            })
            .collect()
    }

    #[test]
    fn the_specification_example_becomes_readings() {
        let request = decode(EXAMPLE.as_bytes(), Encoding::Json).unwrap();
        let out = convert(request.clone(), 0, &InputLimits::default());
        assert!(out.rejected.is_empty(), "{:?}", out.rejected);
        assert_eq!(out.skipped, 1, "the point without a recorded value");
        let t = 1_544_712_660_300;
        let resource = "host.cores=8,service.name=my.service";
        let counter =
            "my.counter,host.cores=8,my.counter.attr=some\\ value,service.name=my.service";
        assert_eq!(
            readings(&out),
            [
                (counter.into(), t, "value=Float(5.0)".into()),
                ("my.gauge,host.cores=8,service.name=overridden".into(), t, "value=Int(10)".into()),
                (
                    format!("my.histogram,{resource}"),
                    t,
                    "count=Int(3) sum=Float(2.5) min=Float(0.0) max=Float(2.0) le_1=Int(1) le_2.5=Int(2) le_+Inf=Int(3)".into()
                ),
                (format!("my.summary,{resource}"), t + 1, "count=Int(4) sum=Float(10.0) quantile_0.5=Float(2.0)".into()),
            ]
        );
        // The same request in protobuf reads the same.
        let protobuf = decode(&request.encode_to_vec(), Encoding::Protobuf).unwrap();
        assert_eq!(readings(&convert(protobuf, 0, &InputLimits::default())), readings(&out));
    }

    #[test]
    fn bad_points_are_refused_alone_and_bodies_that_are_not_otlp_at_all() {
        let json = r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [
            {"name": "", "gauge": {"dataPoints": [{"asDouble": 1, "timeUnixNano": "1"}]}},
            {"name": "nan", "gauge": {"dataPoints": [{"asDouble": 1, "timeUnixNano": "1"}]}},
            {"name": "none", "gauge": {"dataPoints": [{"timeUnixNano": "1"}]}},
            {"name": "now", "gauge": {"dataPoints": [{"asDouble": 2}]}}
        ]}]}]}"#;
        let mut request = decode(json.as_bytes(), Encoding::Json).unwrap();
        // NaN is set in the message: the JSON decoder reads "NaN" as no value, and a point
        // without one is refused as a point without fields.
        let metric = &mut request.resource_metrics[0].scope_metrics[0].metrics[1];
        let Some(Data::Gauge(gauge)) = &mut metric.data else { panic!() };
        gauge.data_points[0].value = Some(number_data_point::Value::AsDouble(f64::NAN));
        let out = convert(request, 77, &InputLimits::default());
        let reasons: Vec<(&str, &str)> =
            out.rejected.iter().map(|r| (r.metric.as_str(), r.error.reason())).collect();
        assert_eq!(reasons, [("", "sensor"), ("nan", "value"), ("none", "fields")]);
        assert_eq!(readings(&out), [("now".into(), 77, "value=Float(2.0)".into())]);
        assert!(matches!(
            decode(b"{\"resourceMetrics\": 3}", Encoding::Json),
            Err(OtlpError::Json(_))
        ));
        assert!(matches!(decode(&[0xff; 8], Encoding::Protobuf), Err(OtlpError::Protobuf(_))));
    }
}
