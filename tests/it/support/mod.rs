//! What the tests share: the server in process ([`server`]), the query router in process
//! ([`query`]), the real binary as a child process ([`binary`]), the MongoDB stand-in
//! ([`mongo_standin`]) and a fault-injecting proxy in front of it ([`proxy`]), headless Chromium
//! for the web console ([`browser`]), the Python venvs of the stand-in and of real clients
//! ([`venv`]); and
//! [`in_own_process`], for the few tests that measure something the whole process shares.

pub mod binary;
pub mod browser;
pub mod ca;
pub mod influxd;
pub mod mosquitto;
pub mod prometheus;
pub mod proxy;
pub mod query;
pub mod server;

pub use bucketd_test_support::{mongo_standin, venv};

use std::process::Command;

/// Set in a child started by [`in_own_process`]: the exact name of the test it runs.
const OWN_PROCESS_ENV: &str = "BUCKETD_IT_OWN_PROCESS";

/// The name libtest knows a test by (what `--exact` takes): `module` as `module_path!()` gives
/// it, less the crate's name, then the function's name.
pub fn test_name(module: &str, function: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{function}"),
        None => function.to_owned(),
    }
}

/// A command that runs just this test again, in a child process of this test binary: for
/// tests that kill a child (the crash tests) or need a process of their own.
pub fn this_test_again(module: &str, function: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args(["--exact", &test_name(module, function), "--nocapture", "--test-threads", "1"]);
    command
}

/// Runs the calling test in a process of its own, where it is the only test: for tests that
/// read process-wide state (the metrics registry, the heap through a counting allocator), which
/// every other test of this binary also moves.
///
/// Call it first, as `if !in_own_process(module_path!(), "the_test_fn") { return; }`. In the
/// test binary's own run it starts this binary again with `--exact` for just that test, waits,
/// passes on its output and fails if the child failed or ran no test, and returns `false`: the
/// test is done. In the child it returns `true`: go on with the test.
pub fn in_own_process(module: &str, function: &str) -> bool {
    let name = test_name(module, function);
    if std::env::var(OWN_PROCESS_ENV).is_ok_and(|running| running == name) {
        return true;
    }
    let output = this_test_again(module, function)
        .env(OWN_PROCESS_ENV, &name)
        .output()
        .expect("the test binary starts again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Through libtest's capture: shown when the test fails.
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{name}, in a process of its own: {}", output.status);
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name}: the child process ran no test (is the name right?)"
    );
    false
}
