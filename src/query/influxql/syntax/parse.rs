//! InfluxQL text into the statement tree ([`super::ast`]), by recursive descent with one token of
//! lookahead. Errors are positioned at the offending token, worded as InfluxDB words them.

use super::ast::{
    BinaryOp, Dimension, Expr, Field, Fill, GroupBy, ParseError, Query, RefKind, Select, Source,
    Statement, TimeGroup,
};
use super::lex::{Lexer, Tok, Token, duration_ns, error_at};

/// Parentheses, calls and unary minuses nest the parser's recursion: bounded so that no input
/// can exhaust the stack.
const MAX_NESTING: usize = 100;
/// A chain of binary operators is parsed by a loop but makes a tree as deep as it is long, which
/// dropping and evaluating recurse through: bounded too.
const MAX_DEPTH: usize = 500;

const EXPECT_EXPR: &str = "identifier, string, number, bool";
const EXPECT_STATEMENT: &str =
    "SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL";

/// InfluxQL's reserved words: unquoted, they are never names.
const KEYWORDS: &[&str] = &[
    "all",
    "alter",
    "analyze",
    "and",
    "any",
    "as",
    "asc",
    "begin",
    "by",
    "cardinality",
    "continuous",
    "create",
    "database",
    "databases",
    "default",
    "delete",
    "desc",
    "destinations",
    "diagnostics",
    "distinct",
    "drop",
    "duration",
    "end",
    "every",
    "exact",
    "explain",
    "false",
    "field",
    "for",
    "from",
    "grant",
    "grants",
    "group",
    "groups",
    "in",
    "inf",
    "insert",
    "into",
    "key",
    "keys",
    "kill",
    "limit",
    "measurement",
    "measurements",
    "name",
    "offset",
    "on",
    "or",
    "order",
    "password",
    "policies",
    "policy",
    "privileges",
    "queries",
    "query",
    "read",
    "replication",
    "resample",
    "retention",
    "revoke",
    "select",
    "series",
    "set",
    "shard",
    "shards",
    "show",
    "slimit",
    "soffset",
    "stats",
    "subscription",
    "subscriptions",
    "tag",
    "to",
    "true",
    "user",
    "users",
    "values",
    "where",
    "with",
    "write",
];

fn is_keyword(word: &str) -> bool {
    KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// Parses one `q` parameter: one or more statements separated by `;`.
pub fn parse(q: &str) -> Result<Query, ParseError> {
    Parser { src: q, lex: Lexer::new(q), peeked: None, nesting: 0 }.query()
}

struct Parser<'a> {
    src: &'a str,
    lex: Lexer<'a>,
    peeked: Option<Token>,
    nesting: usize,
}

/// An expression and the depth of its tree.
struct Node {
    expr: Expr,
    depth: usize,
}

impl Node {
    fn leaf(expr: Expr) -> Self {
        Node { expr, depth: 1 }
    }
}

impl Parser<'_> {
    // --- tokens ---

    fn peek(&mut self) -> Result<&Token, ParseError> {
        let t = match self.peeked.take() {
            Some(t) => t,
            None => self.lex.next()?,
        };
        Ok(self.peeked.insert(t))
    }

    fn next(&mut self) -> Result<Token, ParseError> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lex.next(),
        }
    }

    fn peek_is(&mut self, tok: &Tok) -> Result<bool, ParseError> {
        Ok(&self.peek()?.tok == tok)
    }

    fn eat(&mut self, tok: &Tok) -> Result<bool, ParseError> {
        let hit = self.peek_is(tok)?;
        if hit {
            self.next()?;
        }
        Ok(hit)
    }

    fn expect(&mut self, tok: &Tok, expected: &str) -> Result<Token, ParseError> {
        let t = self.next()?;
        if &t.tok == tok { Ok(t) } else { Err(self.unexpected(&t, expected)) }
    }

    fn peek_kw(&mut self, kw: &str) -> Result<bool, ParseError> {
        Ok(matches!(&self.peek()?.tok, Tok::Ident(w) if w.eq_ignore_ascii_case(kw)))
    }

    fn eat_kw(&mut self, kw: &str) -> Result<bool, ParseError> {
        let hit = self.peek_kw(kw)?;
        if hit {
            self.next()?;
        }
        Ok(hit)
    }

    fn expect_kw(&mut self, kw: &str) -> Result<(), ParseError> {
        if self.eat_kw(kw)? {
            return Ok(());
        }
        let t = self.next()?;
        Err(self.unexpected(&t, kw))
    }

    /// The regex opening at the next token, if the next token is a `/`.
    fn peek_regex(&mut self) -> Result<Option<String>, ParseError> {
        let t = self.peek()?;
        if t.tok != Tok::Div {
            return Ok(None);
        }
        let open = t.start;
        self.peeked = None;
        Ok(Some(self.lex.regex(open)?.0))
    }

    fn regex(&mut self) -> Result<String, ParseError> {
        match self.peek_regex()? {
            Some(re) => Ok(re),
            None => Err(self.unexpected_next("regex")),
        }
    }

    /// A name: an unquoted identifier that is not a keyword, or a quoted one.
    fn ident(&mut self) -> Result<String, ParseError> {
        let t = self.next()?;
        match t.tok {
            Tok::Ident(name) if !is_keyword(&name) => Ok(name),
            Tok::QuotedIdent(name) => Ok(name),
            _ => Err(self.unexpected(&t, "identifier")),
        }
    }

    // --- errors ---

    fn err(&self, offset: usize, message: impl Into<String>) -> ParseError {
        error_at(self.src, offset, message)
    }

    /// How InfluxDB names a token in "found …": keywords upper-case, names and strings by
    /// their text, operators by their symbol.
    fn describe(&self, t: &Token) -> String {
        match &t.tok {
            Tok::Eof => "EOF".to_string(),
            Tok::Ident(w) if is_keyword(w) => w.to_ascii_uppercase(),
            Tok::Ident(s) | Tok::QuotedIdent(s) | Tok::Str(s) => s.clone(),
            _ => self.src[t.start..t.end].to_string(),
        }
    }

    fn unexpected(&self, t: &Token, expected: &str) -> ParseError {
        self.err(t.start, format!("found {}, expected {expected}", self.describe(t)))
    }

    fn unexpected_next(&mut self, expected: &str) -> ParseError {
        match self.next() {
            Ok(t) => self.unexpected(&t, expected),
            Err(e) => e,
        }
    }

    fn enter(&mut self, at: usize) -> Result<(), ParseError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.err(at, "expression nested too deeply"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    // --- statements ---

    fn query(mut self) -> Result<Query, ParseError> {
        let mut statements = Vec::new();
        loop {
            while self.eat(&Tok::Semicolon)? {}
            if self.peek_is(&Tok::Eof)? {
                break;
            }
            statements.push(self.statement()?);
            if !matches!(self.peek()?.tok, Tok::Semicolon | Tok::Eof) {
                return Err(self.unexpected_next(";"));
            }
        }
        if statements.is_empty() {
            return Err(self.unexpected_next(EXPECT_STATEMENT));
        }
        Ok(Query { statements })
    }

    fn statement(&mut self) -> Result<Statement, ParseError> {
        let t = self.next()?;
        let word = match &t.tok {
            Tok::Ident(w) => w.to_ascii_uppercase(),
            _ => return Err(self.unexpected(&t, EXPECT_STATEMENT)),
        };
        let write = match word.as_str() {
            "SELECT" => return Ok(Statement::Select(Box::new(self.select()?))),
            "SHOW" => return self.show(),
            "EXPLAIN" => {
                self.skip_statement()?;
                return Ok(Statement::Unsupported { what: "EXPLAIN".to_string() });
            }
            "CREATE" if self.eat_kw("DATABASE")? => {
                let name = self.ident()?;
                let duration_ns = self.database_duration()?;
                self.skip_statement()?;
                return Ok(Statement::CreateDatabase { name, duration_ns });
            }
            "CREATE" => self.phrase(
                "CREATE",
                &["DATABASE", "RETENTION POLICY", "CONTINUOUS QUERY", "USER", "SUBSCRIPTION"],
            )?,
            "DROP" => self.phrase(
                "DROP",
                &[
                    "DATABASE",
                    "MEASUREMENT",
                    "SERIES",
                    "SHARD",
                    "RETENTION POLICY",
                    "CONTINUOUS QUERY",
                    "USER",
                    "SUBSCRIPTION",
                ],
            )?,
            "ALTER" => self.phrase("ALTER", &["RETENTION POLICY"])?,
            "SET" => self.phrase("SET", &["PASSWORD"])?,
            "KILL" => self.phrase("KILL", &["QUERY"])?,
            "DELETE" | "GRANT" | "REVOKE" => word,
            _ => return Err(self.unexpected(&t, EXPECT_STATEMENT)),
        };
        self.skip_statement()?;
        Ok(Statement::Write { what: write })
    }

    /// `prefix` followed by one of `options` (each one or more keywords), e.g. "DROP RETENTION
    /// POLICY"; what follows is left to the caller.
    fn phrase(&mut self, prefix: &str, options: &[&str]) -> Result<String, ParseError> {
        let t = self.next()?;
        let first = match &t.tok {
            Tok::Ident(w) => options
                .iter()
                .find(|o| o.split(' ').next().is_some_and(|f| f.eq_ignore_ascii_case(w))),
            _ => None,
        };
        let Some(option) = first else {
            let firsts: Vec<&str> = options.iter().filter_map(|o| o.split(' ').next()).collect();
            return Err(self.unexpected(&t, &firsts.join(", ")));
        };
        for word in option.split(' ').skip(1) {
            self.expect_kw(word)?;
        }
        Ok(format!("{prefix} {option}"))
    }

    /// `WITH DURATION <d>|INF` of `CREATE DATABASE` (`INF` is 0, as in InfluxDB); the other
    /// clauses (`REPLICATION`, `SHARD DURATION`, `NAME`) are left to be skipped.
    fn database_duration(&mut self) -> Result<Option<i64>, ParseError> {
        if !self.eat_kw("WITH")? || !self.eat_kw("DURATION")? {
            return Ok(None);
        }
        if self.eat_kw("INF")? {
            return Ok(Some(0));
        }
        let t = self.next()?;
        if t.tok != Tok::Duration {
            return Err(self.unexpected(&t, "duration"));
        }
        self.duration(&t, false).map(Some)
    }

    /// Skips the rest of a statement that is recognised but not parsed, up to its `;`.
    fn skip_statement(&mut self) -> Result<(), ParseError> {
        let mut regex_may_follow = false;
        loop {
            if regex_may_follow && self.peek_regex()?.is_some() {
                regex_may_follow = false;
                continue;
            }
            let t = self.peek()?;
            if matches!(t.tok, Tok::Semicolon | Tok::Eof) {
                return Ok(());
            }
            regex_may_follow = match &t.tok {
                Tok::EqRegex | Tok::NotEqRegex => true,
                Tok::Ident(w) => w.eq_ignore_ascii_case("FROM"),
                _ => false,
            };
            self.next()?;
        }
    }

    fn where_clause(&mut self) -> Result<Option<Expr>, ParseError> {
        if self.eat_kw("WHERE")? { Ok(Some(self.expr()?)) } else { Ok(None) }
    }

    fn show_limits(&mut self) -> Result<(Option<u64>, Option<u64>), ParseError> {
        Ok((self.uint_clause("LIMIT")?, self.uint_clause("OFFSET")?))
    }

    fn uint_clause(&mut self, kw: &str) -> Result<Option<u64>, ParseError> {
        if !self.eat_kw(kw)? {
            return Ok(None);
        }
        let t = self.next()?;
        if t.tok != Tok::Integer {
            return Err(self.unexpected(&t, "integer"));
        }
        match self.src[t.start..t.end].parse::<u64>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => {
                Err(self
                    .err(t.start, format!("unable to parse integer {}", &self.src[t.start..t.end])))
            }
        }
    }

    // --- SELECT ---

    fn select(&mut self) -> Result<Select, ParseError> {
        let mut fields = Vec::new();
        loop {
            let expr = self.expr()?;
            let alias = if self.eat_kw("AS")? { Some(self.ident()?) } else { None };
            fields.push(Field { expr, alias });
            if !self.eat(&Tok::Comma)? {
                break;
            }
        }
        let into = if self.eat_kw("INTO")? { Some(self.select_into()?) } else { None };
        self.expect_kw("FROM")?;
        let from = self.sources()?;
        let condition = self.where_clause()?;
        let group_by = if self.eat_kw("GROUP")? {
            self.expect_kw("BY")?;
            self.dimensions()?
        } else {
            GroupBy::default()
        };
        let fill = if self.eat_kw("fill")? { self.fill()? } else { Fill::Null };
        let descending = if self.eat_kw("ORDER")? {
            self.expect_kw("BY")?;
            self.order()?
        } else {
            false
        };
        let limit = self.uint_clause("LIMIT")?;
        let offset = self.uint_clause("OFFSET")?;
        let slimit = self.uint_clause("SLIMIT")?;
        let soffset = self.uint_clause("SOFFSET")?;
        let tz = if self.eat_kw("tz")? {
            self.expect(&Tok::LParen, "(")?;
            let t = self.next()?;
            let Tok::Str(zone) = t.tok else { return Err(self.unexpected(&t, "string")) };
            self.expect(&Tok::RParen, ")")?;
            Some(zone)
        } else {
            None
        };
        Ok(Select {
            fields,
            into,
            from,
            condition,
            group_by,
            fill,
            descending,
            limit,
            offset,
            slimit,
            soffset,
            tz,
        })
    }

    /// The `INTO` target, kept as written: it is only parsed to be refused.
    fn select_into(&mut self) -> Result<String, ParseError> {
        let start = self.peek()?.start;
        let mut end = None;
        loop {
            let t = self.peek()?;
            if matches!(t.tok, Tok::Semicolon | Tok::Eof)
                || matches!(&t.tok, Tok::Ident(w) if w.eq_ignore_ascii_case("FROM"))
            {
                break;
            }
            end = Some(t.end);
            self.next()?;
        }
        match end {
            Some(end) => Ok(self.src[start..end].to_string()),
            None => Err(self.unexpected_next("identifier")),
        }
    }

    fn sources(&mut self) -> Result<Vec<Source>, ParseError> {
        let mut sources = vec![self.source()?];
        while self.eat(&Tok::Comma)? {
            sources.push(self.source()?);
        }
        Ok(sources)
    }

    /// `m`, `rp.m`, `db.rp.m`, `db..m`, each part possibly quoted; the last may be a regex.
    fn source(&mut self) -> Result<Source, ParseError> {
        if self.peek_is(&Tok::LParen)? {
            let at = self.peek()?.start;
            return Err(self.err(at, "subqueries are not supported"));
        }
        let mut parts: Vec<String> = Vec::new();
        let mut regex = None;
        loop {
            if let Some(re) = self.peek_regex()? {
                regex = Some(re);
                break;
            }
            parts.push(self.ident()?);
            if parts.len() == 3 || !self.eat(&Tok::Dot)? {
                break;
            }
            // `db..m`: the database's default retention policy.
            if parts.len() == 1 && self.eat(&Tok::Dot)? {
                parts.push(String::new());
            }
        }
        let name = match regex {
            Some(_) => None,
            None => parts.pop(),
        };
        let mut parts = parts.into_iter();
        let (database, retention_policy) = match (parts.next(), parts.next()) {
            (Some(db), Some(rp)) => (Some(db), Some(rp).filter(|rp| !rp.is_empty())),
            (Some(rp), None) => (None, Some(rp)),
            _ => (None, None),
        };
        Ok(match (regex, name) {
            (Some(pattern), _) => Source::Regex { database, retention_policy, pattern },
            (None, Some(name)) => Source::Measurement { database, retention_policy, name },
            (None, None) => return Err(self.unexpected_next("identifier")),
        })
    }

    fn dimensions(&mut self) -> Result<GroupBy, ParseError> {
        let mut group = GroupBy::default();
        loop {
            if let Some(re) = self.peek_regex()? {
                group.tags.push(Dimension::Regex(re));
            } else if self.eat(&Tok::Mul)? {
                group.tags.push(Dimension::Wildcard);
            } else {
                let at = self.peek()?.start;
                let name = self.ident()?;
                if name.eq_ignore_ascii_case("time") && self.eat(&Tok::LParen)? {
                    if group.time.is_some() {
                        return Err(self.err(at, "multiple time dimensions"));
                    }
                    group.time = Some(self.time_group()?);
                } else {
                    // A type on a dimension (`host::tag`) says nothing more: dimensions are tags.
                    if self.eat(&Tok::DoubleColon)? {
                        self.ref_kind()?;
                    }
                    group.tags.push(Dimension::Tag(name));
                }
            }
            if !self.eat(&Tok::Comma)? {
                return Ok(group);
            }
        }
    }

    /// The arguments of `time(interval[, offset])`, after its `(`.
    fn time_group(&mut self) -> Result<TimeGroup, ParseError> {
        let t = self.next()?;
        let interval_ns = match t.tok {
            Tok::Duration => self.duration(&t, false)?,
            _ => return Err(self.unexpected(&t, "duration")),
        };
        if interval_ns <= 0 {
            return Err(self.err(t.start, "time dimension must have a positive duration"));
        }
        let mut offset_ns = 0;
        if self.eat(&Tok::Comma)? {
            let negative = self.eat(&Tok::Sub)?;
            let t = self.next()?;
            offset_ns = match t.tok {
                Tok::Duration => self.duration(&t, negative)?,
                _ => return Err(self.unexpected(&t, "duration")),
            };
        }
        self.expect(&Tok::RParen, ")")?;
        Ok(TimeGroup { interval_ns, offset_ns })
    }

    fn fill(&mut self) -> Result<Fill, ParseError> {
        self.expect(&Tok::LParen, "(")?;
        let negative = self.eat(&Tok::Sub)?;
        let t = self.next()?;
        let fill = match &t.tok {
            Tok::Integer | Tok::Number => Fill::Number(self.float(&t, negative)?),
            Tok::Ident(w) if !negative && w.eq_ignore_ascii_case("null") => Fill::Null,
            Tok::Ident(w) if !negative && w.eq_ignore_ascii_case("none") => Fill::None,
            Tok::Ident(w) if !negative && w.eq_ignore_ascii_case("previous") => Fill::Previous,
            Tok::Ident(w) if !negative && w.eq_ignore_ascii_case("linear") => Fill::Linear,
            _ => return Err(self.unexpected(&t, "null, none, previous, linear, number")),
        };
        self.expect(&Tok::RParen, ")")?;
        Ok(fill)
    }

    /// After `ORDER BY`: whether the order is descending.
    fn order(&mut self) -> Result<bool, ParseError> {
        let only_time = "only ORDER BY time supported at this time";
        let t = self.peek()?;
        let at = t.start;
        let is_time =
            matches!(&t.tok, Tok::Ident(w) | Tok::QuotedIdent(w) if w.eq_ignore_ascii_case("time"));
        let is_direction = matches!(&t.tok, Tok::Ident(w) if w.eq_ignore_ascii_case("ASC") || w.eq_ignore_ascii_case("DESC"));
        if !is_time && !is_direction {
            return Err(self.err(at, only_time));
        }
        if is_time {
            self.next()?;
        }
        let descending = if self.eat_kw("DESC")? {
            true
        } else {
            self.eat_kw("ASC")?;
            false
        };
        if self.peek_is(&Tok::Comma)? {
            let at = self.peek()?.start;
            return Err(self.err(at, only_time));
        }
        Ok(descending)
    }

    // --- expressions ---

    fn expr(&mut self) -> Result<Expr, ParseError> {
        Ok(self.binary(1)?.expr)
    }

    fn binary_op(tok: &Tok) -> Option<(BinaryOp, u8)> {
        Some(match tok {
            Tok::Ident(w) if w.eq_ignore_ascii_case("OR") => (BinaryOp::Or, 1),
            Tok::Ident(w) if w.eq_ignore_ascii_case("AND") => (BinaryOp::And, 2),
            Tok::Eq => (BinaryOp::Eq, 3),
            Tok::NotEq => (BinaryOp::NotEq, 3),
            Tok::EqRegex => (BinaryOp::EqRegex, 3),
            Tok::NotEqRegex => (BinaryOp::NotEqRegex, 3),
            Tok::Lt => (BinaryOp::Lt, 3),
            Tok::LtEq => (BinaryOp::LtEq, 3),
            Tok::Gt => (BinaryOp::Gt, 3),
            Tok::GtEq => (BinaryOp::GtEq, 3),
            Tok::Add => (BinaryOp::Add, 4),
            Tok::Sub => (BinaryOp::Sub, 4),
            Tok::BitOr => (BinaryOp::BitOr, 4),
            Tok::BitXor => (BinaryOp::BitXor, 4),
            Tok::Mul => (BinaryOp::Mul, 5),
            Tok::Div => (BinaryOp::Div, 5),
            Tok::Mod => (BinaryOp::Mod, 5),
            Tok::BitAnd => (BinaryOp::BitAnd, 5),
            _ => return None,
        })
    }

    /// Operators binding at least as tightly as `min`, left-associative (precedence climbing).
    fn binary(&mut self, min: u8) -> Result<Node, ParseError> {
        let mut lhs = self.unary()?;
        loop {
            let t = self.peek()?;
            let Some((op, prec)) = Self::binary_op(&t.tok) else { break };
            if prec < min {
                break;
            }
            let at = t.start;
            self.next()?;
            let rhs = match op {
                BinaryOp::EqRegex | BinaryOp::NotEqRegex => Node::leaf(Expr::Regex(self.regex()?)),
                _ => self.binary(prec + 1)?,
            };
            lhs = self.node(at, Binary(op, lhs, rhs))?;
        }
        Ok(lhs)
    }

    fn node(&self, at: usize, shape: Shape) -> Result<Node, ParseError> {
        let (expr, depth) = match shape {
            Binary(op, lhs, rhs) => {
                let depth = lhs.depth.max(rhs.depth) + 1;
                (Expr::Binary { op, lhs: Box::new(lhs.expr), rhs: Box::new(rhs.expr) }, depth)
            }
            Shape::Paren(inner) => (Expr::Paren(Box::new(inner.expr)), inner.depth + 1),
            Shape::Call(name, args) => {
                let depth = args.iter().map(|a| a.depth).max().unwrap_or(0) + 1;
                (Expr::Call { name, args: args.into_iter().map(|a| a.expr).collect() }, depth)
            }
        };
        if depth > MAX_DEPTH {
            return Err(self.err(at, "expression nested too deeply"));
        }
        Ok(Node { expr, depth })
    }

    // The functions on the recursive path (`unary`, `paren`, `negation`, `named`, `call`,
    // `binary`) are kept small and separate: in a debug build a function's frame holds every
    // temporary of every arm, and a hundred nesting levels must fit a worker thread's stack.

    fn unary(&mut self) -> Result<Node, ParseError> {
        let t = self.next()?;
        match t.tok {
            Tok::LParen => self.paren(t.start),
            Tok::Sub => self.negation(t.start),
            Tok::Ident(_) | Tok::QuotedIdent(_) => self.named(t),
            _ => self.operand(t),
        }
    }

    fn paren(&mut self, at: usize) -> Result<Node, ParseError> {
        self.enter(at)?;
        if self.peek_kw("SELECT")? {
            let at = self.peek()?.start;
            return Err(self.err(at, "subqueries are not supported"));
        }
        let inner = self.binary(1)?;
        self.expect(&Tok::RParen, ")")?;
        self.leave();
        self.node(at, Shape::Paren(inner))
    }

    /// After a `-`: a negative literal, or the operand times -1, as InfluxDB has it.
    fn negation(&mut self, at: usize) -> Result<Node, ParseError> {
        let next = self.peek()?;
        if matches!(next.tok, Tok::Integer | Tok::Number | Tok::Duration) {
            let next = self.next()?;
            return Ok(Node::leaf(self.literal(&next, true)?));
        }
        self.enter(at)?;
        let operand = self.unary()?;
        self.leave();
        self.node(at, Binary(BinaryOp::Mul, Node::leaf(Expr::Integer(-1)), operand))
    }

    /// A name: a literal keyword, `DISTINCT`, a call or a reference.
    fn named(&mut self, t: Token) -> Result<Node, ParseError> {
        let name = match t.tok {
            Tok::Ident(w) if w.eq_ignore_ascii_case("true") => {
                return Ok(Node::leaf(Expr::Bool(true)));
            }
            Tok::Ident(w) if w.eq_ignore_ascii_case("false") => {
                return Ok(Node::leaf(Expr::Bool(false)));
            }
            Tok::Ident(w) if w.eq_ignore_ascii_case("DISTINCT") => return self.distinct(t.start),
            Tok::Ident(w) if is_keyword(&w) => {
                let t = Token { tok: Tok::Ident(w), ..t };
                return Err(self.unexpected(&t, EXPECT_EXPR));
            }
            Tok::Ident(name) | Tok::QuotedIdent(name) => name,
            _ => return Err(self.unexpected(&t, EXPECT_EXPR)),
        };
        if self.eat(&Tok::LParen)? {
            self.call(t.start, name.to_lowercase())
        } else {
            Ok(Node::leaf(self.reference(name)?))
        }
    }

    /// A literal or `*`: the operands that contain nothing.
    fn operand(&mut self, t: Token) -> Result<Node, ParseError> {
        match t.tok {
            Tok::Mul => {
                let kind = if self.eat(&Tok::DoubleColon)? {
                    let k = self.next()?;
                    match &k.tok {
                        Tok::Ident(w) if w.eq_ignore_ascii_case("field") => Some(RefKind::Field),
                        Tok::Ident(w) if w.eq_ignore_ascii_case("tag") => Some(RefKind::Tag),
                        _ => return Err(self.unexpected(&k, "field, tag")),
                    }
                } else {
                    None
                };
                Ok(Node::leaf(Expr::Wildcard { kind }))
            }
            Tok::Integer | Tok::Number | Tok::Duration => Ok(Node::leaf(self.literal(&t, false)?)),
            Tok::Str(s) => Ok(Node::leaf(Expr::String(s))),
            _ => Err(self.unexpected(&t, EXPECT_EXPR)),
        }
    }

    /// `DISTINCT x` or `DISTINCT(x)`, both the call `distinct(x)`.
    fn distinct(&mut self, at: usize) -> Result<Node, ParseError> {
        if self.eat(&Tok::LParen)? {
            return self.call(at, "distinct".to_string());
        }
        let name = self.ident()?;
        let arg = Node::leaf(self.reference(name)?);
        self.node(at, Shape::Call("distinct".to_string(), vec![arg]))
    }

    /// A call's arguments, after its `(`.
    fn call(&mut self, at: usize, name: String) -> Result<Node, ParseError> {
        self.enter(at)?;
        let mut args = Vec::new();
        if !self.eat(&Tok::RParen)? {
            loop {
                args.push(self.binary(1)?);
                if !self.eat(&Tok::Comma)? {
                    break;
                }
            }
            self.expect(&Tok::RParen, ")")?;
        }
        self.leave();
        self.node(at, Shape::Call(name, args))
    }

    /// A reference with its optional `::type`.
    fn reference(&mut self, name: String) -> Result<Expr, ParseError> {
        let kind = if self.eat(&Tok::DoubleColon)? { Some(self.ref_kind()?) } else { None };
        Ok(Expr::Ref { name, kind })
    }

    fn ref_kind(&mut self) -> Result<RefKind, ParseError> {
        let t = self.next()?;
        let kind = match &t.tok {
            Tok::Ident(w) => match w.to_ascii_lowercase().as_str() {
                "field" => Some(RefKind::Field),
                "tag" => Some(RefKind::Tag),
                "float" => Some(RefKind::Float),
                "integer" => Some(RefKind::Integer),
                "string" => Some(RefKind::String),
                "boolean" => Some(RefKind::Boolean),
                _ => None,
            },
            _ => None,
        };
        kind.ok_or_else(|| self.unexpected(&t, "float, integer, string, boolean, field, tag"))
    }

    /// An integer, number or duration token's value, negated if a `-` preceded it.
    fn literal(&self, t: &Token, negative: bool) -> Result<Expr, ParseError> {
        Ok(match t.tok {
            Tok::Integer => {
                let text = &self.src[t.start..t.end];
                let parsed = if negative { format!("-{text}").parse() } else { text.parse() };
                Expr::Integer(
                    parsed.map_err(|_| {
                        self.err(t.start, format!("unable to parse integer {text}"))
                    })?,
                )
            }
            Tok::Duration => Expr::Duration(self.duration(t, negative)?),
            _ => Expr::Number(self.float(t, negative)?),
        })
    }

    fn float(&self, t: &Token, negative: bool) -> Result<f64, ParseError> {
        let text = &self.src[t.start..t.end];
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(if negative { -v } else { v }),
            _ => Err(self.err(t.start, format!("unable to parse number {text}"))),
        }
    }

    fn duration(&self, t: &Token, negative: bool) -> Result<i64, ParseError> {
        let text = &self.src[t.start..t.end];
        duration_ns(text, negative)
            .ok_or_else(|| self.err(t.start, format!("unable to parse duration {text}")))
    }
}

/// What [`Parser::node`] builds, from children whose depths it knows.
enum Shape {
    Binary(BinaryOp, Node, Node),
    Paren(Node),
    Call(String, Vec<Node>),
}
use Shape::Binary;

#[path = "parse_show.rs"]
mod show;

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
