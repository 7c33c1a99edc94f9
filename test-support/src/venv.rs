//! Python environments the tests build for themselves: a venv under `<target>/<name>-venv`,
//! created on first use (pip install -r requirements.txt, pinned) under a file lock, so that
//! tests running in parallel (and in processes of their own) build it once, and built again
//! when the requirements change.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set to choose the Python interpreter that builds the venvs (default `python3`).
pub const PYTHON_ENV: &str = "BUCKETD_TEST_PYTHON";

const VENV_TIMEOUT: Duration = Duration::from_secs(600);

/// Cargo's target directory: the one the running test or bench binary lies under
/// (`<target>/[<triple>/]<profile>/deps/`), marked by the `CACHEDIR.TAG` Cargo writes at its
/// root. (`CARGO_TARGET_TMPDIR` would say it, but Cargo sets it only for the integration tests
/// and benches themselves, not for a library they use.)
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .skip(1)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .unwrap_or_else(|| panic!("{} is under no Cargo target directory", exe.display()))
        .to_path_buf()
}

/// Runs `cmd` to completion within `limit`, its output logged under `target`; panics with
/// that output on failure or timeout.
fn run_bounded(mut cmd: Command, target: &Path, name: &str, what: &str, limit: Duration) {
    let log_path = target.join(format!("{name}-{}.log", std::process::id()));
    let log = File::create(&log_path).expect("create venv setup log");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log handle"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: could not start {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for setup step") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: timed out after {limit:?}; output in {}", log_path.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut output = String::new();
    let _ = File::open(&log_path).and_then(|mut f| f.read_to_string(&mut output));
    let _ = fs::remove_file(&log_path);
    assert!(status.success(), "{what} failed ({status}):\n{output}");
}

/// The interpreter of venv `name` with `requirements` installed, creating it if needed.
/// `missing`: what the panic says when there is no Python to build it with.
pub fn python(name: &str, requirements_path: &Path, missing: &str) -> PathBuf {
    let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_owned());
    let requirements = fs::read_to_string(requirements_path).expect("read requirements.txt");
    let target = target_dir();
    let venv = target.join(format!("{name}-venv"));
    let ready = venv.join("bucketd-ready");
    let venv_python = venv.join("bin/python");

    let lock = File::create(target.join(format!("{name}-venv.lock"))).expect("create venv lock");
    lock.lock().expect("lock the venv");
    if fs::read_to_string(&ready).ok().as_deref() != Some(requirements.as_str()) {
        if Command::new(&python).arg("--version").output().is_err() {
            panic!("{missing}");
        }
        let _ = fs::remove_dir_all(&venv);
        let mut create = Command::new(&python);
        create.args(["-m", "venv"]).arg(&venv);
        run_bounded(create, &target, name, &format!("creating the {name} venv"), VENV_TIMEOUT);
        let mut install = Command::new(&venv_python);
        install.args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"]);
        install.arg(requirements_path);
        let what = format!("installing the {name} requirements");
        run_bounded(install, &target, name, &what, VENV_TIMEOUT);
        fs::write(&ready, &requirements).expect("mark the venv ready");
    }
    drop(lock);
    venv_python
}
