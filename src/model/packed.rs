//! A push's readings packed while they wait in the buffers' stage: per reading its series, its
//! timestamp and one word of value bits per field, the fields' names and kinds once per shape
//! (a sensor sends the same fields of the same types every time, and a body's sensors mostly
//! the same fields). By the layout below, a two-field reading takes 48 bytes on a 64-bit target
//! (series 16, timestamp 8, slot 8, a word per field), half of an [`Item`]'s `size_of` (96
//! with Rust 1.95), whose vector for a 5,000-line body is one allocation of nearly half a MiB:
//! the stage holds tens of thousands of readings between merges, and what it holds is memory
//! the buffers cannot use.
//! The merge appends each reading to its buffer's [`Rows`] from the slots as they are.

use super::batch::Item;
use super::reading::Reading;
use super::rows::Rows;
use super::rows::{kind_of, slot_of, string_bytes};
use super::seq::Seq;
use super::series::Series;
use super::time::TimestampMs;
use super::value::{FieldName, FieldValue};

/// The names and kinds of a reading's fields, in the order sent.
#[derive(Debug, PartialEq)]
struct Shape {
    names: smallvec::SmallVec<[FieldName; 3]>,
    kinds: smallvec::SmallVec<[u8; 4]>,
}

/// How many of the latest shapes a reading's fields are compared with before they make a new
/// one. A shape repeated beyond them costs only its own few bytes again.
const RECENT_SHAPES: usize = 8;

/// Readings in the order pushed; see the module doc.
#[derive(Debug, Default)]
pub struct Packed {
    series: Vec<Series>,
    ts: Vec<TimestampMs>,
    /// Per reading: its shape's index in `shapes`, and where its words start in `words`.
    slots: Vec<(u32, u32)>,
    shapes: Vec<Shape>,
    words: Vec<u64>,
    /// String values, by the index in their word; each is moved out once, by the merge.
    strs: Vec<String>,
}

impl Packed {
    pub fn new(items: Vec<Item>) -> Packed {
        let n = items.len();
        let mut packed = Packed {
            series: Vec::with_capacity(n),
            ts: Vec::with_capacity(n),
            slots: Vec::with_capacity(n),
            shapes: Vec::new(),
            words: Vec::with_capacity(2 * n),
            strs: Vec::new(),
        };
        for (series, reading) in items {
            let shape = packed.shape_of(&reading.fields);
            let at = u32::try_from(packed.words.len()).expect("a push holds under 4 Gi fields");
            for (_, value) in reading.fields {
                packed.words.push(slot_of(value, &mut packed.strs));
            }
            packed.series.push(series);
            packed.ts.push(reading.ts);
            packed.slots.push((shape, at));
        }
        packed
    }

    /// The index of the shape of `fields`, added when none of the latest is it.
    fn shape_of(&mut self, fields: &[(FieldName, FieldValue)]) -> u32 {
        let is = |shape: &Shape| {
            shape.names.len() == fields.len()
                && shape.names.iter().zip(&shape.kinds).zip(fields).all(|((name, &kind), f)| {
                    // Interned names: a pointer compare.
                    *name == f.0 && kind == kind_of(&f.1)
                })
        };
        let recent = self.shapes.len().saturating_sub(RECENT_SHAPES);
        if let Some(found) = (recent..self.shapes.len()).rev().find(|&i| is(&self.shapes[i])) {
            return found as u32;
        }
        self.shapes.push(Shape {
            names: fields.iter().map(|(name, _)| name.clone()).collect(),
            kinds: fields.iter().map(|(_, value)| kind_of(value)).collect(),
        });
        u32::try_from(self.shapes.len() - 1).expect("a push holds under 4 Gi shapes")
    }

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub fn series(&self, i: usize) -> &Series {
        &self.series[i]
    }

    pub fn ts(&self, i: usize) -> TimestampMs {
        self.ts[i]
    }

    /// Appends reading `i` to `rows` as number `seq`, moving its strings out: each reading is
    /// appended once. Returns the bytes the strings moved bring to the rows' heap
    /// ([`Rows::heap_bytes`]).
    pub fn append_to(&mut self, i: usize, rows: &mut Rows, seq: Seq) -> usize {
        let (shape, at) = self.slots[i];
        let shape = &self.shapes[shape as usize];
        let bits = &self.words[at as usize..at as usize + shape.names.len()];
        let strs = &mut self.strs;
        let mut moved = 0;
        rows.push_slots(self.ts[i], seq, &shape.names, &shape.kinds, bits, |s| {
            let s = std::mem::take(&mut strs[s as usize]);
            moved += string_bytes(&s);
            s
        });
        moved
    }

    /// What the buffers' memory budget reserves for these readings before they are merged:
    /// about what their rows will hold (a word for the head, one per field, the strings),
    /// which the merge then replaces by what the rows really grew by.
    pub fn estimated_bytes(&self) -> usize {
        let strs: usize = self.strs.iter().map(string_bytes).sum();
        (self.ts.len() + self.words.len()) * size_of::<u64>() + strs
    }

    /// [`Packed::estimated_bytes`] of one reading not yet packed (the log's refill reserves
    /// room reading by reading).
    pub fn estimated_bytes_of(reading: &Reading) -> usize {
        let strs: usize = reading
            .fields
            .iter()
            .map(|(_, v)| if let FieldValue::Str(s) = v { string_bytes(s) } else { 0 })
            .sum();
        (1 + reading.fields.len()) * size_of::<u64>() + strs
    }

    /// Whether reading `i` has a string value (tests).
    #[cfg(test)]
    fn has_str(&self, i: usize) -> bool {
        self.shapes[self.slots[i].0 as usize].kinds.contains(&super::rows::STR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rows::tests::sorted;
    use crate::model::{Reading, SeriesMeta};

    fn series(key: &str) -> Series {
        Series::shared(SeriesMeta::untagged(key, key))
    }

    fn reading(ts: TimestampMs, fields: &[(&str, FieldValue)]) -> Reading {
        Reading {
            ts,
            fields: fields.iter().map(|(n, v)| (FieldName::interned(n), v.clone())).collect(),
        }
    }

    #[test]
    fn readings_come_back_as_pushed_and_shapes_are_shared() {
        let (a, b) = (series("a"), series("b"));
        let readings = vec![
            (a.clone(), reading(1, &[("t", FieldValue::Float(1.5)), ("h", FieldValue::Int(-3))])),
            (b.clone(), reading(2, &[("t", FieldValue::Float(2.5)), ("h", FieldValue::Int(4))])),
            // Another type for one field is another shape; so is another order.
            (
                a.clone(),
                reading(3, &[("t", FieldValue::Str("x".into())), ("h", FieldValue::Int(5))]),
            ),
            (a.clone(), reading(4, &[("h", FieldValue::UInt(6)), ("t", FieldValue::Bool(true))])),
            (b.clone(), reading(5, &[])),
        ];
        let mut packed = Packed::new(readings.clone());
        assert_eq!(packed.len(), 5);
        assert_eq!(packed.shapes.len(), 4, "the first two readings share a shape");
        assert!(packed.has_str(2) && !packed.has_str(0));
        let mut rows = Rows::default();
        let mut direct = Rows::default();
        for (i, (s, r)) in readings.into_iter().enumerate() {
            assert!(Series::ptr_eq(packed.series(i), &s));
            assert_eq!(packed.ts(i), r.ts);
            packed.append_to(i, &mut rows, 10 + i as Seq);
            direct.push(r, 10 + i as Seq);
        }
        assert_eq!(rows, direct);
        assert_eq!(rows.seqs().collect::<Vec<_>>(), vec![10, 11, 12, 13, 14]);
    }

    proptest::proptest! {
        /// Whatever the readings (fields coming and going, changing type and order, strings,
        /// equal timestamps), three sensors' buffers filled from a packed push hold exactly
        /// the readings pushed, each with its number.
        #[test]
        fn packed_readings_land_as_pushed(readings in crate::model::rows::tests::readings()) {
            let sensors = [series("a"), series("b"), series("c")];
            let items: Vec<Item> = readings
                .iter()
                .enumerate()
                .map(|(i, r)| (sensors[i % 3].clone(), r.clone()))
                .collect();
            let mut packed = Packed::new(items);
            let mut rows: [Rows; 3] = Default::default();
            for i in 0..packed.len() {
                packed.append_to(i, &mut rows[i % 3], 100 + i as Seq);
            }
            for (s, rows) in rows.iter().enumerate() {
                let want: Vec<_> = readings.iter().skip(s).step_by(3).map(sorted).collect();
                let got: Vec<_> = rows.readings().map(|r| sorted(&r)).collect();
                proptest::prop_assert_eq!(got, want);
                let seqs: Vec<Seq> = (s..readings.len()).step_by(3).map(|i| 100 + i as Seq).collect();
                proptest::prop_assert_eq!(rows.seqs().collect::<Vec<_>>(), seqs);
            }
        }
    }

    #[test]
    fn a_shape_older_than_the_recent_ones_is_made_again() {
        let s = series("a");
        let mut items: Vec<Item> = (0..RECENT_SHAPES as i64 + 1)
            .map(|i| (s.clone(), reading(i, &[(&format!("f{i}"), FieldValue::Int(i))])))
            .collect();
        items.push((s.clone(), reading(99, &[("f0", FieldValue::Int(7))])));
        items.push((s.clone(), reading(100, &[("f0", FieldValue::Int(8))])));
        let packed = Packed::new(items);
        assert_eq!(packed.shapes.len(), RECENT_SHAPES + 2);
        assert_eq!(packed.slots[RECENT_SHAPES + 1].0, packed.slots[RECENT_SHAPES + 2].0);
    }
}
