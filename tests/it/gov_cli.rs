//! `gym gov …` on the local ledger through the real binary: the whole flow, the refusals, and
//! a ledger that survives writers killed with SIGKILL mid-write.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{KEY_FILTERS, Scratch, redacted};

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

impl Governed {
    /// Runs `test` with the shared CLI redactions, each party's address shown by its name.
    pub fn redacted(&self, test: impl FnOnce()) {
        let names = ["[ALICE]", "[BOB]", "[CAROL]", "[MALLORY]", "[ADMIN]"];
        let names: Vec<(&str, &str)> = self
            .addresses
            .iter()
            .map(String::as_str)
            .zip(names)
            .collect();
        redacted(&self.scratch, &names, &KEY_FILTERS, test);
    }
}

/// Output and error of a command, in one snapshot.
fn shown((code, out, error): (i32, String, String)) -> String {
    format!("exit {code}\n--- stdout\n{out}--- stderr\n{error}")
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
    let review = s.ok(&["gov", "show", "1"]);
    g.redacted(|| {
        insta::assert_snapshot!("propose", out);
        insta::assert_snapshot!("show", review);
    });
    let json: serde_json::Value =
        serde_json::from_str(&s.ok(&["gov", "show", "1", "--json"])).unwrap();
    assert_eq!(json["items"][1]["id"], "E0002");
    assert_eq!(json["items"][1]["history"][0]["version"], 2);

    let yes_alice = g.vote("1", 0, "yes");
    let no_bob = g.vote("1", 1, "no");
    // 40 of 70 cast is 57%: below 66%, and voting is still open.
    let early = g.execute("1", 0);
    let yes_carol = g.vote("1", 2, "yes");
    let keyless = s.gym(&["gov", "execute", "1"]);
    let executed = g.execute("1", 1);
    let again = g.execute("1", 0);
    g.redacted(|| {
        insta::assert_snapshot!("vote_yes_alice", shown(yes_alice));
        insta::assert_snapshot!("vote_no_bob", shown(no_bob));
        insta::assert_snapshot!("execute_below_66", shown(early));
        insta::assert_snapshot!("vote_yes_carol", shown(yes_carol));
        insta::assert_snapshot!("execute_without_key", shown(keyless));
        insta::assert_snapshot!("execute_by_bob", shown(executed));
        insta::assert_snapshot!("execute_again", shown(again));
    });

    // A credit measured before the delete: the review shows the lesson's own effect.
    let mut library = gym::library::Library::open(&s.libraries(), "arith").unwrap();
    let credit = gym::library::Credit {
        method: gym::library::CreditMethod::LeaveOneOut,
        permutations: None,
        pairs: None,
        delta: -0.25,
        low: -0.4,
        high: -0.1,
        queries: 8,
        group_size: 4,
        version: 2,
        measured_at: chrono::Utc::now(),
    };
    let usage = gym::library::Usage {
        credit: Some(credit),
        ..Default::default()
    };
    library
        .record_usage(&[("E0001".parse().unwrap(), usage)])
        .unwrap();
    // The working head runs ahead; the next proposal starts from the governed version.
    s.ok(&[
        "library",
        "delete",
        "arith",
        "E0001",
        "--reason",
        "too narrow",
    ]);
    let second = s.ok(&["gov", "propose", "arith"]);
    let review = s.ok(&["gov", "show", "2"]);
    let list = s.ok(&["gov", "list"]);
    let verified = s.ok(&["gov", "verify", "--initializer", &g.addresses[4]]);
    let wrong_initializer = s.gym(&["gov", "verify", "--initializer", &g.addresses[0]]);
    g.redacted(|| {
        insta::assert_snapshot!("propose_second", second);
        insta::assert_snapshot!("show_second", review);
        insta::assert_snapshot!("list", list);
        insta::assert_snapshot!("verify", verified);
        insta::assert_snapshot!("verify_wrong_initializer", shown(wrong_initializer));
    });

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
    let early = g.execute("1", 0);
    assert_eq!(g.vote("1", 0, "yes").0, 0);
    let double = g.vote("1", 0, "no");
    let non_voter = g.vote("1", 3, "yes");
    let unknown = g.vote("7", 1, "yes");
    std::thread::sleep(Duration::from_millis(3_200));
    let late = g.vote("1", 1, "yes");
    // 40 yes alone is 100% of the cast weight but below the 50% quorum.
    let no_quorum = g.execute("1", 0);
    let verified = s.ok(&["gov", "verify"]);
    g.redacted(|| {
        insta::assert_snapshot!("refused_execute_early", shown(early));
        insta::assert_snapshot!("refused_double_vote", shown(double));
        insta::assert_snapshot!("refused_non_voter", shown(non_voter));
        insta::assert_snapshot!("refused_unknown_proposal", shown(unknown));
        insta::assert_snapshot!("refused_late_vote", shown(late));
        insta::assert_snapshot!("refused_below_quorum", shown(no_quorum));
        insta::assert_snapshot!("verify_after_refusals", verified);
    });
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
    let bad_address = s.gym(&[
        "gov",
        "init",
        "--voters",
        "voters.toml",
        "--key",
        "admin.key",
    ]);
    let no_key = s.gym(&["gov", "init", "--voters", "voters.toml"]);
    let no_ledger = s.gym(&["gov", "list"]);
    std::fs::write(s.dir.path().join("bad.key"), "not a key\n").unwrap();
    let bad_key = s.gym(&["gov", "vote", "1", "yes", "--key-file", "bad.key"]);
    redacted(&s, &[], &KEY_FILTERS, || {
        insta::assert_snapshot!("bad_voters_address", shown(bad_address));
        insta::assert_snapshot!("init_without_key", shown(no_key));
        insta::assert_snapshot!("list_without_ledger", shown(no_ledger));
        insta::assert_snapshot!("vote_with_bad_key_file", shown(bad_key));
    });
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
