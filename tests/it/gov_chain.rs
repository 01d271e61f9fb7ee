//! End to end on a real chain: `anvil` (Foundry, from npm via `scripts/setup-evm`) on
//! 127.0.0.1, the committed contract artifacts deployed by `gym gov deploy`, a library governed
//! locally and then anchored, voted below and above 66%, executed, and checked with
//! `gym library verify --chain`.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::gov_cli::Governed;

/// A running anvil, killed on drop.
pub struct Anvil {
    child: Child,
    pub url: String,
    pub keys: Vec<String>,
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `anvil` where `scripts/setup-evm` installs it, installing it first if missing.
fn anvil_path() -> PathBuf {
    let cache = std::env::var_os("GYM_CACHE_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/gym"),
        PathBuf::from,
    );
    let anvil = cache.join("evm/bin/anvil");
    if !anvil.exists() {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-evm");
        let status = Command::new("bash").arg(&script).status();
        assert!(
            matches!(status, Ok(s) if s.success()) && anvil.exists(),
            "anvil is missing at {} and `scripts/setup-evm` could not install it (it needs node \
             and npm); run `make setup` or `scripts/setup-evm`",
            anvil.display()
        );
    }
    anvil
}

pub fn start_anvil() -> Anvil {
    let mut child = Command::new(anvil_path())
        .args(["--host", "127.0.0.1", "--port", "0", "--accounts", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start anvil");
    let stdout = child.stdout.take().unwrap();
    let mut keys = Vec::new();
    let mut url = None;
    let mut in_keys = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read anvil's output");
        if line.starts_with("Private Keys") {
            in_keys = true;
        } else if in_keys && line.starts_with('(') {
            keys.push(line.split_whitespace().nth(1).unwrap().to_owned());
        } else if line.starts_with("Wallet") || line.starts_with("Chain ID") {
            in_keys = false;
        }
        if let Some(address) = line.strip_prefix("Listening on ") {
            url = Some(format!("http://{}", address.trim()));
            break;
        }
    }
    let url = url.expect("anvil reports where it listens");
    assert_eq!(keys.len(), 4, "anvil printed its 4 dev keys");
    Anvil { child, url, keys }
}

#[test]
fn anvil_deploy_anchor_vote_below_and_above_66_percent_execute_and_verify() {
    let started = Instant::now();
    let anvil = start_anvil();
    // Voters hold anvil's funded dev accounts 1..=3 (40, 30, 30); account 0 deploys.
    let g = Governed::new_with_keys("1h", &anvil.keys[1..]);
    let s = &g.scratch;
    let deployer = s.dir.path().join("deployer.key");
    std::fs::write(&deployer, &anvil.keys[0]).unwrap();
    let deployer = deployer.to_str().unwrap();
    let rpc = anvil.url.as_str();
    // What the user saw, command by command, snapshotted at the end.
    let mut seen: Vec<String> = Vec::new();

    // Govern locally first: the governed head becomes version 2.
    s.ok(&["gov", "propose", "arith"]);
    for voter in 0..3 {
        assert_eq!(g.vote("1", voter, "yes").0, 0);
    }
    let (code, _, error) = g.execute("1", 0);
    assert_eq!(code, 0, "{error}");
    let head = s.ok(&["library", "verify", "arith"]);
    let root = head
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .trim_end_matches('.')
        .to_owned();

    let out = s.ok(&[
        "gov",
        "deploy",
        "--rpc-url",
        rpc,
        "--key-file",
        deployer,
        "--voters",
        "voters.toml",
        "--voting-period",
        "1h",
    ]);
    assert!(out.contains("Deployed on chain 31337"), "{out}");
    seen.push(format!("$ gym gov deploy\n{out}"));

    // Nothing accepted on chain yet.
    let error = s.fails(&["library", "verify", "arith", "--chain", "--rpc-url", rpc]);
    assert!(
        error.contains("chain 31337 accepts version 0 root 0000"),
        "{error}"
    );
    seen.push(format!("$ gym library verify arith --chain\n{error}"));

    let out = s.ok(&[
        "gov",
        "anchor",
        "arith",
        "--rpc-url",
        rpc,
        "--key-file",
        g.key(0),
    ]);
    assert!(
        out.starts_with("Chain proposal 1: `arith` version 2 root"),
        "{out}"
    );
    seen.push(format!("$ gym gov anchor arith\n{out}"));
    let chain_vote = |voter: usize, choice: &str| {
        s.gym(&[
            "gov",
            "vote",
            "1",
            choice,
            "--chain",
            "--rpc-url",
            rpc,
            "--key-file",
            g.key(voter),
        ])
    };
    let execute = || {
        s.gym(&[
            "gov",
            "execute",
            "1",
            "--chain",
            "--rpc-url",
            rpc,
            "--sender-key-file",
            deployer,
        ])
    };
    let (code, out, error) = chain_vote(0, "yes");
    assert_eq!(code, 0, "{error}");
    seen.push(format!("$ gym gov vote 1 yes --chain (alice)\n{out}"));
    let (code, out, error) = chain_vote(1, "no");
    assert_eq!(code, 0, "{error}");
    seen.push(format!("$ gym gov vote 1 no --chain (bob)\n{out}"));
    // 40 yes, 30 no: 57% of the cast weight, voting open, not decided: refused by the contract.
    let (code, _, error) = execute();
    assert_ne!(code, 0);
    assert!(
        error.contains("execute was refused by the contract: VotingOpen"),
        "{error}"
    );
    seen.push(format!("$ gym gov execute 1 --chain\n{error}"));
    // A second vote by the same account is refused too.
    let (code, _, error) = chain_vote(1, "yes");
    assert_ne!(code, 0);
    assert!(error.contains("AlreadyVoted"), "{error}");
    seen.push(format!("$ gym gov vote 1 yes --chain (bob again)\n{error}"));
    let (code, out, error) = chain_vote(2, "yes");
    assert_eq!(code, 0, "{error}");
    seen.push(format!("$ gym gov vote 1 yes --chain (carol)\n{out}"));
    let show = s.ok(&["gov", "show", "1", "--chain", "--rpc-url", rpc]);
    assert!(
        show.contains("(succeeded)") && show.contains("yes 70 / no 30 of 100"),
        "{show}"
    );
    seen.push(format!("$ gym gov show 1 --chain\n{show}"));
    // 70 of 100: decided; anyone may execute.
    let (code, out, error) = execute();
    assert_eq!(code, 0, "{error}");
    seen.push(format!("$ gym gov execute 1 --chain\n{out}"));
    assert!(
        out.contains(&format!("accepted root 0x{root} at version 2")),
        "{out}"
    );

    let out = s.ok(&["gov", "root", "arith", "--rpc-url", rpc]);
    assert!(
        out.contains(&format!("accepted root {root} at version 2")),
        "{out}"
    );
    seen.push(format!("$ gym gov root arith\n{out}"));
    let out = s.ok(&["library", "verify", "arith", "--chain", "--rpc-url", rpc]);
    assert!(
        out.contains(&format!(
            "version 2, root {root}) is the root accepted on chain 31337"
        )),
        "{out}"
    );
    seen.push(format!("$ gym library verify arith --chain\n{out}"));

    // The working head runs ahead; the chain still pins the governed version.
    s.ok(&[
        "library",
        "add",
        "arith",
        "--text",
        "When in doubt, estimate first.",
    ]);
    let out = s.ok(&["library", "verify", "arith", "--chain", "--rpc-url", rpc]);
    seen.push(format!(
        "$ gym library verify arith --chain (after an unanchored commit)\n{out}"
    ));
    // The voting deadline is a unix time an hour from now.
    let deadline = regex::Regex::new(r"deadline:? \d{10}").unwrap();
    let transcript = deadline
        .replace_all(&seen.join("\n"), "deadline [UNIX TIME]")
        .into_owned();
    g.redacted(|| insta::assert_snapshot!("anvil_transcript", transcript));
    eprintln!("anvil end to end: {:.1} s", started.elapsed().as_secs_f64());
}
