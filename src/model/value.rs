//! Field values and field names: what a reading holds besides its time.

/// A field's value as ingest received it. Floats are always finite: NaN and infinities are
/// rejected at ingest because neither JSON nor MongoDB's `$min`/`$max` handle them sensibly.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum FieldValue {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Str(String),
}

impl FieldValue {
    /// The value as it enters min/max/sum statistics; only numbers have statistics.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            FieldValue::Float(v) => Some(v),
            FieldValue::Int(v) => Some(v as f64),
            FieldValue::UInt(v) => Some(v as f64),
            FieldValue::Bool(_) | FieldValue::Str(_) => None,
        }
    }
}

/// A field's value where it is held, its string borrowed: what a store encodes from, whether
/// the reading is a [`Reading`](super::Reading) or a row of a buffer's [`Rows`](super::Rows) (no reading is made for it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Str(&'a str),
}

impl ValueRef<'_> {
    /// As [`FieldValue::as_f64`].
    pub fn as_f64(self) -> Option<f64> {
        match self {
            ValueRef::Float(v) => Some(v),
            ValueRef::Int(v) => Some(v as f64),
            ValueRef::UInt(v) => Some(v as f64),
            ValueRef::Bool(_) | ValueRef::Str(_) => None,
        }
    }
}

impl FieldValue {
    pub fn as_ref(&self) -> ValueRef<'_> {
        match *self {
            FieldValue::Float(v) => ValueRef::Float(v),
            FieldValue::Int(v) => ValueRef::Int(v),
            FieldValue::UInt(v) => ValueRef::UInt(v),
            FieldValue::Bool(v) => ValueRef::Bool(v),
            FieldValue::Str(ref s) => ValueRef::Str(s),
        }
    }
}

impl From<ValueRef<'_>> for FieldValue {
    fn from(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Float(v) => FieldValue::Float(v),
            ValueRef::Int(v) => FieldValue::Int(v),
            ValueRef::UInt(v) => FieldValue::UInt(v),
            ValueRef::Bool(v) => FieldValue::Bool(v),
            ValueRef::Str(s) => FieldValue::Str(s.to_owned()),
        }
    }
}

/// A field's name. Shared because a series sends the same few names in every reading: a parser
/// allocates each name once per body (a chunk's decoder interns it) and every reading holds a
/// reference (one pointer) instead of its own copy. Serialized as a plain string.
///
/// An [`interned`](FieldName::interned) name is never freed, and its copies count no
/// references: a reading's names are copied by the parser, dropped by the merge into the
/// buffers, copied again for the store and dropped after the write, and with a shared counter
/// each of those was an atomic write to one cache line that every core contends for (the same
/// few names are in every reading).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct FieldName(arcstr::ArcStr);

impl FieldName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The process's one `FieldName` for `name`, while fewer than `INTERNED` names are known
    /// (beyond that, a fresh one). Equal names that are one allocation compare by pointer
    /// (`ArcStr`'s `PartialEq` checks identity first): the buffers compare every pushed field's
    /// name with their column's, and with names interned that compare reads neither string,
    /// one cache miss less per field of a reading pushed to a buffer not in cache.
    pub fn interned(name: &str) -> FieldName {
        /// Bounds the table: names are client-chosen. 64 Ki names of a few dozen bytes.
        const INTERNED: usize = 1 << 16;
        static NAMES: std::sync::LazyLock<
            std::sync::Mutex<std::collections::HashSet<FieldName, foldhash::fast::RandomState>>,
        > = std::sync::LazyLock::new(Default::default);
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = names.get(name) {
            return known.clone();
        }
        let new = FieldName::from(name);
        if names.len() < INTERNED {
            // Bounded with the table, which keeps its names for the life of the process anyway.
            new.0.leak();
            names.insert(new.clone());
        }
        new
    }
}

impl std::ops::Deref for FieldName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for FieldName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for FieldName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for FieldName {
    fn from(s: &str) -> Self {
        FieldName(s.into())
    }
}

impl From<String> for FieldName {
    fn from(s: String) -> Self {
        FieldName(s.into())
    }
}

impl PartialEq<str> for FieldName {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for FieldName {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

/// Hands out one shared [`FieldName`] per distinct name among the last few seen, so that a
/// parser or decoder allocates a name once per body or chunk rather than once per reading.
/// Bounded: it remembers the last `NAMES` names in a list it scans, and up to `MORE` older
/// ones in a set, emptied when full (a forgotten name is only looked up again).
#[derive(Default)]
pub struct FieldNames {
    recent: std::collections::VecDeque<FieldName>,
    /// Names pushed out of `recent`: readings of many fields (a scan of every name known made
    /// each of their fields cost a comparison with every other).
    more: std::collections::HashSet<FieldName, foldhash::fast::RandomState>,
}

impl FieldNames {
    /// Sensors rarely send more fields than this; beyond it a linear scan stops paying off.
    const NAMES: usize = 32;
    const MORE: usize = 4096;

    pub fn get(&mut self, name: &str) -> FieldName {
        if !self.more.is_empty()
            && let Some(found) = self.more.get(name)
        {
            return found.clone();
        }
        if let Some(found) = self.recent.iter().find(|n| n.as_str() == name) {
            return found.clone();
        }
        if self.recent.len() == Self::NAMES
            && let Some(old) = self.recent.pop_front()
        {
            if self.more.len() == Self::MORE {
                self.more.clear();
            }
            self.more.insert(old);
        }
        let new = FieldName::interned(name);
        self.recent.push_back(new.clone());
        new
    }
}

/// A reading's fields. Sensors mostly send one or two, which then live inside the `Reading`
/// (in the buffers' vectors) rather than in an allocation of their own.
pub type Fields = smallvec::SmallVec<[(FieldName, FieldValue); 2]>;

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn field_names_are_shared_and_bounded() {
        let mut names = FieldNames::default();
        let a = names.get("temp");
        assert!(
            arcstr::ArcStr::ptr_eq(&a.0, &names.get("temp").0),
            "a repeated name is the same object"
        );
        assert_eq!(a, "temp");
        for i in 0..FieldNames::NAMES {
            names.get(&format!("f{i}"));
        }
        assert_eq!(names.recent.len(), FieldNames::NAMES);
        assert!(!names.recent.iter().any(|n| n == "temp"), "the oldest name left the list");
        assert!(names.more.contains("temp"), "for the set of older names");
        assert!(arcstr::ArcStr::ptr_eq(&a.0, &names.get("temp").0), "where it is found");
        for i in 0..FieldNames::MORE + FieldNames::NAMES {
            names.get(&format!("g{i}"));
        }
        assert!(names.more.len() <= FieldNames::MORE && !names.more.contains("temp"), "bounded");
        assert!(
            arcstr::ArcStr::ptr_eq(&a.0, &names.get("temp").0),
            "a forgotten name is found again in the process's table: one object per name"
        );
        assert!(
            arcstr::ArcStr::is_static(&a.0),
            "an interned name counts no references: copying and dropping it writes nothing"
        );
        assert!(!arcstr::ArcStr::is_static(&FieldName::from("temp").0), "only interned ones");
    }
}
