//! Which databases exist: the default one always, and those `CREATE DATABASE` made, kept in a
//! JSON file in the data directory (`databases.json`) so that they outlive a restart.
//!
//! Writes and queries name a database that must exist, as InfluxDB 1.x has it: a client that
//! mistypes a name gets an error instead of a database of its own. Full-policy: at
//! [`MAX_DATABASES`] a `CREATE DATABASE` of a new name is refused.
//!
//! A database keeps readings as long as the server does (`--retention`), or less when it was
//! created with a shorter `DURATION` and the store can delete one database's readings alone
//! (MongoDB only with `--retention`, which writes the hour statistics those deletions keep).
//! Never longer, so that everything that bounds the server's data by `--retention`
//! (MongoDB's TTL index, the log's replay) bounds every database's too. Hour statistics follow
//! `--rollup-retention` in every database.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::database::{BadName, DEFAULT, Database};

/// Most databases, the default one included: each costs a line of `SHOW DATABASES` and a
/// registry entry, and many would mean a client making one per sensor.
pub const MAX_DATABASES: usize = 1_000;

const FORMAT_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    BadName(#[from] BadName),
    /// InfluxDB 1.x's words, which clients (Telegraf among them) look for.
    #[error("database not found: {0:?}")]
    NotFound(String),
    #[error("too many databases: the limit is {MAX_DATABASES}")]
    TooMany,
    /// A retention the server cannot keep, or one that differs from the database's own.
    #[error("{0}")]
    Retention(String),
    #[error("cannot read the database registry {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write the database registry {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("the database registry {} is not valid: {detail}", path.display())]
    Invalid { path: PathBuf, detail: String },
}

#[derive(Serialize, Deserialize)]
struct RegistryFile {
    version: u32,
    databases: Vec<Entry>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    name: String,
    created: DateTime<Utc>,
    /// Its own retention of readings, shorter than the server's; absent: the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retention_ms: Option<u64>,
}

/// A created database.
#[derive(Clone)]
struct Created {
    db: Database,
    at: DateTime<Utc>,
    retention: Option<Duration>,
}

/// The shortest retention a database may have: InfluxDB's shortest.
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);

/// What a database's own retention may be on this server.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetentionBounds {
    /// The server's `--retention`: a database keeps readings at most this long.
    pub server: Option<Duration>,
    /// Whether the store can delete one database's readings alone (`Store::can_expire_keys`).
    pub per_database: bool,
}

/// Kept in memory only, for a server without `--retention` whose store keeps nothing of a
/// database's own: for tests.
impl Default for Registry {
    fn default() -> Registry {
        Registry::in_memory(RetentionBounds::default())
    }
}

pub struct Registry {
    /// `None`: kept in memory only (tests).
    path: Option<PathBuf>,
    bounds: RetentionBounds,
    created: RwLock<BTreeMap<String, Created>>,
}

impl Registry {
    /// The registry kept at `path`, as the file there says (only the default database when
    /// there is no file yet).
    pub fn open(path: PathBuf, bounds: RetentionBounds) -> Result<Registry, RegistryError> {
        let mut created = BTreeMap::new();
        let bytes = crate::files::read_if_exists(&path)
            .map_err(|source| RegistryError::Read { path: path.clone(), source })?;
        if let Some(bytes) = bytes {
            let invalid = |detail: String| RegistryError::Invalid { path: path.clone(), detail };
            let file: RegistryFile =
                serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
            if file.version != FORMAT_VERSION {
                return Err(invalid(format!(
                    "version {} (this bucketd reads {FORMAT_VERSION})",
                    file.version
                )));
            }
            for e in file.databases {
                let db = Database::named(&e.name).map_err(|e| invalid(e.to_string()))?;
                let retention = e.retention_ms.map(Duration::from_millis);
                created.insert(e.name, Created { db, at: e.created, retention });
            }
        }
        Ok(Registry { path: Some(path), bounds, created: RwLock::new(created) })
    }

    /// A registry that writes no file.
    pub fn in_memory(bounds: RetentionBounds) -> Registry {
        Registry { path: None, bounds, created: RwLock::new(BTreeMap::new()) }
    }

    /// Whether a database may have a retention of its own here.
    pub fn allows_own_retentions(&self) -> bool {
        self.bounds.per_database
    }

    /// The database called `name`, if it exists; `None` (no name given) is the default one.
    pub fn get(&self, name: Option<&str>) -> Result<Database, RegistryError> {
        let name = match name {
            None | Some("") | Some(DEFAULT) => return Ok(Database::default()),
            Some(name) => name,
        };
        let created = self.created.read().unwrap_or_else(|e| e.into_inner());
        match created.get(name) {
            Some(c) => Ok(c.db.clone()),
            None => Err(RegistryError::NotFound(name.chars().take(200).collect())),
        }
    }

    /// Creates the database `name`, keeping readings `retention` (`Some(ZERO)`: forever, as
    /// `DURATION INF` says; `None`: as the server does). One that exists already is not an
    /// error, as in InfluxDB, unless `retention` names another than its own.
    pub fn create(
        &self,
        name: &str,
        retention: Option<Duration>,
    ) -> Result<Database, RegistryError> {
        let db = Database::named(name)?;
        let retention = self.own_retention(name, retention)?;
        let mut created = self.created.write().unwrap_or_else(|e| e.into_inner());
        let existing =
            if db.is_default() { Some(None) } else { created.get(name).map(|c| c.retention) };
        match existing {
            Some(kept) if retention.is_none() || retention == kept => return Ok(db),
            Some(_) => {
                return Err(RegistryError::Retention(
                    "retention policy conflicts with an existing policy".into(),
                ));
            }
            None => {}
        }
        if created.len() + 1 >= MAX_DATABASES {
            return Err(RegistryError::TooMany);
        }
        created.insert(name.to_owned(), Created { db: db.clone(), at: Utc::now(), retention });
        if let Err(e) = self.save(&created) {
            created.remove(name);
            return Err(e);
        }
        Ok(db)
    }

    /// The retention a database asked to keep `asked` has of its own: `None` for the server's.
    fn own_retention(
        &self,
        name: &str,
        asked: Option<Duration>,
    ) -> Result<Option<Duration>, RegistryError> {
        let Some(asked) = asked else { return Ok(None) };
        let longer = |what: String, server: Duration| {
            RegistryError::Retention(format!(
                "database {name:?} cannot keep readings {what}: a database keeps them at most as \
                 long as the server does (--retention {})",
                humantime::format_duration(server)
            ))
        };
        if asked.is_zero() {
            return match self.bounds.server {
                None => Ok(None),
                Some(server) => Err(longer("forever".into(), server)),
            };
        }
        if asked < MIN_RETENTION {
            return Err(RegistryError::Retention(format!(
                "retention policy duration must be at least {}",
                super::go_duration(Some(MIN_RETENTION))
            )));
        }
        if !self.bounds.per_database {
            return Err(RegistryError::Retention(format!(
                "database {name:?} cannot have a retention of its own on this store without \
                 --retention: MongoDB keeps the hour statistics of deleted readings only with it"
            )));
        }
        let Some(server) = self.bounds.server else { return Ok(Some(asked)) };
        match asked.cmp(&server) {
            std::cmp::Ordering::Equal => Ok(None),
            std::cmp::Ordering::Less => Ok(Some(asked)),
            std::cmp::Ordering::Greater => {
                Err(longer(format!("for {}", humantime::format_duration(asked)), server))
            }
        }
    }

    /// How long the database `name` keeps readings: its own retention, else the server's
    /// (`None`: forever).
    pub fn retention_of(&self, name: &str) -> Option<Duration> {
        let created = self.created.read().unwrap_or_else(|e| e.into_inner());
        created.get(name).and_then(|c| c.retention).or(self.bounds.server)
    }

    /// The databases with a retention of their own, shorter than the server's.
    pub fn own_retentions(&self) -> Vec<(Database, Duration)> {
        let created = self.created.read().unwrap_or_else(|e| e.into_inner());
        created.values().filter_map(|c| Some((c.db.clone(), c.retention?))).collect()
    }

    /// Every database's name: the default first, then the others by name.
    pub fn names(&self) -> Vec<String> {
        let created = self.created.read().unwrap_or_else(|e| e.into_inner());
        std::iter::once(DEFAULT.to_owned()).chain(created.keys().cloned()).collect()
    }

    fn save(&self, created: &BTreeMap<String, Created>) -> Result<(), RegistryError> {
        let Some(path) = &self.path else { return Ok(()) };
        let file = RegistryFile {
            version: FORMAT_VERSION,
            databases: created
                .iter()
                .map(|(name, c)| Entry {
                    name: name.clone(),
                    created: c.at,
                    retention_ms: c.retention.map(|d| d.as_millis() as u64),
                })
                .collect(),
        };
        let mut text = serde_json::to_vec_pretty(&file).expect("the registry serializes");
        text.push(b'\n');
        crate::files::replace(path, &text, false)
            .map_err(|source| RegistryError::Write { path: path.clone(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn bounds(server: Option<Duration>, per_database: bool) -> RetentionBounds {
        RetentionBounds { server, per_database }
    }

    #[test]
    fn created_databases_outlive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("databases.json");
        let r = Registry::open(path.clone(), bounds(Some(30 * DAY), true)).unwrap();
        assert_eq!(r.names(), [DEFAULT]);
        assert!(matches!(r.get(Some("telegraf")), Err(RegistryError::NotFound(_))));
        assert!(r.get(None).unwrap().is_default());
        assert!(r.get(Some(DEFAULT)).unwrap().is_default());
        let t = r.create("telegraf", None).unwrap();
        assert_eq!(r.create("telegraf", None).unwrap(), t, "creating again is no error");
        assert!(r.create(DEFAULT, None).unwrap().is_default());
        assert!(matches!(r.create("a/b", None), Err(RegistryError::BadName(_))));
        r.create("sensors", Some(7 * DAY)).unwrap();
        assert_eq!(r.names(), [DEFAULT, "sensors", "telegraf"]);
        drop(r);
        let again = Registry::open(path, bounds(Some(30 * DAY), true)).unwrap();
        assert_eq!(again.names(), [DEFAULT, "sensors", "telegraf"]);
        assert_eq!(again.get(Some("telegraf")).unwrap(), t);
        assert_eq!(again.retention_of("sensors"), Some(7 * DAY));
        assert_eq!(again.retention_of("telegraf"), Some(30 * DAY));
        let own: Vec<_> =
            again.own_retentions().into_iter().map(|(d, k)| (d.name().to_owned(), k)).collect();
        assert_eq!(own, [("sensors".to_owned(), 7 * DAY)]);
    }

    #[test]
    fn a_database_keeps_readings_at_most_as_long_as_the_server() {
        let r = Registry::in_memory(bounds(Some(30 * DAY), true));
        let refused = |name: &str, keep: Duration| match r.create(name, Some(keep)) {
            Err(RegistryError::Retention(why)) => why,
            other => panic!("{name}: {:?}", other.map(|d| d.name().to_owned())),
        };
        assert!(refused("a", Duration::ZERO).contains("forever"));
        assert!(refused("b", 31 * DAY).contains("--retention 30days"));
        assert!(refused("c", Duration::from_secs(60)).contains("at least 1h0m0s"));
        r.create("d", Some(30 * DAY)).unwrap();
        assert_eq!(
            r.own_retentions().len(),
            0,
            "the server's retention is no retention of its own"
        );
        r.create("e", Some(2 * DAY)).unwrap();
        r.create("e", None).unwrap();
        r.create("e", Some(2 * DAY)).unwrap();
        assert!(refused("e", 3 * DAY).contains("conflicts"));
        assert!(r.get(Some("a")).is_err(), "a refused database is not created");
        // A server that keeps everything: INF is what it does, and a database may keep less
        // where the store can delete its readings alone (not MongoDB without --retention).
        let forever = Registry::in_memory(bounds(None, true));
        forever.create("inf", Some(Duration::ZERO)).unwrap();
        assert_eq!(forever.retention_of("inf"), None);
        forever.create("week", Some(7 * DAY)).unwrap();
        assert_eq!(forever.retention_of("week"), Some(7 * DAY));
        let mongo = Registry::in_memory(bounds(None, false));
        mongo.create("inf", Some(Duration::ZERO)).unwrap();
        let e = mongo.create("week", Some(7 * DAY)).err().unwrap().to_string();
        assert!(e.contains("without --retention"), "{e}");
    }

    #[test]
    fn a_full_registry_refuses_new_names_only() {
        let r = Registry::in_memory(RetentionBounds::default());
        for i in 1..MAX_DATABASES {
            r.create(&format!("db{i}"), None).unwrap();
        }
        assert!(matches!(r.create("one_more", None), Err(RegistryError::TooMany)));
        r.create("db1", None).unwrap();
        assert_eq!(r.names().len(), MAX_DATABASES);
    }

    #[test]
    fn a_damaged_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("databases.json");
        std::fs::write(&path, b"{not json").unwrap();
        let e = Registry::open(path, RetentionBounds::default()).err().unwrap().to_string();
        assert!(e.contains("databases.json") && e.contains("not valid"), "{e}");
    }
}
