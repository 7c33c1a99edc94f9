//! InfluxQL: any text parses or fails without panicking; a failure is positioned inside the
//! text; a success has what the executor relies on (a statement, a SELECT's fields and
//! sources) and is unchanged by an empty statement after it.
#![no_main]

use bucketd::query::influxql::syntax::ast::Statement;
use bucketd::query::influxql::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(q) = std::str::from_utf8(data) else { return };
    match parse(q) {
        Err(e) => {
            let lines: Vec<&str> = q.split('\n').collect();
            assert!(
                e.line >= 1 && e.line <= lines.len(),
                "line {} of {}: {e}",
                e.line,
                lines.len()
            );
            let chars = lines[e.line - 1].chars().count();
            assert!(e.char >= 1 && e.char <= chars + 1, "char {} of {chars}: {e}", e.char);
            let _ = e.to_string();
        }
        Ok(query) => {
            assert!(!query.statements.is_empty());
            for statement in &query.statements {
                if let Statement::Select(select) = statement {
                    assert!(!select.fields.is_empty() && !select.from.is_empty());
                }
            }
            // A newline first, so that a trailing `--` comment cannot swallow the `;`.
            let again = parse(&format!("{q}\n;")).expect("an empty statement after a valid query");
            assert_eq!(again, query);
        }
    }
});
