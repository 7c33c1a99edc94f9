//! InfluxQL's tokens, scanned on demand: whether `/` opens a regex depends on where the parser
//! is, so the parser asks for a regex explicitly (`Lexer::regex`) where one may appear.

use super::ast::ParseError;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Eof,
    /// An unquoted name, which may be a keyword (keywords are matched case-insensitively by
    /// the parser; a quoted name never is one).
    Ident(String),
    QuotedIdent(String),
    /// A single-quoted string, escapes resolved.
    Str(String),
    // Numeric literals keep their text (the token's span) so that the parser can fold a
    // leading minus into them before converting: `-9223372036854775808` fits, its magnitude
    // does not.
    Integer,
    Number,
    Duration,
    /// `$name`: a bound parameter, which bucketd does not take (Grafana substitutes its
    /// variables before sending); the parser reports it where it stands.
    Param,
    /// A character InfluxQL has no use for; reported by the parser with what it expected.
    Illegal,
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
    EqRegex,
    NotEqRegex,
    Lt,
    LtEq,
    Gt,
    GtEq,
    LParen,
    RParen,
    Comma,
    Colon,
    DoubleColon,
    Semicolon,
    Dot,
}

/// A token and its span, as byte offsets into the query.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    pub start: usize,
    pub end: usize,
}

pub(super) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

/// The 1-based line and character (not byte) of a byte offset, as InfluxDB reports positions.
pub(super) fn position(src: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

pub(super) fn error_at(src: &str, offset: usize, message: impl Into<String>) -> ParseError {
    let (line, char) = position(src, offset);
    ParseError { message: message.into(), line, char }
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Lexer<'a> {
    pub(super) fn new(src: &'a str) -> Self {
        Lexer { src, pos: 0 }
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.src.as_bytes().get(at).copied()
    }

    fn err(&self, offset: usize, message: impl Into<String>) -> ParseError {
        error_at(self.src, offset, message)
    }

    fn skip_blanks(&mut self) -> Result<(), ParseError> {
        loop {
            match (self.byte(self.pos), self.byte(self.pos + 1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r'), _) => self.pos += 1,
                (Some(b'-'), Some(b'-')) => {
                    self.pos = match self.src[self.pos..].find('\n') {
                        Some(i) => self.pos + i + 1,
                        None => self.src.len(),
                    }
                }
                (Some(b'/'), Some(b'*')) => match self.src[self.pos + 2..].find("*/") {
                    Some(i) => self.pos += 2 + i + 2,
                    None => return Err(self.err(self.pos, "unterminated comment")),
                },
                _ => return Ok(()),
            }
        }
    }

    pub(super) fn next(&mut self) -> Result<Token, ParseError> {
        self.skip_blanks()?;
        let start = self.pos;
        let Some(b) = self.byte(start) else {
            return Ok(Token { tok: Tok::Eof, start, end: start });
        };
        let next = self.byte(start + 1);
        let (tok, len) = match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let len =
                    self.src.as_bytes()[start..].iter().take_while(|&&b| is_ident_char(b)).count();
                (Tok::Ident(self.src[start..start + len].to_string()), len)
            }
            b'0'..=b'9' => return Ok(self.number()),
            b'.' if next.is_some_and(|b| b.is_ascii_digit()) => return Ok(self.number()),
            b'"' => {
                let (name, end) = self.quoted(b'"')?;
                self.pos = end;
                return Ok(Token { tok: Tok::QuotedIdent(name), start, end });
            }
            b'\'' => {
                let (s, end) = self.quoted(b'\'')?;
                self.pos = end;
                return Ok(Token { tok: Tok::Str(s), start, end });
            }
            b'$' => {
                let len = self.src.as_bytes()[start + 1..]
                    .iter()
                    .take_while(|&&b| is_ident_char(b))
                    .count();
                (if len == 0 { Tok::Illegal } else { Tok::Param }, len + 1)
            }
            b'.' => (Tok::Dot, 1),
            b'+' => (Tok::Add, 1),
            b'-' => (Tok::Sub, 1),
            b'*' => (Tok::Mul, 1),
            b'/' => (Tok::Div, 1),
            b'%' => (Tok::Mod, 1),
            b'&' => (Tok::BitAnd, 1),
            b'|' => (Tok::BitOr, 1),
            b'^' => (Tok::BitXor, 1),
            b'=' if next == Some(b'~') => (Tok::EqRegex, 2),
            b'=' => (Tok::Eq, 1),
            b'!' if next == Some(b'=') => (Tok::NotEq, 2),
            b'!' if next == Some(b'~') => (Tok::NotEqRegex, 2),
            b'<' if next == Some(b'=') => (Tok::LtEq, 2),
            b'<' if next == Some(b'>') => (Tok::NotEq, 2),
            b'<' => (Tok::Lt, 1),
            b'>' if next == Some(b'=') => (Tok::GtEq, 2),
            b'>' => (Tok::Gt, 1),
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b',' => (Tok::Comma, 1),
            b';' => (Tok::Semicolon, 1),
            b':' if next == Some(b':') => (Tok::DoubleColon, 2),
            b':' => (Tok::Colon, 1),
            _ => (Tok::Illegal, self.src[start..].chars().next().map_or(1, char::len_utf8)),
        };
        self.pos = start + len;
        Ok(Token { tok, start, end: self.pos })
    }

    /// `12`, `1.5`, `.5`, or a duration: digits followed by letters (`10s`, `1h30m`, `5µs`),
    /// scanned whole as InfluxDB does so that a bad unit is reported as a bad duration.
    fn number(&mut self) -> Token {
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let digits = |from: usize| bytes[from..].iter().take_while(|b| b.is_ascii_digit()).count();
        let mut end = start + digits(start);
        let mut tok = Tok::Integer;
        if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(|b| b.is_ascii_digit()) {
            end += 1 + digits(end + 1);
            tok = Tok::Number;
        } else if bytes.get(end).is_some_and(|b| b.is_ascii_alphabetic())
            || self.src[end..].starts_with('µ')
        {
            tok = Tok::Duration;
            loop {
                if bytes.get(end).is_some_and(|b| b.is_ascii_alphanumeric()) {
                    end += 1;
                } else if self.src[end..].starts_with('µ') {
                    end += 'µ'.len_utf8();
                } else {
                    break;
                }
            }
        }
        self.pos = end;
        Token { tok, start, end }
    }

    /// A quoted identifier or string from its opening quote: the unescaped text and the
    /// offset just past the closing quote.
    fn quoted(&self, quote: u8) -> Result<(String, usize), ParseError> {
        let start = self.pos;
        let what =
            if quote == b'"' { "unterminated quoted identifier" } else { "unterminated string" };
        let mut out = String::new();
        let mut chars = self.src[start + 1..].char_indices().map(|(i, c)| (start + 1 + i, c));
        while let Some((i, c)) = chars.next() {
            match c {
                _ if c == quote as char => return Ok((out, i + 1)),
                '\n' => return Err(self.err(start, what)),
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, e @ ('\\' | '"' | '\''))) => out.push(e),
                    Some((_, e)) => return Err(self.err(i, format!("bad escape \\{e}"))),
                    None => return Err(self.err(start, what)),
                },
                _ => out.push(c),
            }
        }
        Err(self.err(start, what))
    }

    /// The regex whose opening `/` is at `open` (the `/` was just scanned as `Div`): its pattern
    /// with `\/` unescaped and every other escape kept for the regex engine, and its span's end.
    pub(super) fn regex(&mut self, open: usize) -> Result<(String, usize), ParseError> {
        let mut out = String::new();
        let mut chars = self.src[open + 1..].char_indices().map(|(i, c)| (open + 1 + i, c));
        while let Some((i, c)) = chars.next() {
            match c {
                '/' => {
                    self.pos = i + 1;
                    return Ok((out, i + 1));
                }
                '\n' => break,
                '\\' => match chars.next() {
                    Some((_, '/')) => out.push('/'),
                    // A backslash escapes the next character whatever it is, so that `\\/`
                    // is a backslash followed by the closing slash.
                    Some((_, e)) if e != '\n' => {
                        out.push('\\');
                        out.push(e);
                    }
                    _ => break,
                },
                _ => out.push(c),
            }
        }
        Err(self.err(open, "unterminated regex"))
    }
}

/// A duration literal's nanoseconds: one or more `<digits><unit>` segments (`1h30m`), negated
/// if `negative`; `None` if a unit is unknown or the value does not fit in an i64.
pub(super) fn duration_ns(text: &str, negative: bool) -> Option<i64> {
    let mut rest = text;
    let mut total: i128 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit_len =
            rest[digits..].find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len() - digits);
        if digits == 0 {
            return None;
        }
        let n: i128 = rest[..digits].parse().ok()?;
        let unit: i128 = match &rest[digits..digits + unit_len] {
            "ns" => 1,
            "u" | "µ" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "w" => 604_800_000_000_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        if total > i128::from(i64::MAX) + 1 {
            return None;
        }
        rest = &rest[digits + unit_len..];
    }
    i64::try_from(if negative { -total } else { total }).ok()
}
