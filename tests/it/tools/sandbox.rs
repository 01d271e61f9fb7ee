//! Attacks on the python sandbox, one per claim of its docs: it shows no repository, home,
//! host users or host processes, writes only in its scratch folder, and stops fork bombs and
//! oversized files; the call's memory budget in [`budget`], descriptors, command lines and
//! nested namespaces in [`hardening`].

mod budget;
mod hardening;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gym::tools::ToolError;
use gym::tools::python::{Python, PythonConfig};
use serde_json::Value;

use super::{processes_with, run, tagged, token};

async fn sandbox(config: PythonConfig) -> Python {
    Python::new(config)
        .await
        .expect("the sandbox can be set up on this machine")
}

async fn default_sandbox() -> Python {
    sandbox(PythonConfig::default()).await
}

/// Runs `code`, which prints one JSON value, and parses it.
async fn json_of(tool: &Python, code: &str) -> Value {
    let output = run(tool, code).await.unwrap();
    serde_json::from_str(output.trim()).unwrap_or_else(|_| panic!("not JSON: {output}"))
}

/// `listing(path)` in Python: the names in a folder, or the error's name.
const LISTING: &str = r#"
import json, os
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return type(e).__name__
def reading(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return type(e).__name__
"#;

#[tokio::test]
async fn python_cannot_read_the_repository() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let manifest = Path::new(repo).join("Cargo.toml");
    assert!(
        std::fs::read_to_string(&manifest)
            .unwrap()
            .contains("[package]")
    );
    let tool = default_sandbox().await;
    let out = json_of(
        &tool,
        &format!(
            "{LISTING}\nprint(json.dumps([reading({manifest:?}), listing({repo:?}), listing('.'), os.getcwd()]))",
            manifest = manifest.display().to_string()
        ),
    )
    .await;
    assert_eq!(
        out,
        serde_json::json!(["FileNotFoundError", "FileNotFoundError", [], "/scratch"]),
        "the repository is not there and the working directory starts empty"
    );
}

#[tokio::test]
async fn python_sees_nothing_of_the_home_directory() {
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
    let secret = tempfile::tempdir_in(&home).unwrap();
    std::fs::write(secret.path().join("secret.txt"), "host secret").unwrap();
    let tool = default_sandbox().await;
    let code = format!(
        "{LISTING}\nprint(json.dumps({{'home': listing({home:?}), 'secret': reading({file:?}), \
         'HOME': os.environ.get('HOME'), 'expanded': os.path.expanduser('~'), \
         'slash_home': listing('/home')}}))",
        home = home.display().to_string(),
        file = secret.path().join("secret.txt").display().to_string(),
    );
    let out = json_of(&tool, &code).await;
    assert_eq!(out["secret"], "FileNotFoundError", "{out}");
    assert_eq!(out["HOME"], "/scratch", "{out}");
    assert_eq!(out["expanded"], "/scratch", "{out}");
    // The home folder is absent, or (an interpreter installed under it, e.g. by pyenv) holds
    // only the path down to the interpreter's folder.
    let shown = tool.shown_paths();
    for (folder, names) in [
        (home.as_path(), &out["home"]),
        (Path::new("/home"), &out["slash_home"]),
    ] {
        let Some(names) = names.as_array() else {
            assert_eq!(names, "FileNotFoundError", "{out}");
            continue;
        };
        for name in names {
            let entry = folder.join(name.as_str().unwrap());
            assert!(
                shown.iter().any(|p| p.starts_with(&entry)),
                "{} is visible but leads to no folder of the interpreter ({shown:?})",
                entry.display()
            );
        }
        let secret_name = secret.path().file_name().unwrap().to_str().unwrap();
        assert!(!names.iter().any(|n| n == secret_name), "{out}");
    }
}

#[tokio::test]
async fn python_does_not_see_the_hosts_users() {
    let host = std::fs::read_to_string("/etc/passwd").unwrap();
    assert!(host.contains("root:"), "the host has users");
    let tool = default_sandbox().await;
    let code = format!(
        "{LISTING}\nimport pwd\ntry:\n    user = pwd.getpwnam('root').pw_dir\nexcept KeyError:\n    \
         user = None\nprint(json.dumps([reading('/etc/passwd'), reading('/etc/shadow'), \
         listing('/etc'), user]))"
    );
    let out = json_of(&tool, &code).await;
    assert_eq!(
        out,
        serde_json::json!([
            "FileNotFoundError",
            "FileNotFoundError",
            "FileNotFoundError",
            null
        ])
    );
}

#[tokio::test]
async fn python_writes_nowhere_but_its_scratch_folder() {
    let outside = tempfile::tempdir().unwrap();
    let in_tmp = format!("/tmp/{}.txt", token("escape"));
    let tool = default_sandbox().await;
    let repo_file = Path::new(env!("CARGO_MANIFEST_DIR")).join(token("escape"));
    let targets = [
        outside.path().join("escape.txt"),
        PathBuf::from(&in_tmp),
        repo_file.clone(),
        "/dev/shm/escape.txt".into(),
        "/escape.txt".into(),
        "/usr/escape.txt".into(),
        "/lib/escape.txt".into(),
        "/proc/sys/kernel/hostname".into(),
        "/proc/escape.txt".into(),
    ];
    let paths: Vec<String> = targets.iter().map(|p| p.display().to_string()).collect();
    let code = format!(
        r#"
import json, os
denied = {{}}
for path in {paths:?}:
    try:
        with open(path, "w") as f:
            f.write("x")
        denied[path] = "WROTE"
    except OSError as e:
        denied[path] = e.errno
with open("inside.txt", "w") as f:
    f.write("hello")
print(json.dumps({{"denied": denied, "inside": open("/scratch/inside.txt").read()}}))
"#
    );
    let out = json_of(&tool, &code).await;
    assert_eq!(out["inside"], "hello");
    for path in &paths {
        let errno = &out["denied"][path];
        assert!(
            [2, 13, 30].contains(&errno.as_i64().unwrap_or(-1)),
            "{path}: {errno} (expected ENOENT, EACCES or EROFS)"
        );
    }
    // Folders that exist inside are read-only; host folders are not there at all.
    for path in [
        "/escape.txt",
        "/usr/escape.txt",
        "/proc/sys/kernel/hostname",
    ] {
        assert_eq!(out["denied"][path], 30, "{path}: {out}");
    }
    for path in targets.iter().take(3) {
        assert!(!path.exists(), "{}", path.display());
    }
}

#[tokio::test]
async fn a_fork_bomb_is_stopped_by_the_process_limit() {
    let tool = sandbox(PythonConfig {
        max_processes: 16,
        timeout: Duration::from_secs(3),
        ..PythonConfig::default()
    })
    .await;
    // Children that stay alive until Python (PID 1 of the sandbox) ends.
    let count = r#"
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
    print("no limit", n)
except OSError as e:
    print("stopped after", n, e.errno)
"#;
    let started = Instant::now();
    let output = run(&tool, count).await.unwrap();
    let stopped: Vec<&str> = output.split_whitespace().collect();
    assert_eq!(stopped[..2], ["stopped", "after"], "{output}");
    assert!(stopped[2].parse::<u32>().unwrap() < 16, "{output}");
    assert_eq!(stopped[3], "11", "EAGAIN: {output}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // A real bomb: every process forks forever. The limit holds it at 16, the wall clock ends
    // it, and the PID namespace takes every process down.
    let token = token("bomb");
    let bomb = tagged(
        &token,
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    );
    let started = Instant::now();
    let result = run(&tool, &bomb).await;
    assert_eq!(
        result,
        Err(ToolError::TimedOut {
            tool: "python".into(),
            seconds: 3.0
        })
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with(&token), Vec::<String>::new());
}

#[tokio::test]
async fn files_over_the_size_limit_and_a_full_scratch_folder_fail() {
    let tool = sandbox(PythonConfig {
        file_mb: 1,
        scratch_mb: 3,
        ..PythonConfig::default()
    })
    .await;
    let code = r#"
import json
def write(name, size):
    try:
        with open(name, "wb") as f:
            f.write(b"x" * size)
        return "ok"
    except OSError as e:
        return e.errno
print(json.dumps([write("small", 512 * 1024), write("big", 2 * 1024 * 1024),
    [write(f"part{i}", 1000 * 1024) for i in range(4)]]))
"#;
    let out = json_of(&tool, code).await;
    assert_eq!(out[0], "ok");
    assert_eq!(out[1], 27, "EFBIG: {out}");
    assert_eq!(out[2][0], "ok", "{out}");
    assert_eq!(out[2][3], 28, "ENOSPC once 3 MiB are used: {out}");
}

#[tokio::test]
async fn proc_shows_only_the_sandboxs_processes() {
    let host_init = std::fs::read("/proc/1/cmdline").unwrap();
    let host_pids = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .count();
    assert!(host_pids > 3, "the host runs processes");
    let tool = default_sandbox().await;
    let code = r#"
import json, os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({"pids": pids, "init": open("/proc/1/cmdline", "rb").read().decode(errors="replace"),
    "me": os.getpid()}))
"#;
    let out = json_of(&tool, code).await;
    assert_eq!(out["pids"], serde_json::json!([1]), "{out}");
    assert_eq!(out["me"], 1, "Python is PID 1 of its own namespace");
    let init = out["init"].as_str().unwrap();
    assert!(
        init.ends_with("\0-I\0-\0"),
        "the code comes on stdin: {init:?}"
    );
    assert_ne!(init.as_bytes(), host_init.as_slice());
}

#[tokio::test]
async fn python_has_no_capabilities_and_cannot_remount() {
    let tool = default_sandbox().await;
    let code = r#"
import ctypes, json
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
remount = libc.mount(b"none", b"/usr", None, MS_REMOUNT | MS_BIND, None)
remount_errno = ctypes.get_errno()
tmpfs = libc.mount(b"none", b"/scratch", b"tmpfs", 0, None)
tmpfs_errno = ctypes.get_errno()
print(json.dumps({"eff": status["CapEff"].strip(), "bnd": status["CapBnd"].strip(),
    "remount": [remount, remount_errno], "tmpfs": [tmpfs, tmpfs_errno]}))
"#;
    let out = json_of(&tool, code).await;
    assert_eq!(out["eff"], "0000000000000000", "{out}");
    assert_eq!(out["bnd"], "0000000000000000", "{out}");
    assert_eq!(out["remount"], serde_json::json!([-1, 1]), "EPERM: {out}");
    assert_eq!(out["tmpfs"], serde_json::json!([-1, 1]), "EPERM: {out}");
}
