//! A database as its series' stored keys see it: its name, the prefix that qualifies them, and
//! the key range they fill.

use std::sync::Arc;

/// The database of a write or a query that names none.
pub const DEFAULT: &str = "bucketd";

/// Longest database name, in bytes.
pub const MAX_NAME: usize = 64;

/// What starts and ends the name in a qualified key.
pub const MARK: char = '\u{1f}';

/// One database: its name, and the prefix of its series' stored keys (empty for the default).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Database {
    name: Arc<str>,
    prefix: Arc<str>,
}

impl Default for Database {
    fn default() -> Database {
        Database { name: DEFAULT.into(), prefix: "".into() }
    }
}

/// Why a name cannot be a database's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid database name {0:?}: use 1 to {MAX_NAME} bytes without control characters, \
     '/' or '\\'"
)]
pub struct BadName(pub String);

impl Database {
    /// The database called `name`; [`DEFAULT`] is the default database.
    pub fn named(name: &str) -> Result<Database, BadName> {
        if name == DEFAULT {
            return Ok(Database::default());
        }
        let ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && !name.chars().any(|c| c.is_control() || c == '/' || c == '\\');
        if !ok {
            return Err(BadName(name.chars().take(MAX_NAME + 8).collect()));
        }
        Ok(Database { name: name.into(), prefix: format!("{MARK}{name}{MARK}").into() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_default(&self) -> bool {
        self.prefix.is_empty()
    }

    /// What this database's stored keys start with: empty for the default database.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The stored key of this database's series `key`.
    pub fn qualify(&self, key: &str) -> String {
        self.qualified(key).into_owned()
    }

    /// [`Database::qualify`], borrowing `key` when it is the stored key (the default
    /// database): what the ingest path uses, once per reading.
    pub fn qualified<'a>(&self, key: &'a str) -> std::borrow::Cow<'a, str> {
        if self.prefix.is_empty() {
            return std::borrow::Cow::Borrowed(key);
        }
        let mut out = String::with_capacity(self.prefix.len() + key.len());
        out.push_str(&self.prefix);
        out.push_str(key);
        std::borrow::Cow::Owned(out)
    }

    /// Whether the stored key `stored` is one of this database's series.
    pub fn holds(&self, stored: &str) -> bool {
        if self.is_default() { !is_qualified(stored) } else { stored.starts_with(&*self.prefix) }
    }

    /// The series key a client knows of this database's stored key `stored`.
    pub fn local<'a>(&self, stored: &'a str) -> &'a str {
        stored.strip_prefix(&*self.prefix).unwrap_or(stored)
    }

    /// The stored keys of a database other than the default: every key `k` with
    /// `lower <= k < upper`. `None` for the default database, whose keys are all those
    /// without a prefix.
    pub fn key_range(&self) -> Option<(String, String)> {
        if self.is_default() {
            return None;
        }
        let mut upper = self.prefix.to_string();
        upper.pop();
        upper.push(char::from_u32(MARK as u32 + 1).expect("a character follows the mark"));
        Some((self.prefix.to_string(), upper))
    }
}

/// A retention as Go prints a duration, as InfluxDB shows and words it: `168h0m0s`, and `0s`
/// for forever.
pub fn go_duration(keep: Option<std::time::Duration>) -> String {
    match keep.map(|d| d.as_secs()) {
        None | Some(0) => "0s".into(),
        Some(s) => format!("{}h{}m{}s", s / 3600, s / 60 % 60, s % 60),
    }
}

/// Whether `key` carries a database prefix: a client's series key never may.
pub fn is_qualified(key: &str) -> bool {
    key.starts_with(MARK)
}

/// The name of the database a stored key belongs to, and its series key.
pub fn split(stored: &str) -> (&str, &str) {
    match stored.strip_prefix(MARK).and_then(|rest| rest.split_once(MARK)) {
        Some((name, key)) => (name, key),
        None => (DEFAULT, stored),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_two_databases_never_meet() {
        let (def, t, s) = (
            Database::default(),
            Database::named("telegraf").unwrap(),
            Database::named("sensors").unwrap(),
        );
        assert_eq!(Database::named(DEFAULT).unwrap(), def);
        let key = "cpu,host=a";
        assert_eq!(def.qualify(key), key);
        let (kt, ks) = (t.qualify(key), s.qualify(key));
        assert_ne!(kt, ks);
        for (db, stored) in [(&def, key), (&t, kt.as_str()), (&s, ks.as_str())] {
            assert_eq!(db.local(stored), key);
            assert_eq!(split(stored), (db.name(), key));
            for other in [&def, &t, &s] {
                assert_eq!(other.holds(stored), other == db, "{other:?} holds {stored:?}");
            }
            if let Some((lower, upper)) = db.key_range() {
                assert!(lower.as_str() <= stored && stored < upper.as_str());
            }
        }
        // A database whose name extends another's holds none of its keys.
        let longer = Database::named("telegraf2").unwrap();
        assert!(!longer.holds(&kt) && !t.holds(&longer.qualify(key)));
        let (lower, upper) = t.key_range().unwrap();
        let k2 = longer.qualify(key);
        assert!(!(lower.as_str() <= k2.as_str() && k2.as_str() < upper.as_str()));
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", "a\u{1f}b", "a/b", "a\\b", "a\nb", &"x".repeat(MAX_NAME + 1)] {
            assert!(Database::named(bad).is_err(), "{bad:?}");
        }
        for good in ["telegraf", "my db", "_internal", "ünïcode", &"x".repeat(MAX_NAME)] {
            assert_eq!(Database::named(good).unwrap().name(), good);
        }
    }
}
