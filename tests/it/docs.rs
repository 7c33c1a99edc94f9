//! The documentation against the binary: what the docs say the server accepts is what it
//! accepts.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// clap's own flags, printed by `--help` on every program; the page documents the server's.
const CLAP_BUILTINS: [&str; 2] = ["--help", "--version"];

/// The long flags `bucketd --help` lists: those that start an option line (indented by at
/// most a few spaces, as `  -h, --help` and `      --http-addr <HTTP_ADDR>`; descriptions are
/// indented further).
fn flags_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter(|line| line.len() - line.trim_start().len() < 8)
        .filter_map(|line| {
            let option = line.trim_start();
            // `-h, --help`: the short form comes first.
            let option = match option.split_once(", ") {
                Some((short, long)) if short.len() == 2 && short.starts_with('-') => long,
                _ => option,
            };
            let name = option.split_whitespace().next()?;
            (name.starts_with("--") && name.len() > 2).then(|| name.to_owned())
        })
        .filter(|flag| !CLAP_BUILTINS.contains(&flag.as_str()))
        .collect()
}

/// The flags of the page's flag tables: every `` `--flag` `` in the first cell of a table row.
fn flags_in_tables(page: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in page.lines().filter(|line| line.starts_with('|')) {
        let first_cell = line[1..].split('|').next().unwrap_or("");
        for quoted in first_cell.split('`').skip(1).step_by(2) {
            if let Some(name) = quoted.split_whitespace().next().filter(|n| n.starts_with("--")) {
                flags.insert(name.to_owned());
            }
        }
    }
    flags
}

#[test]
fn the_configuration_page_lists_exactly_the_flags_help_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_bucketd")).arg("--help").output().unwrap();
    assert!(
        out.status.success(),
        "bucketd --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = String::from_utf8(out.stdout).unwrap();
    let page_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let page = std::fs::read_to_string(&page_path).unwrap();

    let printed = flags_in_help(&help);
    let documented = flags_in_tables(&page);
    assert!(printed.len() > 20, "too few flags parsed from --help: {printed:?}\n{help}");

    let undocumented: Vec<_> = printed.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&printed).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/configuration.md's flag table and `bucketd --help` differ:\n\
         printed by --help but not in the table: {undocumented:?}\n\
         in the table but not printed by --help: {unknown:?}"
    );
}

#[test]
fn flags_are_read_from_option_lines_and_table_rows_only() {
    let help = "Usage: bucketd [OPTIONS]\n\nOptions:\n      --http-addr <HTTP_ADDR>\n          \
                Address; see --data-dir\n\n          [default: x]\n  -q, --quiet\n          \
                Quiet\n  -h, --help\n          Print help\n";
    assert_eq!(flags_in_help(help), BTreeSet::from(["--http-addr".into(), "--quiet".into()]));

    let page = "`--not-a-row` in prose\n\n| flag | env |\n|---|---|\n| `--a` | `BUCKETD_A` |\n\
                | `--b PATH`, `--c` | `--not-first-cell` |\n";
    assert_eq!(flags_in_tables(page), BTreeSet::from(["--a".into(), "--b".into(), "--c".into()]));
}
