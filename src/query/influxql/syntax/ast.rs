//! The InfluxQL statements bucketd answers, as the parser hands them to the executor.
//!
//! Names keep their case (InfluxDB identifiers are case-sensitive); keywords and function
//! names do not (function names are lowercased by the parser). Times and durations are
//! nanoseconds, as in InfluxQL; the executor converts to bucketd's milliseconds.

/// One `q` parameter: statements separated by `;`.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub statements: Vec<Statement>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Select(Box<Select>),
    ShowDatabases,
    /// `SHOW RETENTION POLICIES [ON db]`.
    ShowRetentionPolicies {
        database: Option<String>,
    },
    /// `SHOW MEASUREMENTS [ON db] [WITH MEASUREMENT = m | =~ /re/] [WHERE …] [LIMIT n] [OFFSET n]`.
    ShowMeasurements {
        database: Option<String>,
        with: Option<NameMatch>,
        condition: Option<Expr>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    /// `SHOW TAG KEYS [ON db] [FROM …] [WHERE …] [LIMIT n] [OFFSET n]`.
    ShowTagKeys {
        database: Option<String>,
        from: Vec<Source>,
        condition: Option<Expr>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    /// `SHOW TAG VALUES [ON db] [FROM …] WITH KEY = "k" | != "k" | =~ /re/ | !~ /re/ | IN ("a", "b")
    /// [WHERE …] [LIMIT n] [OFFSET n]`.
    ShowTagValues {
        database: Option<String>,
        from: Vec<Source>,
        key: KeyMatch,
        condition: Option<Expr>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    /// `SHOW FIELD KEYS [ON db] [FROM …] [LIMIT n] [OFFSET n]`.
    ShowFieldKeys {
        database: Option<String>,
        from: Vec<Source>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    /// `SHOW SERIES [ON db] [FROM …] [WHERE …] [LIMIT n] [OFFSET n]`.
    ShowSeries {
        database: Option<String>,
        from: Vec<Source>,
        condition: Option<Expr>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    /// `CREATE DATABASE name [WITH DURATION d|INF ...]` (Telegraf sends it at start-up):
    /// `duration_ns` is the retention given, 0 for `INF`, `None` when none is.
    CreateDatabase {
        name: String,
        duration_ns: Option<i64>,
    },
    /// A statement InfluxQL has that would change data or the schema (`DROP …`, `DELETE`,
    /// `ALTER …`, `CREATE` other than a database, `GRANT`, `REVOKE`, `SET PASSWORD`, `KILL QUERY`):
    /// recognised so that it is refused with a clear message. `what` names it, e.g. "DROP MEASUREMENT".
    Write {
        what: String,
    },
    /// A read-only statement InfluxQL has that bucketd does not answer (`SHOW USERS`,
    /// `SHOW CONTINUOUS QUERIES`, `EXPLAIN`, …). `what` names it, e.g. "SHOW USERS".
    Unsupported {
        what: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    /// The projection, in order: at least one field.
    pub fields: Vec<Field>,
    /// `INTO …`: parsed only to be refused (it writes).
    pub into: Option<String>,
    /// `FROM`: at least one source.
    pub from: Vec<Source>,
    pub condition: Option<Expr>,
    pub group_by: GroupBy,
    /// `fill(…)`; `Fill::Null` when absent, as in InfluxDB.
    pub fill: Fill,
    /// `ORDER BY time DESC`. (`ORDER BY time [ASC]` is the default; ordering by anything else
    /// is a parse error, as in InfluxDB.)
    pub descending: bool,
    pub limit: Option<u64>,
    pub offset: Option<u64>,
    pub slimit: Option<u64>,
    pub soffset: Option<u64>,
    /// `tz('Europe/Paris')`: the zone's name as written.
    pub tz: Option<String>,
}

/// One projected column: an expression and its `AS` alias.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub expr: Expr,
    pub alias: Option<String>,
}

/// A `FROM` source (or a `SHOW … FROM` source).
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// `m`, `"rp"."m"`, `"db"."rp"."m"`, `"db".."m"`.
    Measurement { database: Option<String>, retention_policy: Option<String>, name: String },
    /// `/re/` (optionally qualified like a name: `"db"."rp"./re/`).
    Regex { database: Option<String>, retention_policy: Option<String>, pattern: String },
    // Subqueries (`FROM (SELECT …)`) are not parsed: a parse error says so.
}

/// `WITH MEASUREMENT = m` or `=~ /re/`.
#[derive(Clone, Debug, PartialEq)]
pub enum NameMatch {
    Eq(String),
    Regex(String),
}

/// `WITH KEY …` of `SHOW TAG VALUES`.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyMatch {
    Eq(String),
    NotEq(String),
    Regex(String),
    NotRegex(String),
    In(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct GroupBy {
    /// `time(interval[, offset])`.
    pub time: Option<TimeGroup>,
    pub tags: Vec<Dimension>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeGroup {
    /// Nanoseconds, > 0.
    pub interval_ns: i64,
    /// Nanoseconds; may be negative (`time(1h, -15m)`).
    pub offset_ns: i64,
}

/// A `GROUP BY` dimension other than time.
#[derive(Clone, Debug, PartialEq)]
pub enum Dimension {
    Tag(String),
    Regex(String),
    /// `GROUP BY *`: every tag.
    Wildcard,
}

#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Fill {
    #[default]
    Null,
    None,
    Previous,
    Linear,
    Number(f64),
}

/// An expression: in the projection, in `WHERE`, or as a function's argument.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Integer(i64),
    Number(f64),
    String(String),
    Bool(bool),
    /// A duration literal such as `1h` or `-15m`, in nanoseconds.
    Duration(i64),
    /// A regex literal `/…/`, its pattern without the slashes (`\/` unescaped to `/`).
    Regex(String),
    /// A field, tag or `time` reference: `value`, `"value"`, `"value"::field`, `host::tag`.
    Ref {
        name: String,
        kind: Option<RefKind>,
    },
    /// `*` (or `*::field`, `*::tag`) in a projection or as an aggregate's argument.
    Wildcard {
        kind: Option<RefKind>,
    },
    /// A call: `mean("value")`, `percentile(value, 95)`, `now()`. `name` is lowercase.
    Call {
        name: String,
        args: Vec<Expr>,
    },
    /// `SELECT DISTINCT x` is parsed as `Call { name: "distinct", args: [Ref x] }`.
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// A parenthesised expression, kept so that printing it back keeps the parentheses.
    Paren(Box<Expr>),
}

/// The `::type` suffix of a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    Field,
    Tag,
    Float,
    Integer,
    String,
    Boolean,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    /// `=~`
    EqRegex,
    /// `!~`
    NotEqRegex,
    And,
    Or,
}

/// A parse error, positioned as InfluxDB positions them: 1-based line and character.
/// Displays as InfluxDB's message does, e.g.
/// `error parsing query: found FROM, expected identifier at line 1, char 8`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub message: String,
    pub line: usize,
    pub char: usize,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error parsing query: {} at line {}, char {}", self.message, self.line, self.char)
    }
}

impl std::error::Error for ParseError {}
