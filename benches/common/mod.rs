//! The sensor data the MongoDB benches write, shared so that their numbers describe the same
//! documents: sensor `i` is `env,sensor=s<i>`, a reading holds a temperature and a humidity.

use bucketd::model::{FieldValue, Reading, Series, SeriesMeta};

pub fn series(i: usize) -> Series {
    let sensor = format!("s{i:05}");
    Series::shared(SeriesMeta::new(&format!("env,sensor={sensor}"), "env", &[("sensor", sensor)]))
}

pub fn reading(ts: i64, i: usize) -> Reading {
    Reading {
        ts,
        fields: smallvec::smallvec![
            ("temperature".into(), FieldValue::Float(15.0 + (i % 1500) as f64 / 100.0)),
            ("humidity".into(), FieldValue::Float(30.0 + (i % 600) as f64 / 10.0)),
        ],
    }
}
