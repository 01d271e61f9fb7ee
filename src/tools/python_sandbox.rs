//! How the `python` tool's sandbox is built: which host paths it shows (found once, from the
//! interpreter itself), the shell stages that move the call into its cgroup ([`budget`]), build
//! the root and enter it, and the small Python program that closes inherited descriptors before
//! the model's code is read from stdin. See the [`python`](super::python) module docs for what
//! the sandbox sees and why.

pub(super) mod budget;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::python::PythonConfig;

/// System directories shown read-only at their usual paths: the dynamic loader and the shared
/// libraries the interpreter and its extension modules link to, and `/bin/sh` for `subprocess`.
/// Each is bound from its canonical path, so a merged-`/usr` system's `/lib` is `/usr/lib` bound
/// at `/lib`.
const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32"];

/// Character devices Python and common libraries open; nothing else of `/dev` is shown.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Where the scratch tmpfs (the working directory) is mounted inside.
pub(super) const SCRATCH: &str = "/scratch";

/// The host user (`nobody`) the sandbox runs as when Gym runs as the host's root: the kernel
/// does not apply RLIMIT_NPROC to the host's uid 0, so the process limit needs another uid.
const UNPRIVILEGED_ID: u32 = 65534;

/// Run once, on the host, by the interpreter the tool uses: the executable and the directories
/// it loads its standard library and site-packages from. Deliberately not `sys.path`: a `.pth`
/// file (an editable install) can point it into a repository.
const RESOLVE: &str = r#"import json, os, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"executable": sys.executable, "dirs": [
    sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
    os.path.dirname(os.path.realpath(sys.executable)),
    paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"]]}))
"#;

/// Stage 1, in a new mount namespace (as the host's root, or as root of a new user namespace):
/// builds the root on a tmpfs mounted on an empty host folder, then starts stage 2 in new user,
/// mount, network, PID, IPC (no host SysV or POSIX message queues or shared memory) and cgroup
/// namespaces (its own cgroup is its `/`: no host cgroup path is shown), first dropping to
/// `nobody` when it is the host's root.
/// Arguments: root folder, bind list (source and target on alternate lines), stage 2 script,
/// the command prefix that drops privileges (may be empty), then stage 2's arguments. `set -e`:
/// any failed step ends the script before Python starts.
const BUILD_ROOT: &str = r#"set -eu
new=$1; binds=$2; enter=$3; drop=$4; shift 4
mount -t tmpfs -o size=1m,nr_inodes=1024,mode=755,nosuid,nodev gym-root "$new"
printf '%s\n' "$binds" | while IFS= read -r src && IFS= read -r dst; do
  if [ -d "$src" ]; then mkdir -p "$new$dst"; else mkdir -p "$new${dst%/*}"; : > "$new$dst"; fi
  mount --bind "$src" "$new$dst"
  mount -o remount,bind,ro,nosuid "$new$dst"
done
mkdir "$new/proc" "$new/scratch"
mount -o remount,ro,bind "$new"
cd "$new"
exec $drop unshare --user --map-root-user --mount --net --pid --ipc --cgroup --fork --kill-child -- /bin/sh -c "$enter" gym-sandbox "$@"
"#;

/// Stage 0, only with a cgroup: the call's first process, before any namespace, writes its own
/// pid into each `cgroup.procs` given before `--` (the memory and the pids hierarchy of cgroup
/// v1 are two), then execs the rest, so every process of the call starts inside the budget.
const JOIN_CGROUP: &str = r#"set -eu
while [ "$1" != -- ]; do echo $$ > "$1"; shift; done
shift
exec "$@"
"#;

/// Stage 2, PID 1 of the new PID namespace, in the root folder. A fresh proc for this PID
/// namespace is mounted; through it this user namespace's `max_*_namespaces` are set to 0 (no
/// nested user namespace, which would give Python capabilities over new network or mount
/// namespaces: the kernel surface a seccomp filter would otherwise have to close), and it is
/// made read-only so they stay 0. The root is bound onto itself (a mount made in this namespace,
/// so it may become the root), switched to with `pivot_root` and the host's tree detached, the
/// scratch tmpfs mounted; then Python starts with a clean environment, the limits, and no
/// capabilities, runs [`CLOSE_FDS`], which reads the code from stdin. Arguments: address-space
/// bytes, CPU seconds, processes, file-size bytes, scratch bytes, interpreter, [`CLOSE_FDS`].
const ENTER: &str = r#"set -eu
mem=$1; cpu=$2; nproc=$3; fsize=$4; scratch=$5; python=$6; close_fds=$7
mount -t proc -o nosuid,nodev,noexec gym-proc proc
for limit in proc/sys/user/max_*_namespaces; do echo 0 > "$limit"; done
mount -o remount,bind,ro,nosuid,nodev,noexec proc
mount --rbind . "$PWD"
cd "$PWD"
pivot_root . scratch
umount -l /scratch
mount -t tmpfs -o size="$scratch",nr_inodes=16384,mode=700,nosuid,nodev gym-scratch /scratch
cd /scratch
echo gym-sandbox-ready >&2
exec 2>&1
exec env -i PATH=/usr/bin:/bin HOME=/scratch TMPDIR=/scratch LANG=C.UTF-8 \
  prlimit --as="$mem" --cpu="$cpu" --nproc="$nproc" --fsize="$fsize" --core=0 -- \
  setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- \
  "$python" -I -S -c "$close_fds" "$python"
"#;

/// The last step before the model's code, run by the sandboxed interpreter itself (`-S`: no
/// `site`, a few milliseconds): closes every descriptor but 0, 1 and 2 (Rust sets close-on-exec
/// on its own, but a descriptor another library opened without it, or one Gym inherited, would
/// otherwise reach the code; `dash` cannot even name those above 9), then becomes
/// `python -I -`, which reads the whole program from stdin before running it, so the code is on
/// no command line (`ps`) of the host. `closerange` stops at the highest descriptor listed.
const CLOSE_FDS: &str = r#"import os, sys
os.closerange(3, max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1)
os.execv(sys.argv[1], [sys.argv[1], "-I", "-"])
"#;

/// What stage 2 prints to stderr once the sandbox is built, just before Python starts.
pub(super) const READY: &str = "gym-sandbox-ready";

/// One read-only bind mount: the host's `source` shown at `target` inside.
#[derive(Debug, Clone, PartialEq)]
struct Bind {
    source: PathBuf,
    target: PathBuf,
}

/// The sandbox of one interpreter: what it shows and how it is entered.
#[derive(Debug, Clone)]
pub(super) struct Sandbox {
    /// The interpreter's path inside (and outside: shown at the same path).
    pub executable: PathBuf,
    binds: Vec<Bind>,
    /// Gym runs as uid 0: stage 1 needs no user namespace of its own.
    as_root: bool,
    /// Gym runs as the host's uid 0: the sandbox runs as `nobody` ([`UNPRIVILEGED_ID`]).
    drop_to_nobody: bool,
}

impl Sandbox {
    /// Asks `python` where it lives and decides what to show; fails when it cannot be run or
    /// when showing its directories would show the home or working directory.
    pub async fn resolve(python: &Path) -> Result<Self, String> {
        let resolved = Command::new(python)
            .args(["-I", "-c", RESOLVE])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run `{}`: {e}", python.display()))?;
        #[derive(serde::Deserialize)]
        struct Found {
            executable: PathBuf,
            dirs: Vec<PathBuf>,
        }
        let found: Found = serde_json::from_slice(&resolved.stdout)
            .ok()
            .filter(|f: &Found| resolved.status.success() && f.executable.is_absolute())
            .ok_or_else(|| {
                format!(
                    "`{}` did not report its executable and directories: {}",
                    python.display(),
                    String::from_utf8_lossy(&resolved.stderr).trim()
                )
            })?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cwd = std::env::current_dir().ok();
        let guarded: Vec<PathBuf> = [home, cwd]
            .into_iter()
            .flatten()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        let mut sandbox = Self::plan(found.executable, found.dirs, &guarded)?;
        sandbox.as_root = euid_is_root();
        sandbox.drop_to_nobody = sandbox.as_root && uid_0_is_the_hosts();
        Ok(sandbox)
    }

    /// The binds for an interpreter at `executable` with `dirs`: the system directories, the
    /// interpreter's canonical directories not already inside one (outermost first), and the
    /// devices. A directory that is `/` or holds one of `guarded` is refused.
    fn plan(executable: PathBuf, dirs: Vec<PathBuf>, guarded: &[PathBuf]) -> Result<Self, String> {
        let mut binds: Vec<Bind> = SYSTEM_DIRS
            .iter()
            .filter_map(|dir| {
                let source = Path::new(dir).canonicalize().ok()?;
                source.is_dir().then(|| Bind {
                    source,
                    target: dir.into(),
                })
            })
            .collect();
        // The executable as reached through canonical folders, so it exists inside at that
        // path; its own name is kept (a venv's `python` symlink finds `pyvenv.cfg` by it).
        let name = executable
            .file_name()
            .ok_or("the interpreter's path has no file name")?;
        let folder = executable
            .parent()
            .and_then(|p| p.canonicalize().ok())
            .ok_or_else(|| format!("cannot resolve the folder of {}", executable.display()))?;
        let executable = folder.join(name);
        let mut own: Vec<PathBuf> = dirs
            .iter()
            .chain([&folder])
            .filter_map(|dir| dir.canonicalize().ok())
            .filter(|dir| dir.is_dir())
            .collect();
        own.sort_by_key(|dir| dir.components().count());
        for dir in own {
            if dir.parent().is_none() {
                return Err(
                    "the interpreter's folder is /; the sandbox would show the whole file system"
                        .into(),
                );
            }
            if binds.iter().any(|b| dir.starts_with(&b.target)) {
                continue;
            }
            if let Some(inside) = guarded.iter().find(|g| g.starts_with(&dir)) {
                return Err(format!(
                    "the interpreter's folder {} holds {}; the sandbox would show it, so use \
                     an interpreter installed elsewhere",
                    dir.display(),
                    inside.display()
                ));
            }
            binds.push(Bind {
                source: dir.clone(),
                target: dir,
            });
        }
        binds.extend(
            DEVICES
                .iter()
                .filter(|d| Path::new(d).exists())
                .map(|d| Bind {
                    source: d.into(),
                    target: d.into(),
                }),
        );
        if let Some(bad) = binds.iter().find(|b| {
            b.source.as_os_str().as_bytes().contains(&b'\n')
                || b.target.as_os_str().as_bytes().contains(&b'\n')
        }) {
            return Err(format!(
                "{} has a newline in its path",
                bad.source.display()
            ));
        }
        Ok(Self {
            executable,
            binds,
            as_root: false,
            drop_to_nobody: false,
        })
    }

    /// The host paths shown inside, at the same paths (read-only), besides `/proc` and
    /// [`SCRATCH`].
    pub fn shown(&self) -> impl Iterator<Item = &Path> {
        self.binds.iter().map(|b| b.target.as_path())
    }

    /// The command that builds the sandbox in `root` (an empty host folder), first joining the
    /// cgroups of `procs_files` (the call's `cgroup.procs`, if any), and runs the code written to
    /// its stdin.
    pub fn command(&self, root: &Path, config: &PythonConfig, procs_files: &[PathBuf]) -> Command {
        let cpu_seconds = config.timeout.as_secs_f64().ceil() as u64 + 1;
        let mut binds = Vec::new();
        for bind in &self.binds {
            for path in [&bind.source, &bind.target] {
                binds.extend_from_slice(path.as_os_str().as_bytes());
                binds.push(b'\n');
            }
        }
        binds.pop();
        let drop = if self.drop_to_nobody {
            format!("setpriv --reuid={UNPRIVILEGED_ID} --regid={UNPRIVILEGED_ID} --clear-groups --")
        } else {
            String::new()
        };
        let mut command = if procs_files.is_empty() {
            Command::new("unshare")
        } else {
            let mut join = Command::new("/bin/sh");
            join.args(["-c", JOIN_CGROUP, "gym-sandbox"])
                .args(procs_files)
                .args(["--", "unshare"]);
            join
        };
        if !self.as_root {
            command.args(["--user", "--map-root-user"]);
        }
        command
            .args(["--mount", "--propagation", "private", "--"])
            .args(["/bin/sh", "-c", BUILD_ROOT, "gym-sandbox"])
            .arg(root)
            .arg(OsString::from_vec(binds))
            .arg(ENTER)
            .arg(drop)
            .arg((config.memory_mb * 1024 * 1024).to_string())
            .arg(cpu_seconds.to_string())
            .arg(config.max_processes.to_string())
            .arg((config.file_mb * 1024 * 1024).to_string())
            .arg((config.scratch_mb * 1024 * 1024).to_string())
            .arg(&self.executable)
            .arg(CLOSE_FDS)
            .env_clear()
            .env("PATH", search_path())
            .env("LANG", "C.UTF-8");
        command
    }
}

/// The standard folders first (`pivot_root` is in `sbin`, which a user's PATH may lack), then
/// the caller's PATH for `unshare` installed elsewhere.
fn search_path() -> OsString {
    let mut path = OsString::from("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    if let Some(own) = std::env::var_os("PATH") {
        path.push(":");
        path.push(own);
    }
    path
}

/// The effective uid (the second field of `/proc/self/status`'s `Uid:` line) is 0.
fn euid_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some(line.split_whitespace().nth(2)? == "0")
        })
        .unwrap_or(false)
}

/// Uid 0 here is the host's uid 0 (it maps to 0 in `/proc/self/uid_map`), which RLIMIT_NPROC
/// exempts; root inside a container's user namespace is usually another host uid.
fn uid_0_is_the_hosts() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| {
        map.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() == 3 && fields[0] == "0" && fields[1] == "0"
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(sandbox: &Sandbox) -> Vec<String> {
        sandbox.shown().map(|p| p.display().to_string()).collect()
    }

    #[test]
    fn the_interpreters_folders_are_shown_once_outermost_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let prefix = root.join("py");
        std::fs::create_dir_all(prefix.join("lib/python3.11/site-packages")).unwrap();
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        let sandbox = Sandbox::plan(
            prefix.join("bin/python3"),
            vec![
                prefix.join("lib/python3.11"),
                prefix.clone(),
                prefix.join("lib/python3.11/site-packages"),
                root.join("missing"),
                "/usr/lib".into(),
            ],
            &[],
        )
        .unwrap();
        let shown = targets(&sandbox);
        assert_eq!(
            shown
                .iter()
                .filter(|t| t.starts_with(&*root.to_string_lossy()))
                .collect::<Vec<_>>(),
            [&prefix.display().to_string()]
        );
        assert!(shown.contains(&"/usr".to_string()), "{shown:?}");
        assert!(!shown.contains(&"/usr/lib".to_string()), "{shown:?}");
        assert!(shown.contains(&"/dev/null".to_string()), "{shown:?}");
        assert!(
            !shown
                .iter()
                .any(|t| t == "/" || t.starts_with("/etc") || t.starts_with("/home"))
        );
        assert_eq!(sandbox.executable, prefix.join("bin/python3"));
    }

    #[test]
    fn a_folder_holding_the_home_or_working_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join("bin")).unwrap();
        let error = Sandbox::plan(
            home.join("bin/python3"),
            vec![home.clone()],
            std::slice::from_ref(&home),
        )
        .unwrap_err();
        assert!(error.contains("the sandbox would show it"), "{error}");
        let error = Sandbox::plan("/usr/bin/python3".into(), vec!["/".into()], &[]).unwrap_err();
        assert!(error.contains("the whole file system"), "{error}");
    }
}
