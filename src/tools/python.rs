//! `python`: runs model-written Python in a sandbox the kernel enforces, not Python itself.
//!
//! Each call runs `python3 -I -` (the code on stdin, so it is on no command line `ps` shows) in
//! a root built for it, with util-linux tools only (`unshare`, `mount`, `pivot_root`, `setpriv`,
//! `prlimit`; no `unsafe` in the crate):
//!
//! - **What it sees.** The root is an empty tmpfs (read-only once built), switched to with
//!   `pivot_root`; the host's tree is then detached, so nothing else is reachable. In it,
//!   read-only and `nosuid`: `/usr`, `/bin` and `/lib*` (the loader, the shared libraries of
//!   the interpreter and its extension modules, `/bin/sh` for `subprocess`); the interpreter's
//!   own folders at their host paths (its `sys.prefix`, `sys.base_prefix`, exec prefixes,
//!   `sysconfig`'s stdlib and site-packages, the folder of the resolved executable), found once
//!   by asking the interpreter, outermost only, skipping those already under `/usr`, and refused
//!   when one is `/` or holds the home or working directory; `/dev/null`, `zero`, `full`,
//!   `random` and `urandom`; a fresh read-only `/proc` of the sandbox's own PID namespace (its
//!   only process is Python, PID 1, and its children; kernel-wide files such as `meminfo`
//!   still describe the machine); and `/scratch`, a private size-limited tmpfs that is the
//!   working directory, `HOME` and `TMPDIR`, the only writable place, discarded with the call.
//!   There is no `/etc` (no host users, no resolver configuration), no `/home`, `/root`,
//!   `/tmp`, `/sys`, no repository or working directory. A pyenv interpreter under
//!   `~/.pyenv` shows the path down to its version folder and nothing beside it.
//! - **Namespaces.** Besides mount, PID and network: IPC (no host shared memory or message
//!   queues) and cgroup (the call's cgroup is its `/`, so no host cgroup path is shown).
//! - **Network.** A new network namespace has only a loopback interface that is down, so
//!   nothing (not even 127.0.0.1 of the host, nor DNS) can be reached.
//! - **Privileges.** Python runs as root of a new user namespace with no capabilities (bounding
//!   set cleared, no-new-privs), so it cannot remount, mount or leave the root, and that
//!   namespace's `user.max_user_namespaces` (with the other `max_*_namespaces`) is 0, so it
//!   cannot make a nested user namespace to gain capabilities there either. When Gym runs as
//!   the host's root, the namespaces are entered as `nobody` (uid 65534), because the kernel
//!   does not apply the process limit to the host's uid 0.
//! - **Descriptors.** Only stdin (the code, then end of file), stdout and stderr reach the
//!   code: the sandboxed interpreter first closes every other descriptor (one Gym inherited, or
//!   one a library opened without close-on-exec), then execs itself to read the code.
//! - **Limits.** One memory and process budget per call where a cgroup can be made
//!   ([`Budget::Cgroup`], see the `budget` module): `memory_mb` for all the call's processes
//!   together (and its scratch files, which live in memory), no swap, `max_processes` (plus the
//!   sandbox's own few); the kernel kills a process of the call, not of the host, when the
//!   budget is reached, and what is left is killed and the cgroup removed after the call.
//!   Without one ([`Budget::PerProcess`], e.g. a container with read-only cgroups) the limits
//!   below are per process, so one call may hold up to `max_processes` × `memory_mb`; the tool
//!   says so in its description and on stderr when it is built. Always: a wall-clock limit
//!   kills the whole process group, and the PID namespace takes every descendant down with
//!   Python; CPU time (the timeout plus one second), address space (RLIMIT_AS, `memory_mb` per
//!   process, so one oversized allocation is a `MemoryError`), processes (RLIMIT_NPROC, counted
//!   in the sandbox's own user namespace), file size (RLIMIT_FSIZE: a bigger write fails with
//!   EFBIG) and the scratch size are capped; at most `output_bytes` of output are read, then
//!   the process group is killed.
//! - **No seccomp filter.** Installing one needs either `unsafe` code between fork and exec
//!   (this crate forbids `unsafe`) or a tool beyond util-linux (its `setpriv` of Debian 12,
//!   2.38, has no such option), and what such a filter is usually for is already closed:
//!   mounting, remounting, `pivot_root`, `chroot`, `setns`, module loading, `reboot`, raw sockets,
//!   `ptrace` of host processes, changing ids and the like need capabilities Python does not
//!   have (in any namespace: no nested user namespace can be made) or name things it cannot
//!   see. What stays reachable is what any unprivileged process may call: files in its own
//!   root, memory, processes and signals within its budget and PID namespace, sockets in a
//!   namespace with no network, and the kernel's own surface for unprivileged users (e.g.
//!   `io_uring`, `bpf`, `perf_event_open`, `userfaultfd`, `keyctl`), which the host restricts
//!   with its sysctls (`kernel.io_uring_disabled`, `kernel.unprivileged_bpf_disabled`,
//!   `kernel.perf_event_paranoid`, `vm.unprivileged_userfaultfd`). A kernel bug there is the
//!   remaining risk, the same as for any unprivileged local user.
//!
//! Every step runs under `set -e` before Python starts and prints a marker only once all
//! succeeded; without the marker the call fails with the setup's error (no `unshare`, user
//! namespaces disabled, a `/proc` that cannot be mounted, ...): the code never runs
//! unsandboxed. Building the tool runs one probe call, so a machine where this cannot work is
//! reported before any model calls the tool.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::python_sandbox::budget::{self, SETUP_PROCESSES};
pub use super::python_sandbox::budget::{Budget, Cgroups};
use super::python_sandbox::{READY, SCRATCH, Sandbox};
use super::{Tool, ToolError};
use crate::backend::ToolSpec;

/// Longer code is refused: a program the model writes has no need to be longer, and the model
/// is told so rather than the call taking long to read it.
pub const MAX_CODE_BYTES: usize = 100_000;

/// Limits of the `python` tool.
#[derive(Debug, Clone)]
pub struct PythonConfig {
    /// The interpreter; resolved once to the real executable (a pyenv shim needs its environment).
    pub python: PathBuf,
    /// Wall-clock limit of one call; the CPU-time limit is this rounded up plus one second.
    pub timeout: Duration,
    /// Memory in MiB: of all the call's processes together (its cgroup's `memory.max`) where a
    /// cgroup can be made, and always the address space of each process (RLIMIT_AS). Without a
    /// cgroup only the latter holds, so a call may hold up to `max_processes` × this.
    pub memory_mb: u64,
    /// Output (stdout and stderr together) kept; the process is killed when it writes more.
    pub output_bytes: usize,
    /// Processes (and threads) at once, Python included (RLIMIT_NPROC).
    pub max_processes: u32,
    /// Largest file Python may write, in MiB (RLIMIT_FSIZE).
    pub file_mb: u64,
    /// Size of the scratch folder (a tmpfs), in MiB.
    pub scratch_mb: u64,
    /// Give each call its own cgroup where one can be made ([`Budget`]); `false` keeps the
    /// per-process limits only.
    pub cgroup: bool,
}

impl Default for PythonConfig {
    fn default() -> Self {
        Self {
            python: "python3".into(),
            timeout: Duration::from_secs(10),
            memory_mb: 512,
            output_bytes: 16 * 1024,
            max_processes: 64,
            file_mb: 16,
            scratch_mb: 64,
            cgroup: true,
        }
    }
}

/// The `python` tool.
pub struct Python {
    spec: ToolSpec,
    config: PythonConfig,
    sandbox: Sandbox,
    budget: Budget,
}

/// What one run printed and how it ended.
#[derive(Debug)]
struct Run {
    output: Vec<u8>,
    cut: bool,
    status: ExitStatus,
    /// Processes the kernel killed at the call's memory budget (its cgroup).
    oom_kills: u64,
    /// The call's memory budget in MiB, when it has one.
    budget_mb: Option<u64>,
}

fn failed(message: impl Into<String>) -> ToolError {
    ToolError::Failed {
        tool: "python".into(),
        message: message.into(),
    }
}

impl Python {
    /// Finds the interpreter and runs a first sandboxed call, so a machine where the sandbox
    /// cannot be set up is reported here, before any model calls the tool.
    pub async fn new(mut config: PythonConfig) -> Result<Self, ToolError> {
        let sandbox = Sandbox::resolve(&config.python).await.map_err(failed)?;
        config.python = sandbox.executable.clone();
        let budget = if config.cgroup {
            budget::find()
        } else {
            Budget::PerProcess("turned off in the configuration".into())
        };
        let memory = match &budget {
            Budget::Cgroup(_) => format!("{} MiB memory in all", config.memory_mb),
            Budget::PerProcess(why) => {
                // Said once per tool, where the operator sees it: the host is less protected.
                eprintln!(
                    "gym: python tool: {why}; memory is limited per process only ({} MiB of \
                     address space each), so one call's {} processes may hold up to {} MiB",
                    config.memory_mb,
                    config.max_processes,
                    config.memory_mb * u64::from(config.max_processes)
                );
                format!("{} MiB memory per process", config.memory_mb)
            }
        };
        let spec = ToolSpec {
            name: "python".into(),
            description: format!(
                "Runs Python 3 code and returns what it prints (stdout and stderr). Use print() \
                 to see values. Only the standard library and installed packages are there: no \
                 network, no other files; files can be written only in the current folder \
                 ({SCRATCH}, {} MiB), which is empty and discarded after the call; limits: \
                 {:.0} s, {memory}, {} processes, {} MiB per file, {} bytes of output.",
                config.scratch_mb,
                config.timeout.as_secs_f64(),
                config.max_processes,
                config.file_mb,
                config.output_bytes
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "A complete Python 3 program, e.g. print(sum(range(10)))"}
                },
                "required": ["code"],
                "additionalProperties": false
            }),
        };
        let tool = Self {
            spec,
            config,
            sandbox,
            budget,
        };
        let probe = tool.execute("print(6 * 7)").await?;
        if String::from_utf8_lossy(&probe.output).trim() != "42" || !probe.status.success() {
            return Err(failed(format!(
                "the sandbox check did not print 42: {}",
                describe(&probe)
            )));
        }
        Ok(tool)
    }

    pub fn config(&self) -> &PythonConfig {
        &self.config
    }

    /// How one call's memory and processes are bounded here.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The host paths the sandbox shows (read-only, at the same paths), besides its own `/proc`
    /// and scratch folder.
    pub fn shown_paths(&self) -> Vec<PathBuf> {
        self.sandbox.shown().map(PathBuf::from).collect()
    }

    /// Runs `code` in the sandbox; a normal exit gives its output, anything else an error.
    pub async fn run(&self, code: &str) -> Result<String, ToolError> {
        if code.len() > MAX_CODE_BYTES {
            return Err(ToolError::InvalidArguments {
                tool: "python".into(),
                message: format!(
                    "the code is {} bytes; the limit is {MAX_CODE_BYTES}",
                    code.len()
                ),
            });
        }
        let run = self.execute(code).await?;
        let text = describe(&run);
        if run.status.success() || run.cut {
            Ok(text)
        } else {
            Err(failed(text))
        }
    }

    async fn execute(&self, code: &str) -> Result<Run, ToolError> {
        // An empty host folder the sandbox's root is mounted on (in its own mount namespace).
        let root = tempfile::Builder::new()
            .prefix("gym-python-")
            .tempdir()
            .map_err(|e| {
                failed(format!(
                    "cannot create a folder for the sandbox's root: {e}"
                ))
            })?;
        // Declared before the child: dropped after it, killing what is left and removing it.
        let cgroup = match &self.budget {
            Budget::Cgroup(cgroups) => Some(
                cgroups
                    .create(
                        self.config.memory_mb * 1024 * 1024,
                        self.config.max_processes + SETUP_PROCESSES,
                    )
                    .map_err(|e| failed(format!("cannot set up the call's cgroup: {e}")))?,
            ),
            Budget::PerProcess(_) => None,
        };
        let procs = cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default();
        let mut command = self.sandbox.command(root.path(), &self.config, &procs);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| {
            failed(format!(
                "cannot start the sandbox (util-linux `unshare` is needed): {e}"
            ))
        })?;
        // Armed until the child is reaped: a dropped call (the toolbox's timeout) or our own
        // timeout kills every process of the group, not only `unshare`.
        let group = GroupKiller(child.id());
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let limit = self.config.output_bytes;
        let work = async {
            // Python reads the whole program, up to end of file, before running it. A sandbox
            // that failed before reading it closes the pipe; its error is what counts then.
            let write_code = async move {
                let _ = stdin.write_all(code.as_bytes()).await;
                drop(stdin);
            };
            // `unshare` keeps the stderr pipe open until Python ends, so a program that is cut
            // off must be killed while stderr is still being read.
            let read_output = async {
                let out = read_at_most(&mut stdout, limit).await;
                if matches!(out, Ok((_, true))) {
                    group.kill();
                }
                out
            };
            let (out, setup, ()) = tokio::join!(
                read_output,
                read_at_most(&mut stderr, 64 * 1024),
                write_code
            );
            let (output, cut) = out.map_err(|e| failed(format!("reading the output: {e}")))?;
            let status = child
                .wait()
                .await
                .map_err(|e| failed(format!("waiting for Python: {e}")))?;
            let setup = setup.map(|(bytes, _)| bytes).unwrap_or_default();
            Ok::<_, ToolError>((output, cut, status, setup))
        };
        let (output, cut, status, setup) =
            match tokio::time::timeout(self.config.timeout, work).await {
                Ok(result) => result?,
                Err(_) => {
                    group.kill();
                    return Err(ToolError::TimedOut {
                        tool: "python".into(),
                        seconds: self.config.timeout.as_secs_f64(),
                    });
                }
            };
        group.disarm();
        let setup = String::from_utf8_lossy(&setup);
        if !setup.contains(READY) {
            return Err(failed(format!(
                "the sandbox could not be set up, so the code was not run (it needs util-linux \
                 `unshare`, `mount`, `pivot_root`, `setpriv` and `prlimit`, unprivileged user, \
                 mount, network, PID, IPC and cgroup namespaces, a /proc that can be mounted \
                 again with the namespace limits in /proc/sys/user, and, where the tool found \
                 one, the call's cgroup to be joined; \
                 {status}): {}",
                setup.trim()
            )));
        }
        Ok(Run {
            output,
            cut,
            status,
            oom_kills: cgroup.as_ref().map_or(0, |c| c.oom_kills()),
            budget_mb: cgroup.is_some().then_some(self.config.memory_mb),
        })
    }
}

/// Reads until end of file or `limit` bytes; `true` when there was more.
async fn read_at_most(
    reader: &mut (impl AsyncRead + Unpin),
    limit: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok((kept, false));
        }
        let room = limit - kept.len();
        if n > room {
            kept.extend_from_slice(&chunk[..room]);
            return Ok((kept, true));
        }
        kept.extend_from_slice(&chunk[..n]);
    }
}

/// The output, then what the model should know about how the run ended.
fn describe(run: &Run) -> String {
    use std::os::unix::process::ExitStatusExt;
    let mut text = String::from_utf8_lossy(&run.output).into_owned();
    let empty = text.is_empty();
    let mut note = |line: String| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&line);
    };
    if run.oom_kills > 0 {
        note(format!(
            "[memory: the call reached its budget of {} MiB for all its processes; the kernel \
             killed {} process{}]",
            run.budget_mb.unwrap_or_default(),
            run.oom_kills,
            if run.oom_kills == 1 { "" } else { "es" }
        ));
    }
    if run.cut {
        note(format!(
            "[output cut at {} bytes; the program was stopped]",
            run.output.len()
        ));
    } else if let Some(code) = run.status.code().filter(|&c| c != 0) {
        note(format!("[exit status {code}]"));
    } else if let Some(signal) = run.status.signal() {
        let why = match signal {
            9 => " (memory, CPU time or output limit)",
            24 => " (CPU time limit)",
            _ => "",
        };
        note(format!("[killed by signal {signal}{why}]"));
    } else if empty {
        note("(no output; print() what you want to see)".into());
    }
    text
}

/// Kills a process group on drop unless disarmed.
struct GroupKiller(Option<u32>);

impl GroupKiller {
    fn kill(&self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // The group may already be gone; there is nothing to do then.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// After the leader is reaped its id may be reused, so the group must not be signalled again.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Tool for Python {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: Value) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin(async move {
            match arguments.get("code") {
                Some(Value::String(code)) => self.run(code).await,
                _ => Err(ToolError::InvalidArguments {
                    tool: "python".into(),
                    message: "expected {\"code\": \"<Python program>\"}".into(),
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn run(output: &str, cut: bool, raw_status: i32) -> Run {
        Run {
            output: output.as_bytes().to_vec(),
            cut,
            status: ExitStatus::from_raw(raw_status),
            oom_kills: 0,
            budget_mb: None,
        }
    }

    #[test]
    fn the_model_is_told_how_a_run_ended() {
        assert_eq!(describe(&run("42\n", false, 0)), "42\n");
        assert_eq!(
            describe(&run("", false, 0)),
            "(no output; print() what you want to see)"
        );
        assert_eq!(
            describe(&run("Traceback", false, 1 << 8)),
            "Traceback\n[exit status 1]"
        );
        assert_eq!(
            describe(&run("xx", true, 9)),
            "xx\n[output cut at 2 bytes; the program was stopped]"
        );
        assert_eq!(
            describe(&run("", false, 24)),
            "[killed by signal 24 (CPU time limit)]"
        );
        let budget = Run {
            oom_kills: 2,
            budget_mb: Some(256),
            ..run("3 5\n", false, 0)
        };
        assert_eq!(
            describe(&budget),
            "3 5\n[memory: the call reached its budget of 256 MiB for all its processes; the \
             kernel killed 2 processes]"
        );
    }

    #[tokio::test]
    async fn output_is_read_up_to_the_limit() {
        let mut text: &[u8] = &[7u8; 20_000];
        let (kept, cut) = read_at_most(&mut text, 10_000).await.unwrap();
        assert_eq!((kept.len(), cut), (10_000, true));
        let mut short: &[u8] = b"abc";
        assert_eq!(
            read_at_most(&mut short, 3).await.unwrap(),
            (b"abc".to_vec(), false)
        );
    }
}
