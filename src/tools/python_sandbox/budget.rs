//! One memory and process budget per python call: a cgroup made for the call, so that every
//! process it starts counts against one limit (RLIMIT_AS alone is per process: 64 processes of
//! 512 MiB could hold 32 GiB, and the host's OOM killer would then take the largest process,
//! Gym with its model).
//!
//! Found once when the tool is built, from `/proc/self/cgroup` and `/proc/self/mountinfo`:
//!
//! - **cgroup v2**: Gym's own cgroup, or its parent, whose `cgroup.subtree_control` enables
//!   `memory` (and `pids`) for its children. Gym's own cgroup holds processes (Gym's), and the
//!   kernel lets a non-root cgroup that holds processes enable no controllers for its children,
//!   so usually the call's cgroup is a sibling of Gym's, under the parent (counted in the
//!   parent's limits, not in Gym's own). Per call: `memory.max`, `memory.swap.max` = 0,
//!   `pids.max`; on cleanup, `cgroup.kill` where the kernel has it (5.14).
//! - **cgroup v1** (hybrid hosts): a child of Gym's own cgroup in the `memory` hierarchy
//!   (`memory.limit_in_bytes`, and `memory.memsw.limit_in_bytes` where swap is accounted) and in
//!   the `pids` hierarchy (`pids.max`).
//!
//! A place is used only once a probe cgroup was made there with its limits and removed again.
//! The call's first process (a shell, before any namespace) writes its own pid into the
//! cgroup's `cgroup.procs`, then execs the sandbox, so everything the call starts is inside
//! from the start. After the call everything left in it is killed and the cgroup removed.
//! Where no place works (containers often mount cgroups read-only) the tool keeps its
//! per-process limits and says so: see [`Budget::PerProcess`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Processes a call has besides the model's: the `unshare` that waits for Python and, while the
/// root is built, its shell, a pipeline of two and one `mount`.
pub(crate) const SETUP_PROCESSES: u32 = 4;

/// The call cgroups' names: `gym-python-<Gym's pid>-<n>`.
const PREFIX: &str = "gym-python-";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// How the memory and processes of one python call are bounded on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Budget {
    /// A cgroup per call: the memory of all its processes together (the scratch tmpfs included,
    /// no swap), and the number of its processes where the `pids` controller is there.
    Cgroup(Cgroups),
    /// No writable cgroup with a memory controller (why not): the address-space and process
    /// limits are per process only, so one call may hold up to processes × memory in all.
    PerProcess(String),
}

/// Where the calls' cgroups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    places: Vec<Place>,
}

/// One folder the calls' cgroups are made in, and what they limit there.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    base: PathBuf,
    v2: bool,
    memory: bool,
    pids: bool,
}

impl Cgroups {
    /// The folders the calls' cgroups are made in.
    pub fn bases(&self) -> impl Iterator<Item = &Path> {
        self.places.iter().map(|p| p.base.as_path())
    }

    /// The `pids` controller bounds the call's processes (otherwise only RLIMIT_NPROC does).
    pub fn limits_processes(&self) -> bool {
        self.places.iter().any(|p| p.pids)
    }

    /// Makes the cgroup of one call (in each place) with its limits.
    pub(crate) fn create(&self, memory_bytes: u64, processes: u32) -> Result<CallCgroup, String> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut call = CallCgroup { dirs: Vec::new() };
        for place in &self.places {
            let dir = place
                .base
                .join(format!("{PREFIX}{}-{n}", std::process::id()));
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
            // Pushed before the limits: a failed write still removes the folder.
            call.dirs.push((dir.clone(), place.v2));
            let memory = memory_bytes.to_string();
            let mut limits: Vec<(&str, &str)> = Vec::new();
            if place.memory && place.v2 {
                limits.push(("memory.max", &memory));
                if dir.join("memory.swap.max").exists() {
                    limits.push(("memory.swap.max", "0"));
                }
            } else if place.memory {
                limits.push(("memory.limit_in_bytes", &memory));
                // Memory plus swap, so swap adds nothing; it must come after the memory limit.
                if dir.join("memory.memsw.limit_in_bytes").exists() {
                    limits.push(("memory.memsw.limit_in_bytes", &memory));
                }
            }
            let pids = processes.to_string();
            if place.pids {
                limits.push(("pids.max", &pids));
            }
            for (file, value) in limits {
                std::fs::write(dir.join(file), value).map_err(|e| {
                    format!("cannot write {value} to {file} in {}: {e}", dir.display())
                })?;
            }
        }
        Ok(call)
    }
}

impl fmt::Display for Cgroups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, place) in self.places.iter().enumerate() {
            let what = match (place.memory, place.pids) {
                (true, true) => "memory, pids",
                (true, false) => "memory",
                _ => "pids",
            };
            let version = if place.v2 { 2 } else { 1 };
            let sep = if i == 0 { "" } else { "; " };
            write!(
                f,
                "{sep}cgroup v{version} ({what}) in {}",
                place.base.display()
            )?;
        }
        Ok(())
    }
}

/// The cgroup of one call (one folder per hierarchy); dropping it kills what is left in it and
/// removes it.
#[derive(Debug)]
pub(crate) struct CallCgroup {
    /// The folder and whether it is cgroup v2.
    dirs: Vec<(PathBuf, bool)>,
}

impl CallCgroup {
    /// The `cgroup.procs` files the call's first process writes its pid to.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(d, _)| d.join("cgroup.procs"))
            .collect()
    }

    /// Processes the kernel killed because the call reached its memory budget.
    pub(crate) fn oom_kills(&self) -> u64 {
        self.dirs
            .iter()
            .filter_map(|(dir, v2)| {
                let file = if *v2 {
                    "memory.events"
                } else {
                    "memory.oom_control"
                };
                let text = std::fs::read_to_string(dir.join(file)).ok()?;
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
            })
            .sum()
    }

    /// SIGKILL to everything in the cgroup: `cgroup.kill` where there is one, otherwise to
    /// each listed process, again until none is listed (a process may fork meanwhile).
    fn kill(&self) {
        for (dir, v2) in &self.dirs {
            if *v2 && std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                continue;
            }
            for _ in 0..50 {
                let pids = listed(dir);
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    // Gone already is fine.
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Removes what can be removed now; true when nothing is left.
    fn remove(&mut self) -> bool {
        self.dirs
            .retain(|(dir, _)| std::fs::remove_dir(dir).is_err() && dir.exists());
        self.dirs.is_empty()
    }
}

impl Drop for CallCgroup {
    fn drop(&mut self) {
        self.kill();
        if self.remove() {
            return;
        }
        // Killed processes take a moment to leave; retried aside rather than blocking the
        // runtime's thread.
        let mut rest = CallCgroup {
            dirs: std::mem::take(&mut self.dirs),
        };
        std::thread::spawn(move || {
            for _ in 0..500 {
                std::thread::sleep(Duration::from_millis(10));
                rest.kill();
                if rest.remove() {
                    return;
                }
            }
            for (dir, _) in std::mem::take(&mut rest.dirs) {
                eprintln!(
                    "gym: python tool: cannot remove the cgroup {}",
                    dir.display()
                );
            }
        });
    }
}

/// The pids in a cgroup's `cgroup.procs`.
fn listed(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Finds where this process may make the calls' cgroups (see the module docs).
pub(crate) fn find() -> Budget {
    let (Ok(cgroups), Ok(mounts)) = (
        std::fs::read_to_string("/proc/self/cgroup"),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return Budget::PerProcess(
            "/proc/self/cgroup or /proc/self/mountinfo cannot be read".into(),
        );
    };
    let mut why = Vec::new();
    let v2 = candidates_v2(&cgroups, &mounts, &mut why);
    if let Some(place) = v2.into_iter().find(|p| works(p, &mut why)) {
        return Budget::Cgroup(Cgroups {
            places: vec![place],
        });
    }
    let v1: Vec<Place> = candidates_v1(&cgroups, &mounts, &mut why)
        .into_iter()
        .filter(|p| works(p, &mut why))
        .collect();
    if v1.iter().any(|p| p.memory) {
        return Budget::Cgroup(Cgroups { places: v1 });
    }
    if why.is_empty() {
        why.push("no cgroup hierarchy with a memory controller is mounted".into());
    }
    Budget::PerProcess(format!("no writable cgroup: {}", why.join("; ")))
}

/// Probes a place: a cgroup with limits made and removed again. Stale cgroups of Gym processes
/// that are gone (killed before they could clean up) are removed on the way.
fn works(place: &Place, why: &mut Vec<String>) -> bool {
    sweep(&place.base);
    let probe = Cgroups {
        places: vec![place.clone()],
    };
    match probe.create(64 << 20, 8) {
        Ok(call) => {
            drop(call);
            true
        }
        Err(e) => {
            why.push(e);
            false
        }
    }
}

/// Removes `gym-python-<pid>-<n>` cgroups whose Gym process no longer runs.
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, n)) = name.strip_prefix(PREFIX).and_then(|r| r.split_once('-')) else {
            continue;
        };
        if pid.parse::<u32>().is_ok()
            && n.parse::<u64>().is_ok()
            && !Path::new("/proc").join(pid).exists()
        {
            let v2 = entry.path().join("cgroup.kill").exists()
                || entry.path().join("cgroup.events").exists();
            drop(CallCgroup {
                dirs: vec![(entry.path(), v2)],
            });
        }
    }
}

/// One line of `/proc/self/mountinfo` that mounts a cgroup hierarchy.
#[derive(Debug, PartialEq)]
struct Mount {
    /// The cgroup shown at the mount point (`/` unless a sub-cgroup is mounted).
    root: String,
    point: PathBuf,
    v2: bool,
    /// Super options (v1: the controllers of the hierarchy).
    options: Vec<String>,
}

fn cgroup_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (own, fs) = line.split_once(" - ")?;
            let own: Vec<&str> = own.split(' ').collect();
            let fs: Vec<&str> = fs.split(' ').collect();
            let v2 = match *fs.first()? {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                root: unescape(own.get(3)?),
                point: PathBuf::from(unescape(own.get(4)?)),
                v2,
                options: fs.get(2)?.split(',').map(String::from).collect(),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let mut out = Vec::new();
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The folder of cgroup `path` (as `/proc/self/cgroup` gives it) under `mount`, if shown there.
fn folder(mount: &Mount, path: &str) -> Option<PathBuf> {
    let rest = Path::new(path).strip_prefix(&mount.root).ok()?;
    Some(mount.point.join(rest))
}

/// cgroup v2: Gym's own cgroup, then its parent, where `cgroup.subtree_control` enables
/// `memory` for the children.
fn candidates_v2(cgroups: &str, mountinfo: &str, why: &mut Vec<String>) -> Vec<Place> {
    let Some(path) = cgroups.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Vec::new();
    };
    let Some((own, top)) = cgroup_mounts(mountinfo)
        .iter()
        .filter(|m| m.v2)
        .find_map(|m| Some((folder(m, path)?, m.point.clone())))
    else {
        return Vec::new();
    };
    let mut bases = vec![own.clone()];
    if own != top
        && let Some(parent) = own.parent()
    {
        bases.push(parent.to_path_buf());
    }
    bases
        .into_iter()
        .filter_map(|base| {
            let enabled =
                std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
            let has = |c: &str| enabled.split_whitespace().any(|e| e == c);
            if !has("memory") {
                why.push(format!(
                    "{} does not enable memory for its children",
                    base.display()
                ));
                return None;
            }
            Some(Place {
                pids: has("pids"),
                base,
                v2: true,
                memory: true,
            })
        })
        .collect()
}

/// cgroup v1: Gym's own cgroup in the `memory` and in the `pids` hierarchy.
fn candidates_v1(cgroups: &str, mountinfo: &str, why: &mut Vec<String>) -> Vec<Place> {
    let mounts = cgroup_mounts(mountinfo);
    let mut places: Vec<Place> = Vec::new();
    for controller in ["memory", "pids"] {
        let found = cgroups.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, list, path) = (fields.next()?, fields.next()?, fields.next()?);
            list.split(',').any(|c| c == controller).then_some(())?;
            mounts
                .iter()
                .filter(|m| !m.v2 && m.options.iter().any(|o| o == controller))
                .find_map(|m| folder(m, path))
        });
        let Some(base) = found else {
            if controller == "memory" && mounts.iter().any(|m| !m.v2) {
                why.push("no cgroup v1 memory hierarchy holds this process".into());
            }
            continue;
        };
        // Co-mounted controllers share one folder.
        if let Some(place) = places.iter_mut().find(|p| p.base == base) {
            place.pids = true;
            continue;
        }
        places.push(Place {
            base,
            v2: false,
            memory: controller == "memory",
            pids: controller == "pids",
        });
    }
    places
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 /sub /mnt/my\\040cg rw - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn mountinfo_gives_the_cgroup_hierarchies() {
        let mounts = cgroup_mounts(HYBRID);
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[0].point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(mounts[0].options, ["rw", "memory"]);
        assert!(mounts[2].v2 && !mounts[1].v2);
        assert_eq!(mounts[3].point, Path::new("/mnt/my cg"));
        assert_eq!(mounts[3].root, "/sub");
        assert_eq!(
            folder(&mounts[3], "/sub/a/b"),
            Some(PathBuf::from("/mnt/my cg/a/b"))
        );
        assert_eq!(folder(&mounts[3], "/other"), None);
        assert_eq!(
            folder(&mounts[0], "/"),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
    }

    #[test]
    fn v1_places_are_the_own_cgroup_of_each_hierarchy() {
        let cgroups = "9:name=systemd:/\n8:pids:/\n4:memory:/api/abc\n0::/\n";
        let mut why = Vec::new();
        let places = candidates_v1(cgroups, HYBRID, &mut why);
        assert_eq!(
            places,
            [
                Place {
                    base: "/sys/fs/cgroup/memory/api/abc".into(),
                    v2: false,
                    memory: true,
                    pids: false
                },
                Place {
                    base: "/sys/fs/cgroup/pids/".into(),
                    v2: false,
                    memory: false,
                    pids: true
                }
            ]
        );
        let comounted = "1 0 0:1 / /cg rw - cgroup cgroup rw,memory,pids\n";
        let places = candidates_v1("3:memory,pids:/x\n", comounted, &mut why);
        assert_eq!(places.len(), 1);
        assert!(places[0].memory && places[0].pids, "{places:?}");
        assert!(why.is_empty(), "{why:?}");
    }

    #[test]
    fn v2_needs_a_folder_that_enables_memory_for_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path();
        let own = top.join("app.slice/gym.scope");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(
            top.join("app.slice/cgroup.subtree_control"),
            "cpu memory pids\n",
        )
        .unwrap();
        let mountinfo = format!("1 0 0:1 / {} rw - cgroup2 cgroup2 rw\n", top.display());
        let mut why = Vec::new();
        let places = candidates_v2("0::/app.slice/gym.scope\n", &mountinfo, &mut why);
        assert_eq!(
            places,
            [Place {
                base: top.join("app.slice"),
                v2: true,
                memory: true,
                pids: true
            }]
        );
        assert_eq!(why.len(), 1, "the own cgroup enables nothing: {why:?}");
        // The top of the hierarchy has no parent to fall back to.
        let places = candidates_v2("0::/\n", &mountinfo, &mut why);
        assert!(places.is_empty());
    }

    #[test]
    fn unused_and_unusable_hierarchies_give_the_per_process_fallback() {
        let mut why = Vec::new();
        assert!(candidates_v2("0::/\n", "", &mut why).is_empty());
        assert!(candidates_v1("0::/\n", "", &mut why).is_empty());
    }
}
