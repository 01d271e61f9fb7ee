//! `gym gov …` on the local ledger through the real binary: the whole flow, the refusals, and
//! a ledger that survives writers killed with SIGKILL mid-write.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Scratch;

mod tamper;

/// A scratch directory with three voter keys (weights 40, 30, 30), a non-voter `mallory`, a
/// library `arith` at version 2 and a ledger with a 50% quorum made by `admin` (no voter).
pub struct Governed {
    pub scratch: Scratch,
    pub keys: Vec<PathBuf>,
    pub addresses: Vec<String>,
}

impl Governed {
    /// Keys made by `gym gov keygen`.
    pub fn new(voting_period: &str) -> Self {
        Self::new_with_keys(voting_period, &[])
    }

    /// The first voters' keys given (hex), the others made by `gym gov keygen`.
    pub fn new_with_keys(voting_period: &str, given: &[String]) -> Self {
        let scratch = Scratch::new();
        let mut keys = Vec::new();
        let mut addresses = Vec::new();
        let names = ["alice", "bob", "carol", "mallory", "admin"];
        for (index, name) in names.into_iter().enumerate() {
            let path = scratch.dir.path().join(format!("{name}.key"));
            let address = if let Some(key) = given.get(index) {
                std::fs::write(&path, key).unwrap();
                let signer: alloy::signers::local::PrivateKeySigner = key.parse().unwrap();
                signer.address().to_string()
            } else {
                scratch.ok(&["gov", "keygen", "--out", path.to_str().unwrap()])
            };
            keys.push(path);
            addresses.push(address.trim().to_owned());
        }
        let voters: String = addresses[..3]
            .iter()
            .zip([40, 30, 30])
            .map(|(address, weight)| {
                format!("[[voter]]\naddress = \"{address}\"\nweight = {weight}\n\n")
            })
            .collect();
        std::fs::write(scratch.dir.path().join("voters.toml"), voters).unwrap();
        scratch.ok(&["library", "init", "arith"]);
        scratch.ok(&[
            "library",
            "add",
            "arith",
            "--text",
            "When a problem says each, multiply first.",
        ]);
        scratch.ok(&[
            "library",
            "add",
            "arith",
            "--text",
            "When units differ, convert before adding.",
        ]);
        scratch.ok(&[
            "gov",
            "init",
            "--voters",
            "voters.toml",
            "--voting-period",
            voting_period,
            "--key-file",
            "admin.key",
        ]);
        Self {
            scratch,
            keys,
            addresses,
        }
    }

    pub fn key(&self, voter: usize) -> &str {
        self.keys[voter].to_str().unwrap()
    }

    pub fn vote(&self, id: &str, voter: usize, choice: &str) -> (i32, String, String) {
        self.scratch
            .gym(&["gov", "vote", id, choice, "--key-file", self.key(voter)])
    }

    /// `gym gov execute ID` signed with key `who` (0-2 voters, 3 mallory, 4 the initializer).
    pub fn execute(&self, id: &str, who: usize) -> (i32, String, String) {
        self.scratch
            .gym(&["gov", "execute", id, "--key-file", self.key(who)])
    }
}

#[test]
fn propose_review_vote_below_and_above_66_percent_then_execute() {
    let g = Governed::new("1h");
    let s = &g.scratch;
    let out = s.ok(&[
        "gov",
        "propose",
        "arith",
        "--title",
        "Two arithmetic habits",
        "--rationale",
        "They help on the word problems.",
    ]);
    assert!(
        out.starts_with("Proposal 1: Two arithmetic habits (2 ops, v0 → v2"),
        "{out}"
    );

    let review = s.ok(&["gov", "show", "1"]);
    for expected in [
        "Proposal 1: Two arithmetic habits",
        "library `arith` v0 (000000000000) → v2",
        "by tester; active",
        "votes: yes 0 / no 0 of 100",
        "2 added, 0 updated, 0 deleted",
        "+ E0001 [general] (0.50) When a problem says each, multiply first.",
        "v1 add by manual by tester",
        "injected 0 times, helpful 0, harmful 0",
    ] {
        assert!(
            review.contains(expected),
            "missing {expected:?} in\n{review}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&s.ok(&["gov", "show", "1", "--json"])).unwrap();
    assert_eq!(json["items"][1]["id"], "E0002");
    assert_eq!(json["items"][1]["history"][0]["version"], 2);

    let (code, out, _) = g.vote("1", 0, "yes");
    assert_eq!(code, 0);
    assert!(
        out.contains("weight 40) on proposal 1: yes 40 / no 0 of 100"),
        "{out}"
    );
    let (code, out, _) = g.vote("1", 1, "no");
    assert_eq!(code, 0, "{out}");
    // 40 of 70 cast is 57%: below 66%, and voting is still open.
    let (code, _, error) = g.execute("1", 0);
    assert_ne!(code, 0);
    assert!(error.contains("proposal 1 is not accepted yet"), "{error}");
    let (code, out, _) = g.vote("1", 2, "yes");
    assert_eq!(code, 0);
    assert!(out.contains("yes 70 / no 30 of 100 (70.0% yes)"), "{out}");
    let error = s.fails(&["gov", "execute", "1"]);
    assert!(error.contains("execute needs --key-file"), "{error}");
    let (code, out, error) = g.execute("1", 1);
    assert_eq!(code, 0, "{error}");
    assert!(
        out.contains(&format!(
            "Executed proposal 1, signed by {}: the governed head of `arith` is now version 2",
            g.addresses[1]
        )),
        "{out}"
    );
    let (code, _, error) = g.execute("1", 0);
    assert_ne!(code, 0);
    assert!(error.contains("already executed"), "{error}");

    // The working head runs ahead; the next proposal starts from the governed version.
    s.ok(&[
        "library",
        "delete",
        "arith",
        "E0001",
        "--reason",
        "too narrow",
    ]);
    let out = s.ok(&["gov", "propose", "arith"]);
    assert!(
        out.contains("Proposal 2: arith v2 → v3: 0 added, 0 updated, 1 deleted"),
        "{out}"
    );
    let review = s.ok(&["gov", "show", "2"]);
    assert!(review.contains("- E0001 [general]"), "{review}");
    assert!(review.contains("reason: too narrow"), "{review}");
    let list = s.ok(&["gov", "list"]);
    assert!(list.contains("   2  active"), "{list}");
    assert!(list.contains("   1  executed"), "{list}");
    let out = s.ok(&["gov", "verify", "--initializer", &g.addresses[4]]);
    assert!(
        out.contains("verifies: 7 entries, 2 proposals (1 executed)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("made by {}", g.addresses[4])),
        "{out}"
    );
    assert!(
        out.contains("Lines 7-7 come after the last execution"),
        "{out}"
    );
    let error = s.fails(&["gov", "verify", "--initializer", &g.addresses[0]]);
    assert!(
        error.contains(&format!(
            "the ledger was made by {}, not by {}",
            g.addresses[4], g.addresses[0]
        )),
        "{error}"
    );

    // No key ever reaches the output.
    for key in &g.keys {
        let secret = std::fs::read_to_string(key).unwrap();
        let secret = secret.trim().trim_start_matches("0x");
        assert!(!review.contains(secret) && !list.contains(secret));
    }
}

#[test]
fn double_late_and_non_voter_votes_and_early_execution_are_refused() {
    let g = Governed::new("3s");
    let s = &g.scratch;
    s.ok(&["gov", "propose", "arith"]);
    let (code, _, error) = g.execute("1", 0);
    assert_ne!(code, 0);
    assert!(error.contains("not accepted yet"), "{error}");
    assert_eq!(g.vote("1", 0, "yes").0, 0);
    let (code, _, error) = g.vote("1", 0, "no");
    assert_ne!(code, 0);
    assert!(error.contains("already voted yes on proposal 1"), "{error}");
    let (code, _, error) = g.vote("1", 3, "yes");
    assert_ne!(code, 0);
    assert!(
        error.contains(&format!("{} is not a voter", g.addresses[3])),
        "{error}"
    );
    let (code, _, error) = g.vote("7", 1, "yes");
    assert_ne!(code, 0);
    assert!(error.contains("no proposal 7"), "{error}");
    std::thread::sleep(Duration::from_millis(3_200));
    let (code, _, error) = g.vote("1", 1, "yes");
    assert_ne!(code, 0);
    assert!(error.contains("voting on proposal 1 closed at"), "{error}");
    // 40 yes alone is 100% of the cast weight but below the 50% quorum.
    let (code, _, error) = g.execute("1", 0);
    assert_ne!(code, 0);
    assert!(error.contains("was not accepted: yes 40, no 0"), "{error}");
    assert!(s.ok(&["gov", "verify"]).contains("3 entries"));
}

#[test]
fn bad_voters_files_and_key_files_are_named() {
    let s = Scratch::new();
    std::fs::write(
        s.dir.path().join("voters.toml"),
        "[[voter]]\naddress = \"0x12\"\nweight = 1\n",
    )
    .unwrap();
    s.ok(&["gov", "keygen", "--out", "admin.key"]);
    let error = s.fails(&[
        "gov",
        "init",
        "--voters",
        "voters.toml",
        "--key",
        "admin.key",
    ]);
    assert!(error.contains("voters.toml:2: field `address`"), "{error}");
    let error = s.fails(&["gov", "init", "--voters", "voters.toml"]);
    assert!(error.contains("--key-file"), "{error}");
    let error = s.fails(&["gov", "list"]);
    assert!(error.contains("gym gov init"), "{error}");
    std::fs::write(s.dir.path().join("bad.key"), "not a key\n").unwrap();
    let error = s.fails(&["gov", "vote", "1", "yes", "--key-file", "bad.key"]);
    assert!(error.contains("bad.key: not a private key"), "{error}");
}

/// A proposal with a 4 MiB rationale is written as one line of about a thousand pages. The
/// test watches the ledger's size and sends SIGKILL the moment the writer's line starts to
/// land, so the kernel cuts the write short. After every kill the ledger must verify, keep
/// every proposal whose writer finished, and the next write must repair the torn tail.
#[test]
fn the_ledger_survives_writers_killed_mid_write() {
    let g = Governed::new("1h");
    let s = &g.scratch;
    let rationale = s.dir.path().join("rationale.txt");
    std::fs::write(&rationale, "long argument. ".repeat((4 << 20) / 15)).unwrap();
    let ledger = s.dir.path().join("governance/ledger.jsonl");
    let size = || std::fs::metadata(&ledger).unwrap().len();
    let (mut completed, mut seen) = (0u64, 0u64);
    let (mut torn_seen, mut kills) = (0u32, 0u32);
    for attempt in 0..12u32 {
        let before = size();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gym"))
            .args([
                "gov",
                "propose",
                "arith",
                "--rationale-file",
                "rationale.txt",
            ])
            .current_dir(s.dir.path())
            .env("GYM_LIBRARY_DIR", s.libraries())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        // A torn tail from the previous kill is truncated first: wait for growth past `before`.
        while size() <= before && child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::hint::spin_loop();
        }
        // SIGKILL: no destructor, no flush, no chance to finish the line.
        let _ = child.kill();
        let status = child.wait().unwrap();
        kills += 1;
        if status.success() {
            completed += 1;
        }
        let out = s.ok(&["gov", "verify"]);
        if out.contains("incomplete last line") {
            torn_seen += 1;
        }
        // Every finished writer's proposal is there, and none that was there is lost (a writer
        // killed after its line landed but before it exited also counts).
        let listed = s.ok(&["gov", "list"]);
        let proposals = listed
            .lines()
            .filter(|line| line.contains("active"))
            .count() as u64;
        assert!(
            proposals >= completed.max(seen) && proposals <= u64::from(attempt) + 1,
            "after kill {attempt}: {proposals} proposals listed, {completed} writers finished, \
             {seen} listed before"
        );
        seen = proposals;
        if torn_seen >= 3 {
            break;
        }
    }
    eprintln!(
        "{kills} writers killed, {torn_seen} mid-write (torn last line), {completed} finished first"
    );
    assert!(torn_seen > 0, "no kill landed mid-write in {kills} tries");
    // The next write repairs the tail, and everything still verifies.
    s.ok(&["gov", "propose", "arith", "--title", "after the crashes"]);
    let out = s.ok(&["gov", "verify"]);
    assert!(!out.contains("incomplete"), "{out}");
    assert!(out.contains(&format!("{} proposals", seen + 1)), "{out}");
    assert_eq!(std::fs::read(&ledger).unwrap().last(), Some(&b'\n'));
}
