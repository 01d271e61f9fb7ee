//! `gym.toml` is not trusted: every config file read is announced on stderr, and a setting in it
//! that would run a program (a `command:` reward, an MCP server command) is refused unless the
//! command line says `--trust-config`. The attacks: a config file in the working directory whose
//! reward command leaves a marker file, and one that smuggles the setting in a quoted key.

use std::path::Path;

use crate::common::Scratch;
use crate::fake_openai::FakeOpenAi;

/// `gym grpo` on a tiny dataset against `server` (policy and distiller), in `scratch`; returns
/// (exit code, stdout, stderr).
fn grpo(
    scratch: &Scratch,
    server: &FakeOpenAi,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    scratch.write_sevens(2);
    let both_roles = server.both_roles_flags();
    let mut args = vec![
        "grpo",
        "--dataset",
        "sevens.jsonl",
        "--batch-size",
        "2",
        "--group-size",
        "2",
        "--epochs",
        "1",
        "--validate",
        "0",
        "--no-eval",
    ];
    args.extend(both_roles.iter().map(String::as_str));
    args.extend(extra);
    let mut command = scratch.model_command(&args);
    command.env_remove("GYM_REWARD").env_remove("GYM_TOOLS");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A reward command that leaves `marker` behind and scores every answer 1.
fn marking_reward(marker: &Path) -> String {
    format!("command:touch '{}' && echo 1", marker.display())
}

#[test]
fn a_config_file_runs_commands_only_with_trust_config() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    let marker = scratch.dir.path().join("ran.marker");
    let config = scratch.dir.path().join("gym.toml");
    std::fs::write(&config, format!("reward = {:?}\n", marking_reward(&marker))).unwrap();

    // Untrusted: refused before anything runs, naming the file, the key and the flag.
    let (code, stdout, stderr) = grpo(&scratch, &server, &[], &[]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr.starts_with("using settings from ./gym.toml\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("config ./gym.toml: `reward = ")
            && stderr.contains("would run a program")
            && stderr.contains("--trust-config"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the reward command ran: {stderr}");
    assert_eq!(server.requests(), 0, "nothing was sampled");

    // The same file through --config or GYM_CONFIG is no more trusted.
    let (code, _, stderr) = grpo(&scratch, &server, &["--config", "gym.toml"], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("using settings from gym.toml"), "{stderr}");
    let (code, _, stderr) = grpo(&scratch, &server, &[], &[("GYM_CONFIG", "gym.toml")]);
    assert_eq!(code, 1, "{stderr}");
    assert!(!marker.exists(), "the reward command ran: {stderr}");

    // Trusted: the command reward scores the answers.
    let (code, stdout, stderr) = grpo(&scratch, &server, &["--trust-config"], &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("using settings from ./gym.toml"),
        "{stderr}"
    );
    assert!(marker.exists(), "the trusted reward command ran");
}

/// The same command reward from the environment (or the command line) needs no consent, and a
/// config file without commands is read as before, announced.
#[test]
fn command_settings_outside_a_config_file_need_no_trust() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    let marker = scratch.dir.path().join("env.marker");
    std::fs::write(scratch.dir.path().join("gym.toml"), "group-size = 2\n").unwrap();
    let reward = marking_reward(&marker);
    let (code, stdout, stderr) = grpo(&scratch, &server, &[], &[("GYM_REWARD", &reward)]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("using settings from ./gym.toml"),
        "{stderr}"
    );
    assert!(marker.exists(), "the reward command from GYM_REWARD ran");
}

/// Settings that start a program cannot be smuggled past the check: not in a quoted key that
/// carries its own value, not as an MCP server command, and the file cannot trust itself.
#[test]
fn a_config_file_cannot_smuggle_a_command_past_the_check() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    let marker = scratch.dir.path().join("smuggled.marker");
    let reward = marking_reward(&marker);
    let touch = format!("touch {}", marker.display());
    for (config, expected) in [
        (
            format!("{:?} = true\n", format!("reward={reward}")),
            "is not a flag name",
        ),
        (format!("mcp = {:?}\n", format!("evil={touch}")), "`mcp = "),
        (
            format!("trust-config = true\nreward = {reward:?}\n"),
            "`trust-config` cannot be set in a config file",
        ),
    ] {
        std::fs::write(scratch.dir.path().join("gym.toml"), &config).unwrap();
        let (code, stdout, stderr) = grpo(&scratch, &server, &[], &[]);
        assert_eq!(code, 1, "{config}\n{stdout}\n{stderr}");
        assert!(stderr.contains(expected), "{config}\n{stderr}");
        assert!(!marker.exists(), "{config} ran a command: {stderr}");
    }
    assert_eq!(server.requests(), 0, "nothing was sampled");
}
