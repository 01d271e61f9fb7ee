//! Attacks on what the sandbox hands the code: no descriptor but stdin, stdout and stderr (even
//! one Gym inherited without close-on-exec), no trace of the code on any command line of the
//! host, and no nested user namespace to gain capabilities in.

use std::process::Command;
use std::time::Duration;

use super::super::{run, token};
use super::{default_sandbox, json_of};
use crate::common::Scratch;

/// Opens its first argument on descriptors 7 and 12 without close-on-exec (as a careless
/// library or parent would leave them), checks they are open, then becomes the rest.
const LEAK_AND_EXEC: &str = r#"import os, sys
secret = os.open(sys.argv[1], os.O_RDONLY)
os.dup2(secret, 7)
os.dup2(secret, 12)
assert os.get_inheritable(7) and os.get_inheritable(12)
os.execv(sys.argv[2], sys.argv[2:])
"#;

#[test]
fn descriptors_gym_inherited_do_not_reach_the_code() {
    let scratch = Scratch::new();
    let secret = scratch.dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let code = r#"
import json, os
def probe(fd):
    try:
        return os.read(fd, 100).decode()
    except OSError as e:
        return e.errno
print(json.dumps({"7": probe(7), "12": probe(12), "fds": sorted(os.listdir("/proc/self/fd"))}))
"#;
    let output = Command::new("python3")
        .args(["-c", LEAK_AND_EXEC])
        .arg(&secret)
        .arg(env!("CARGO_BIN_EXE_gym"))
        .args(["tools", "call", "python"])
        .arg(serde_json::json!({ "code": code }).to_string())
        .current_dir(scratch.dir.path())
        .env("GYM_LIBRARY_DIR", scratch.libraries())
        .output()
        .unwrap();
    let out = crate::common::json_stdout(&output);
    // EBADF for both; the only other descriptor is the one listing /proc/self/fd.
    assert_eq!(
        out,
        serde_json::json!({"7": 9, "12": 9, "fds": ["0", "1", "2", "3"]})
    );
}

#[tokio::test]
async fn the_code_is_on_no_command_line_of_the_host() {
    let tool = default_sandbox().await;
    // Python's command line once it runs the code: `PYTHON -I -`.
    let mut sandboxed = tool.config().python.as_os_str().as_encoded_bytes().to_vec();
    sandboxed.extend_from_slice(b"\0-I\0-\0");
    let marker = token("unseen");
    let code = format!("import time\nsecret = {marker:?}\ntime.sleep(2)\nprint(secret)\n");
    let call = tokio::spawn(async move { run(&tool, &code).await });
    // Everything `ps` could show of every process, again and again while the call runs.
    let mut seen_running = 0;
    let mut found = Vec::new();
    while !call.is_finished() {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            for file in ["cmdline", "environ"] {
                let Ok(bytes) = std::fs::read(entry.path().join(file)) else {
                    continue;
                };
                if String::from_utf8_lossy(&bytes).contains(&marker) {
                    found.push(format!("{}/{file}", entry.path().display()));
                }
                if file == "cmdline" && bytes == sandboxed {
                    seen_running += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(call.await.unwrap(), Ok(format!("{marker}\n")));
    assert_eq!(found, Vec::<String>::new());
    assert!(
        seen_running > 5,
        "the sandboxed Python was seen in only {seen_running} scans"
    );
}

#[tokio::test]
async fn python_cannot_make_a_nested_user_namespace() {
    let tool = default_sandbox().await;
    let code = r#"
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
def unshare(flag):
    result = libc.unshare(flag)
    return [result, ctypes.get_errno()]
try:
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("100")
    raised = "WROTE"
except OSError as e:
    raised = e.errno
print(json.dumps({"user": unshare(0x10000000), "net": unshare(0x40000000),
    "mount": unshare(0x00020000), "limit": open("/proc/sys/user/max_user_namespaces").read().strip(),
    "raise": raised, "cgroup": open("/proc/self/cgroup").read().split()}))
"#;
    let out = json_of(&tool, code).await;
    // ENOSPC: the namespace limit is 0; EPERM: no capability for the others.
    assert_eq!(out["user"], serde_json::json!([-1, 28]), "{out}");
    assert_eq!(out["net"], serde_json::json!([-1, 1]), "{out}");
    assert_eq!(out["mount"], serde_json::json!([-1, 1]), "{out}");
    assert_eq!(out["limit"], "0", "{out}");
    assert_eq!(out["raise"], 30, "EROFS: {out}");
    // Its own cgroup namespace: no host cgroup path.
    for line in out["cgroup"].as_array().unwrap() {
        assert!(line.as_str().unwrap().ends_with(":/"), "{out}");
    }
}
