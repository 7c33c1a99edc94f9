//! One (sensor, hour) buffer's readings in columns: timestamps, sequence numbers, and per field
//! a kind and 64 value bits for each reading. A buffered reading so costs 16 bytes plus 9 per
//! field (a `Reading` in a vector costs about 120), which is what lets buffers wait for a
//! longer flush interval within the same memory.
//!
//! A field's column holds one slot per reading; readings that lack the field have an absent
//! slot, and a field may change its type from one reading to the next (the kind is per slot).
//! Readings come back with their fields in column order, the order in which the buffer first
//! met each name: a reading that sent its fields in another order returns them reordered, the
//! same names and values.

use crate::model::{FieldName, FieldValue, Fields, Reading, Seq, TimestampMs};

#[derive(Default)]
pub(super) struct Columns {
    ts: Vec<TimestampMs>,
    seqs: Vec<Seq>,
    fields: Vec<Column>,
}

struct Column {
    name: FieldName,
    /// One per reading: [`ABSENT`] or the kind of the value.
    kinds: Vec<u8>,
    /// One per reading: the value's bits; for a string, its index in `strs`.
    bits: Vec<u64>,
    strs: Vec<String>,
}

const ABSENT: u8 = 0;
const FLOAT: u8 = 1;
const INT: u8 = 2;
const UINT: u8 = 3;
const BOOL: u8 = 4;
const STR: u8 = 5;

impl Column {
    fn new(name: FieldName, absent_rows: usize) -> Column {
        Column {
            name,
            kinds: vec![ABSENT; absent_rows],
            bits: vec![0; absent_rows],
            strs: Vec::new(),
        }
    }

    fn push(&mut self, value: FieldValue) {
        let (kind, bits) = match value {
            FieldValue::Float(v) => (FLOAT, v.to_bits()),
            FieldValue::Int(v) => (INT, v as u64),
            FieldValue::UInt(v) => (UINT, v),
            FieldValue::Bool(v) => (BOOL, u64::from(v)),
            FieldValue::Str(s) => {
                self.strs.push(s);
                (STR, (self.strs.len() - 1) as u64)
            }
        };
        self.kinds.push(kind);
        self.bits.push(bits);
    }

    fn value(&self, row: usize) -> Option<FieldValue> {
        let bits = self.bits[row];
        Some(match self.kinds[row] {
            ABSENT => return None,
            FLOAT => FieldValue::Float(f64::from_bits(bits)),
            INT => FieldValue::Int(bits as i64),
            UINT => FieldValue::UInt(bits),
            BOOL => FieldValue::Bool(bits != 0),
            _ => FieldValue::Str(self.strs[bits as usize].clone()),
        })
    }
}

impl Columns {
    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub fn timestamps(&self) -> &[TimestampMs] {
        &self.ts
    }

    /// Appends one reading. A field named twice in one reading keeps its last value (ingest
    /// refuses such readings, so this only keeps the columns aligned).
    pub fn push(&mut self, reading: Reading, seq: Seq) {
        let row = self.ts.len();
        self.ts.push(reading.ts);
        self.seqs.push(seq);
        for (j, (name, value)) in reading.fields.into_iter().enumerate() {
            // Sensors send the same fields in the same order: the j-th field is column j.
            let c = match self.fields.get(j) {
                Some(col) if col.name == name => j,
                _ => match self.fields.iter().position(|col| col.name == name) {
                    Some(c) => c,
                    None => {
                        self.fields.push(Column::new(name, row));
                        self.fields.len() - 1
                    }
                },
            };
            let col = &mut self.fields[c];
            if col.kinds.len() > row {
                col.kinds.truncate(row);
                col.bits.truncate(row);
            }
            col.push(value);
        }
        for col in &mut self.fields {
            if col.kinds.len() == row {
                col.kinds.push(ABSENT);
                col.bits.push(0);
            }
        }
    }

    /// The reading in `row`, its fields in column order.
    pub fn reading(&self, row: usize) -> Reading {
        let fields: Fields = self
            .fields
            .iter()
            .filter_map(|col| col.value(row).map(|v| (col.name.clone(), v)))
            .collect();
        Reading { ts: self.ts[row], fields }
    }

    /// Every reading and its sequence number, in order.
    pub fn into_readings(self) -> (Vec<Reading>, Vec<Seq>) {
        let readings = (0..self.len()).map(|row| self.reading(row)).collect();
        (readings, self.seqs)
    }

    /// Moves the first `k` readings out, in order.
    pub fn split_front(&mut self, k: usize) -> Columns {
        let rest = (k..self.len()).fold(Columns::default(), |mut rest, row| {
            rest.push(self.reading(row), self.seqs[row]);
            rest
        });
        let mut front = std::mem::replace(self, rest);
        front.ts.truncate(k);
        front.seqs.truncate(k);
        for col in &mut front.fields {
            col.kinds.truncate(k);
            col.bits.truncate(k);
        }
        front.fields.retain(|col| col.kinds.iter().any(|&kind| kind != ABSENT));
        front
    }

    /// Puts `readings` (with their sequence numbers) before the ones held.
    pub fn prepend(&mut self, readings: &[Reading], seqs: &[Seq]) {
        debug_assert_eq!(readings.len(), seqs.len());
        let mut front = Columns::default();
        for (reading, &seq) in readings.iter().zip(seqs) {
            front.push(reading.clone(), seq);
        }
        for row in 0..self.len() {
            front.push(self.reading(row), self.seqs[row]);
        }
        *self = front;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            "[a-z]{0,4}".prop_map(FieldValue::Str),
        ]
    }

    /// Readings whose fields come and go, change type and order, from a few names.
    fn readings() -> impl Strategy<Value = Vec<Reading>> {
        let fields = proptest::collection::btree_map(0..4usize, value(), 1..4)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle();
        proptest::collection::vec((any::<i16>(), fields), 0..40).prop_map(|rows| {
            rows.into_iter()
                .map(|(ts, fields)| Reading {
                    ts: i64::from(ts),
                    fields: fields
                        .into_iter()
                        .map(|(name, value)| (FieldName::from(format!("f{name}")), value))
                        .collect(),
                })
                .collect()
        })
    }

    /// A reading's fields as a set: the order within a reading is not kept.
    fn sorted(r: &Reading) -> (TimestampMs, Vec<(String, FieldValue)>) {
        let mut fields: Vec<_> = r.fields.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        (r.ts, fields)
    }

    fn filled(readings: &[Reading]) -> Columns {
        let mut c = Columns::default();
        for (i, r) in readings.iter().enumerate() {
            c.push(r.clone(), i as Seq * 3);
        }
        c
    }

    proptest! {
        #[test]
        fn columns_give_back_what_was_pushed(readings in readings(), k in 0usize..40) {
            let c = filled(&readings);
            prop_assert_eq!(c.len(), readings.len());
            let (back, seqs) = filled(&readings).into_readings();
            prop_assert_eq!(
                back.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(seqs, (0..readings.len()).map(|i| i as Seq * 3).collect::<Vec<_>>());

            let k = k.min(readings.len());
            let mut rest = filled(&readings);
            let front = rest.split_front(k);
            let (f, fs) = front.into_readings();
            let mut joined = f.clone();
            joined.extend(rest.into_readings().0);
            prop_assert_eq!(
                joined.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(fs.len(), k);

            let mut tail = filled(&readings[k..]);
            let seqs: Vec<Seq> = (0..k).map(|i| i as Seq * 3).collect();
            tail.prepend(&readings[..k], &seqs);
            prop_assert_eq!(
                tail.into_readings().0.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn fields_in_the_usual_order_come_back_in_that_order() {
        let r = |ts, a: f64| Reading {
            ts,
            fields: smallvec::smallvec![
                ("temperature".into(), FieldValue::Float(a)),
                ("humidity".into(), FieldValue::Int(ts)),
            ],
        };
        let mut c = Columns::default();
        c.push(r(1, 1.5), 10);
        c.push(r(2, 2.5), 11);
        assert_eq!(c.reading(0), r(1, 1.5));
        assert_eq!(c.reading(1), r(2, 2.5));
    }
}
