//! What an MQTT message's payload and topic become: line protocol, bucketd's JSON readings, or
//! one plain number named by its topic through a template.

use crate::ingest::validate::InputLimits;
use crate::ingest::{json, line_protocol, point};
use crate::model::{FieldName, FieldValue, Item, Reading, TimestampMs};

/// How payloads are read (`--mqtt-payload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PayloadFormat {
    /// JSON when it starts with `{` or `[`, a number when it is one, else line protocol.
    Auto,
    /// InfluxDB line protocol, nanosecond timestamps.
    Line,
    /// bucketd's JSON readings: one object or an array.
    Json,
    /// One number, named by the topic through `--mqtt-topic-template`.
    Number,
}

/// Names a plain number from its topic (`--mqtt-topic-template`): `/`-separated levels, each
/// literal text the topic's level must equal, `+` for any level, or `{name}`, which makes the
/// level a tag called `name`. `{measurement}` and `{field}` name those instead; without them,
/// the measurement is `mqtt` and the field `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicTemplate {
    levels: Vec<Level>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Level {
    Literal(String),
    Any,
    Measurement,
    Field,
    Tag(String),
}

impl std::str::FromStr for TopicTemplate {
    type Err = String;

    fn from_str(template: &str) -> Result<TopicTemplate, String> {
        let mut levels = Vec::new();
        let (mut measurement, mut field) = (false, false);
        for level in template.split('/') {
            let level = match level.strip_prefix('{').and_then(|l| l.strip_suffix('}')) {
                Some("measurement") if !measurement => {
                    measurement = true;
                    Level::Measurement
                }
                Some("field") if !field => {
                    field = true;
                    Level::Field
                }
                Some("measurement" | "field") => {
                    return Err(format!("{level} appears twice in {template:?}"));
                }
                Some("") => return Err(format!("an empty {{}} in {template:?}")),
                Some(tag) => Level::Tag(tag.to_owned()),
                None if level == "+" => Level::Any,
                None if level.contains(['{', '}', '#', '+']) => {
                    return Err(format!(
                        "level {level:?} of {template:?}: use literal text, + or {{name}}"
                    ));
                }
                None => Level::Literal(level.to_owned()),
            };
            levels.push(level);
        }
        Ok(TopicTemplate { levels })
    }
}

/// Why a message was not stored; `reason` is the metric label.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct BadMessage {
    pub message: String,
    pub reason: &'static str,
}

impl BadMessage {
    fn new(message: impl Into<String>, reason: &'static str) -> BadMessage {
        BadMessage { message: message.into(), reason }
    }
}

/// What one message became: its readings, and what of it was refused.
#[derive(Debug, Default)]
pub struct Decoded {
    pub items: Vec<Item>,
    pub bad: Vec<BadMessage>,
}

/// The readings of the message `payload` published on `topic`.
pub fn decode(
    topic: &str,
    payload: &[u8],
    format: PayloadFormat,
    template: Option<&TopicTemplate>,
    now: TimestampMs,
    limits: &InputLimits,
) -> Decoded {
    let format = match format {
        PayloadFormat::Auto => match payload.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{' | b'[') => PayloadFormat::Json,
            _ if number(payload).is_some() => PayloadFormat::Number,
            _ => PayloadFormat::Line,
        },
        format => format,
    };
    let mut out = Decoded::default();
    match format {
        PayloadFormat::Line => {
            let (items, bad) = line_protocol::parse_body_split(
                payload,
                line_protocol::Precision::Nanoseconds,
                now,
                limits,
            );
            out.items = items;
            out.bad = bad.into_iter().map(|e| BadMessage::new(e.to_string(), e.reason)).collect();
        }
        PayloadFormat::Json => {
            for item in json::parse_document(payload, now, limits) {
                match item {
                    Ok(item) => out.items.push(item),
                    Err(e) => out.bad.push(BadMessage::new(e.to_string(), e.reason)),
                }
            }
        }
        PayloadFormat::Number => match plain_number(topic, payload, template, now, limits) {
            Ok(item) => out.items.push(item),
            Err(e) => out.bad.push(e),
        },
        PayloadFormat::Auto => unreachable!("auto was resolved above"),
    }
    out
}

/// The payload as a number, if it is one (`21.5`, `-3`, `1e3`, surrounding spaces allowed).
fn number(payload: &[u8]) -> Option<f64> {
    std::str::from_utf8(payload).ok()?.trim().parse::<f64>().ok()
}

fn plain_number(
    topic: &str,
    payload: &[u8],
    template: Option<&TopicTemplate>,
    now: TimestampMs,
    limits: &InputLimits,
) -> Result<Item, BadMessage> {
    let value = number(payload).ok_or_else(|| {
        let shown = String::from_utf8_lossy(&payload[..payload.len().min(64)]).into_owned();
        BadMessage::new(format!("payload {shown:?} is not a number"), "syntax")
    })?;
    let template = template.ok_or_else(|| {
        BadMessage::new(
            "a plain number needs --mqtt-topic-template to name its measurement and field",
            "syntax",
        )
    })?;
    let (mut measurement, mut field, mut tags) = ("mqtt", "value", Vec::new());
    let levels: Vec<&str> = topic.split('/').collect();
    if levels.len() != template.levels.len() {
        return Err(BadMessage::new(
            format!(
                "topic {topic:?} has {} levels, the template {}",
                levels.len(),
                template.levels.len()
            ),
            "syntax",
        ));
    }
    for (level, part) in template.levels.iter().zip(levels) {
        match level {
            Level::Literal(text) if text != part => {
                return Err(BadMessage::new(
                    format!(
                        "topic {topic:?} does not match the template: {part:?} is not {text:?}"
                    ),
                    "syntax",
                ));
            }
            Level::Literal(_) | Level::Any => {}
            Level::Measurement => measurement = part,
            Level::Field => field = part,
            Level::Tag(name) => tags.push((name.clone(), part.to_owned())),
        }
    }
    let invalid =
        |e: crate::ingest::validate::InvalidReading| BadMessage::new(e.to_string(), e.reason());
    let series = point::series(measurement, tags, limits).map_err(invalid)?;
    let fields = [(FieldName::from(field), FieldValue::Float(value))].into_iter().collect();
    let reading = point::reading(Reading { ts: now, fields }, limits).map_err(invalid)?;
    Ok((series, reading))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: TimestampMs = 1_700_000_000_000;

    fn keys(d: &Decoded) -> Vec<(String, TimestampMs, String)> {
        d.items
            .iter()
            .map(|(s, r)| {
                let fields: Vec<String> =
                    r.fields.iter().map(|(k, v)| format!("{}={v:?}", k.as_str())).collect();
                (s.key().to_owned(), r.ts, fields.join(" "))
            })
            .collect()
    }

    fn run(topic: &str, payload: &str, format: PayloadFormat, template: Option<&str>) -> Decoded {
        let template = template.map(|t| t.parse::<TopicTemplate>().unwrap());
        decode(topic, payload.as_bytes(), format, template.as_ref(), NOW, &InputLimits::default())
    }

    #[test]
    fn auto_tells_the_three_payloads_apart() {
        let t = Some("{site}/{room}/{field}");
        let line = run("any", "env,room=k temp=21.5 1700000000000000000\n", PayloadFormat::Auto, t);
        assert_eq!(keys(&line), [("env,room=k".into(), NOW, "temp=Float(21.5)".into())]);
        let json = run("any", r#"{"sensor": "boiler", "value": 71.2}"#, PayloadFormat::Auto, t);
        assert_eq!(keys(&json), [("boiler".into(), NOW, "value=Float(71.2)".into())]);
        let number = run("home/kitchen/temperature", " 21.5\n", PayloadFormat::Auto, t);
        assert_eq!(
            keys(&number),
            [("mqtt,room=kitchen,site=home".into(), NOW, "temperature=Float(21.5)".into())]
        );
    }

    #[test]
    fn a_template_names_measurement_tags_and_field() {
        let t = Some("plant/{measurement}/+/{pump}");
        let d = run("plant/flow/ignored/p1", "3", PayloadFormat::Number, t);
        assert_eq!(keys(&d), [("flow,pump=p1".into(), NOW, "value=Float(3.0)".into())]);
        for (topic, payload) in
            [("plant/flow/x", "3"), ("other/flow/x/p1", "3"), ("plant/flow/x/p1", "warm")]
        {
            let d = run(topic, payload, PayloadFormat::Number, t);
            assert!(d.items.is_empty() && d.bad.len() == 1, "{topic} {payload}: {d:?}");
        }
        assert!(
            run("a/b", "1", PayloadFormat::Number, None).bad[0]
                .message
                .contains("--mqtt-topic-template")
        );
        for bad in ["a/{field}/{field}", "a/#", "a/{}", "a/b{c}"] {
            assert!(bad.parse::<TopicTemplate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_lines_are_refused_alone() {
        let d = run("t", "m v=1 1\nnot line protocol\nm v=2 2\n", PayloadFormat::Line, None);
        assert_eq!(d.items.len(), 2);
        assert_eq!(d.bad.len(), 1);
        assert_eq!(d.bad[0].reason, "syntax");
    }
}
