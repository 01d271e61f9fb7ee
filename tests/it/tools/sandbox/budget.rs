//! The call's memory and process budget: with a cgroup, all of a call's processes share one
//! memory limit and the kernel kills one of them (not Gym) at it; every process of the call is
//! in that cgroup, and it is gone after the call. Without one (turned off here, as on a machine
//! that has none) the limit is per process, as the docs say.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gym::tools::python::{Budget, Cgroups, PythonConfig};
use gym::tools::{Tool, ToolError};

use super::super::{processes_with, run, tagged, token};
use super::sandbox;

/// The cgroups of this machine, or `None` (with the reason printed) where none is writable.
fn cgroups_or_skip(budget: &Budget, test: &str) -> Option<Cgroups> {
    match budget {
        Budget::Cgroup(cgroups) => Some(cgroups.clone()),
        Budget::PerProcess(why) => {
            eprintln!("{test}: skipped, this machine gives the tool no cgroup: {why}");
            None
        }
    }
}

/// Eight children that each fill `mb` MiB and hold it for two seconds; prints how many were
/// killed by SIGKILL and how many lived to the end.
fn children_holding(mb: u32) -> String {
    format!(
        r#"
import os, time
kids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        block = b"x" * ({mb} << 20)
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
statuses = [os.waitpid(k, 0)[1] for k in kids]
print(sum(1 for s in statuses if os.WIFSIGNALED(s) and os.WTERMSIG(s) == 9),
      sum(1 for s in statuses if os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0))
"#
    )
}

#[tokio::test]
async fn a_calls_processes_share_one_memory_budget() {
    let tool = sandbox(PythonConfig {
        memory_mb: 256,
        max_processes: 16,
        timeout: Duration::from_secs(20),
        ..PythonConfig::default()
    })
    .await;
    let Some(cgroups) = cgroups_or_skip(tool.budget(), "a_calls_processes_share_one_memory_budget")
    else {
        return;
    };
    assert!(cgroups.limits_processes(), "{cgroups}");
    assert!(
        tool.spec().description.contains("256 MiB memory in all"),
        "{}",
        tool.spec().description
    );
    // 8 × 64 MiB is twice the budget, though each child is far below the per-process limit.
    let output = run(&tool, &children_holding(64)).await.unwrap();
    let mut lines = output.lines();
    let counts: Vec<u32> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let (killed, lived) = (counts[0], counts[1]);
    assert_eq!(killed + lived, 8, "{output}");
    // What lived held 64 MiB each at the same time, with Python's own memory besides.
    assert!(lived <= 3 && killed >= 5, "{output}");
    let note = lines.next().unwrap_or_default();
    assert!(
        note.starts_with("[memory: the call reached its budget of 256 MiB for all its processes; the kernel killed "),
        "{output}"
    );
    // The host (this test process) is untouched, and the tool works on.
    assert_eq!(run(&tool, "print(6 * 7)").await, Ok("42\n".into()));
}

#[tokio::test]
async fn every_process_of_a_call_is_in_its_cgroup_and_the_cgroup_goes_with_the_call() {
    let tool = sandbox(PythonConfig {
        timeout: Duration::from_secs(3),
        ..PythonConfig::default()
    })
    .await;
    let Some(cgroups) = cgroups_or_skip(
        tool.budget(),
        "every_process_of_a_call_is_in_its_cgroup_and_the_cgroup_goes_with_the_call",
    ) else {
        return;
    };
    let token = token("cgroup");
    // Three children, one in a session of its own, all sleeping past the timeout.
    let code = tagged(
        &token,
        "import os, time\nfor i in range(3):\n    if os.fork() == 0:\n        if i == 0:\n            os.setsid()\n        break\ntime.sleep(60)\n",
    );
    let call = tokio::spawn(async move { run(&tool, &code).await });
    let started = Instant::now();
    let mut pids = Vec::new();
    while pids.len() < 4 && started.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        pids = processes_with(&token);
    }
    assert_eq!(pids.len(), 4, "{pids:?}");
    // The host sees each process's cgroup by its full path: one `gym-python-…` for all.
    let mut names: Vec<String> = pids
        .iter()
        .flat_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
            text.lines()
                .filter_map(|line| {
                    let path = line.splitn(3, ':').nth(2)?;
                    let name = path.rsplit('/').next()?;
                    name.starts_with("gym-python-").then(|| name.to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!names.is_empty(), "{pids:?} are in no call cgroup");
    names.dedup();
    assert_eq!(names.len(), 1, "{names:?}");
    let folders: Vec<PathBuf> = cgroups.bases().map(|b| b.join(&names[0])).collect();
    assert!(folders.iter().all(|f| f.is_dir()), "{folders:?}");
    for folder in &folders {
        let listed = std::fs::read_to_string(folder.join("cgroup.procs")).unwrap();
        for pid in &pids {
            assert!(listed.lines().any(|l| l == pid), "{pid} not in {folder:?}");
        }
    }

    let result = call.await.unwrap();
    assert!(
        matches!(result, Err(ToolError::TimedOut { .. })),
        "{result:?}"
    );
    let started = Instant::now();
    while folders.iter().any(|f| f.exists()) && started.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        folders.iter().all(|f| !f.exists()),
        "{folders:?} left behind"
    );
    assert_eq!(processes_with(&token), Vec::<String>::new());
}

/// Where there is no cgroup (here: turned off) each process has the whole limit: eight
/// children of 64 MiB all live under a 128 MiB limit, 512 MiB together. This is the fallback the
/// docs and the tool's description state.
#[tokio::test]
async fn without_a_cgroup_the_memory_limit_is_per_process() {
    let tool = sandbox(PythonConfig {
        memory_mb: 128,
        max_processes: 16,
        timeout: Duration::from_secs(20),
        cgroup: false,
        ..PythonConfig::default()
    })
    .await;
    assert!(
        matches!(tool.budget(), Budget::PerProcess(why) if why.contains("turned off")),
        "{:?}",
        tool.budget()
    );
    assert!(
        tool.spec()
            .description
            .contains("128 MiB memory per process"),
        "{}",
        tool.spec().description
    );
    assert_eq!(run(&tool, &children_holding(64)).await, Ok("0 8\n".into()));
}
