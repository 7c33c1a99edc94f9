//! The `SHOW` statements: the schema queries Grafana's editor and variables send, parsed;
//! the others recognised and named so that the executor can refuse them.

use super::super::ast::{KeyMatch, NameMatch, ParseError, Source, Statement};
use super::super::lex::Tok;
use super::Parser;

/// What may follow `SHOW`, as InfluxDB names it in its error.
pub(super) const EXPECT_SHOW: &str = "CONTINUOUS, DATABASES, DIAGNOSTICS, FIELD, GRANTS, MEASUREMENT, MEASUREMENTS, \
     QUERIES, RETENTION, SERIES, SHARD, SHARDS, STATS, SUBSCRIPTIONS, TAG, USERS";

impl Parser<'_> {
    pub(super) fn show(&mut self) -> Result<Statement, ParseError> {
        let t = self.next()?;
        let word = match &t.tok {
            Tok::Ident(w) => w.to_ascii_uppercase(),
            _ => return Err(self.unexpected(&t, EXPECT_SHOW)),
        };
        match word.as_str() {
            "DATABASES" => Ok(Statement::ShowDatabases),
            "RETENTION" => {
                self.expect_kw("POLICIES")?;
                Ok(Statement::ShowRetentionPolicies { database: self.on_database()? })
            }
            "MEASUREMENTS" => self.show_measurements(),
            "TAG" if self.eat_kw("KEYS")? => {
                let database = self.on_database()?;
                let from = self.show_from()?;
                let condition = self.where_clause()?;
                let (limit, offset) = self.show_limits()?;
                Ok(Statement::ShowTagKeys { database, from, condition, limit, offset })
            }
            "TAG" if self.eat_kw("VALUES")? => {
                if self.peek_kw("CARDINALITY")? || self.peek_kw("EXACT")? {
                    return self.unsupported("SHOW TAG VALUES");
                }
                self.show_tag_values()
            }
            "TAG" if self.eat_kw("KEY")? => self.unsupported("SHOW TAG KEY"),
            "TAG" => Err(self.unexpected_next("KEYS, VALUES, KEY")),
            "FIELD" if self.eat_kw("KEYS")? => {
                let database = self.on_database()?;
                let from = self.show_from()?;
                let (limit, offset) = self.show_limits()?;
                Ok(Statement::ShowFieldKeys { database, from, limit, offset })
            }
            "FIELD" if self.eat_kw("KEY")? => self.unsupported("SHOW FIELD KEY"),
            "FIELD" => Err(self.unexpected_next("KEYS, KEY")),
            "SERIES" if self.peek_kw("CARDINALITY")? || self.peek_kw("EXACT")? => {
                self.unsupported("SHOW SERIES")
            }
            "SERIES" => {
                let database = self.on_database()?;
                let from = self.show_from()?;
                let condition = self.where_clause()?;
                let (limit, offset) = self.show_limits()?;
                Ok(Statement::ShowSeries { database, from, condition, limit, offset })
            }
            "MEASUREMENT" => self.unsupported("SHOW MEASUREMENT"),
            "CONTINUOUS" => {
                self.expect_kw("QUERIES")?;
                self.unsupported("SHOW CONTINUOUS QUERIES")
            }
            "SHARD" => {
                self.expect_kw("GROUPS")?;
                self.unsupported("SHOW SHARD GROUPS")
            }
            "SHARDS" | "STATS" | "DIAGNOSTICS" | "SUBSCRIPTIONS" | "QUERIES" | "USERS"
            | "GRANTS" => self.unsupported(&format!("SHOW {word}")),
            _ => Err(self.unexpected(&t, EXPECT_SHOW)),
        }
    }

    /// A statement not answered: named by `what` and the `EXACT` / `CARDINALITY` that may follow.
    pub(super) fn unsupported(&mut self, what: &str) -> Result<Statement, ParseError> {
        let mut what = what.to_string();
        for word in ["EXACT", "CARDINALITY"] {
            if self.eat_kw(word)? {
                what.push(' ');
                what.push_str(word);
            }
        }
        self.skip_statement()?;
        Ok(Statement::Unsupported { what })
    }

    fn show_measurements(&mut self) -> Result<Statement, ParseError> {
        let database = self.on_database()?;
        let with = if self.eat_kw("WITH")? {
            self.expect_kw("MEASUREMENT")?;
            let op = self.next()?;
            Some(match op.tok {
                Tok::EqRegex => NameMatch::Regex(self.regex()?),
                Tok::Eq => match self.peek_regex()? {
                    Some(re) => NameMatch::Regex(re),
                    None => NameMatch::Eq(self.ident()?),
                },
                _ => return Err(self.unexpected(&op, "=, =~")),
            })
        } else {
            None
        };
        let condition = self.where_clause()?;
        let (limit, offset) = self.show_limits()?;
        Ok(Statement::ShowMeasurements { database, with, condition, limit, offset })
    }

    fn show_tag_values(&mut self) -> Result<Statement, ParseError> {
        let database = self.on_database()?;
        let from = self.show_from()?;
        self.expect_kw("WITH")?;
        self.expect_kw("KEY")?;
        let op = self.next()?;
        let key = match op.tok {
            Tok::Eq => KeyMatch::Eq(self.key_name()?),
            Tok::NotEq => KeyMatch::NotEq(self.key_name()?),
            Tok::EqRegex => KeyMatch::Regex(self.regex()?),
            Tok::NotEqRegex => KeyMatch::NotRegex(self.regex()?),
            Tok::Ident(w) if w.eq_ignore_ascii_case("IN") => {
                self.expect(&Tok::LParen, "(")?;
                let mut keys = vec![self.key_name()?];
                while self.eat(&Tok::Comma)? {
                    keys.push(self.key_name()?);
                }
                self.expect(&Tok::RParen, ")")?;
                KeyMatch::In(keys)
            }
            _ => return Err(self.unexpected(&op, "=, !=, =~, !~, IN")),
        };
        let condition = self.where_clause()?;
        let (limit, offset) = self.show_limits()?;
        Ok(Statement::ShowTagValues { database, from, key, condition, limit, offset })
    }

    /// A tag key after `WITH KEY`: a name, or (leniently) a single-quoted string.
    fn key_name(&mut self) -> Result<String, ParseError> {
        if let Tok::Str(s) = &self.peek()?.tok {
            let s = s.clone();
            self.next()?;
            return Ok(s);
        }
        self.ident()
    }

    fn on_database(&mut self) -> Result<Option<String>, ParseError> {
        if self.eat_kw("ON")? { Ok(Some(self.ident()?)) } else { Ok(None) }
    }

    pub(super) fn show_from(&mut self) -> Result<Vec<Source>, ParseError> {
        if self.eat_kw("FROM")? { self.sources() } else { Ok(Vec::new()) }
    }
}
