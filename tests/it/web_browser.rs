//! The voters' web app (`/gov`) and the library browser (`/libraries`) in a real headless
//! Chromium, driven over WebDriver (`chromedriver`, through `fantoccini`) against a real
//! `gym serve` on a socket: the proposal list, a review's diff text, a vote signed through an
//! injected EIP-1193 wallet whose `personal_sign` is answered by a real key, the tally moving, a
//! pasted `--sign-only` ballot, refusals with the server's reason, an experience whose text is
//! markup shown as text, a library diff, and a proof downloaded by the browser and checked with
//! `gym library verify-proof`. Screenshots at 1280 and 390 px wide go to
//! `$CARGO_TARGET_TMPDIR/web-screenshots/`.
//!
//! Chromium and chromedriver come from `scripts/setup` (Debian's `chromium` and
//! `chromium-driver`). Where neither is installed the tests say so and pass, unless
//! `GYM_REQUIRE_BROWSER` is set, which makes a missing browser a failure.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use gym::gov::{Choice, Governance, read_key_file};
use gym::library::{
    Change, Credit, CreditMethod, Evidence, Library, Provenance, Usage, Validation,
};
use serde_json::{Value, json};

use crate::gov_cli::Governed;

#[cfg(feature = "chain")]
mod anchor;
mod attacks;
mod browser;

use browser::{Browser, WAIT, browser_binaries};

const XSS: &str = "<script>window.pwned=1</script> <img src=x onerror=\"window.pwned=2\"> When output has tags, show them as text.";

/// The governed scratch (voters alice 40, bob 30, carol 30; mallory votes not), proposal 1
/// executed (library `arith` v2 governed), then v3 from a training run (an update with its
/// evidence and validation, and an experience whose text is markup) and v4 a manual delete
/// with a reason, proposed as proposal 2; and `gym serve` on it.
struct Site {
    governed: Governed,
    server: Child,
    base: String,
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn site() -> Site {
    let governed = Governed::new("1h");
    let s = &governed.scratch;
    s.ok(&[
        "gov",
        "propose",
        "arith",
        "--title",
        "Two arithmetic habits",
    ]);
    for voter in [0, 1] {
        let (code, _, err) = governed.vote("1", voter, "yes");
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = governed.execute("1", 0);
    assert_eq!(code, 0, "{err}");
    let mut library = Library::open(&s.libraries(), "arith").unwrap();
    let validation = Validation {
        queries: 8,
        group_size: 4,
        current_mean: 0.5,
        candidate_mean: 0.625,
        delta: 0.125,
        delta_low: 0.031,
        delta_high: 0.219,
        threshold: 0.05,
        accepted: true,
        better: 3,
        worse: 1,
    };
    let run = Provenance::Run {
        run: "r-web".into(),
        epoch: 1,
        step: 2,
        model: "SmolLM2-135M-Instruct".into(),
        prompts_hash: "ab".repeat(32),
        validation: Some(validation),
    };
    let e1 = "E0001".parse().unwrap();
    let update = Change::Update {
        id: e1,
        text: Some("When a problem says each, multiply before adding anything.".into()),
        domain: None,
        confidence: Some(0.8),
        evidence: Evidence {
            query_ids: vec!["q3".into(), "q7".into()],
            group_rewards: vec![1.0, 0.0, 0.5],
        },
    };
    library.commit(&[update, Change::add(XSS)], run).unwrap();
    let delete = Change::Delete {
        id: "E0002".parse().unwrap(),
        reason: Some("Units rarely differ in these problems.".into()),
    };
    library
        .commit(
            &[delete],
            Provenance::Manual {
                author: Some("tester".into()),
            },
        )
        .unwrap();
    let usage = Usage {
        injected: 12,
        helpful: 5,
        harmful: 1,
        credit: Some(Credit {
            method: CreditMethod::LeaveOneOut,
            permutations: None,
            pairs: None,
            delta: 0.125,
            low: 0.031,
            high: 0.219,
            queries: 8,
            group_size: 4,
            version: 3,
            measured_at: chrono::Utc::now(),
        }),
        ..Usage::default()
    };
    library.record_usage(&[(e1, usage)]).unwrap();
    s.ok(&[
        "gov",
        "propose",
        "arith",
        "--title",
        "Sharper multiplication",
        "--rationale",
        "Validated on held-out queries.",
    ]);
    let (server, base) = serve(s, &[]);
    Site {
        governed,
        server,
        base,
    }
}

/// `gym serve` on the scratch's libraries and governance (an upstream that is never called:
/// the pages need no model), with `extra` flags; the process and the base URL.
fn serve(s: &crate::common::Scratch, extra: &[&str]) -> (Child, String) {
    let upstreams = s.dir.path().join("upstreams.toml");
    std::fs::write(
        &upstreams,
        "[[upstream]]\nname = \"unused\"\nbackend = \"openai\"\nbase-url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let gov_dir = s.dir.path().join("governance");
    let mut args = vec![
        "--upstreams",
        upstreams.to_str().unwrap(),
        "--gov-dir",
        gov_dir.to_str().unwrap(),
    ];
    args.extend(extra);
    let (server, url) = s.serve(&args);
    (server, url.trim_end_matches("/v1").to_owned())
}

/// The injected wallet: `eth_requestAccounts` answers `address`; `personal_sign` waits for the
/// test to sign what it was asked (see [`sign_pending`]).
const WALLET: &str = r#"
window.__wallet = { pending: null, methods: [] };
window.ethereum = {
  request(args) {
    window.__wallet.methods.push(args.method);
    if (args.method === "eth_requestAccounts") return Promise.resolve([window.__walletAddress.toLowerCase()]);
    if (args.method === "personal_sign") {
      return new Promise((resolve, reject) => { window.__wallet.pending = { params: args.params, resolve, reject }; });
    }
    return Promise.reject(new Error("unsupported method " + args.method));
  },
};
window.__walletAddress = arguments[0];
"#;

/// Waits for the page's `personal_sign` request, checks it asks `key` to sign `expected`
/// (hex of the UTF-8 message, as EIP-1193 wallets receive it), signs it and answers.
async fn sign_pending(browser: &Browser, key: &Path, expected: &str) {
    let params = browser
        .client()
        .execute_async(
            "const done = arguments[arguments.length - 1];
             const poll = () => { const p = window.__wallet.pending; if (p) done(p.params); else setTimeout(poll, 50); };
             poll();",
            vec![],
        )
        .await
        .unwrap();
    let signer = read_key_file(key).unwrap();
    let hex_message = params[0].as_str().unwrap();
    let message = String::from_utf8(hex::decode(hex_message.trim_start_matches("0x")).unwrap())
        .expect("the message is UTF-8");
    assert_eq!(
        message, expected,
        "the wallet is asked to sign the CLI's message"
    );
    assert_eq!(
        params[1].as_str().unwrap().to_lowercase(),
        signer.address().to_string().to_lowercase()
    );
    let signature = gym::gov::vote::sign_message(&signer, &message).unwrap();
    browser
        .script(
            "const p = window.__wallet.pending; window.__wallet.pending = null; p.resolve(arguments[0]);",
            vec![json!(signature)],
        )
        .await;
}

async fn wallet_vote(browser: &Browser, key: &Path, address: &str, choice: &str, message: &str) {
    browser.script(WALLET, vec![json!(address)]).await;
    // By keyboard: focus the button and press Enter.
    browser
        .script(
            "document.getElementById(arguments[0]).focus();",
            vec![json!(format!("vote-{choice}"))],
        )
        .await;
    let focused = browser.client().active_element().await.unwrap();
    assert_eq!(
        focused.attr("id").await.unwrap().as_deref(),
        Some(format!("vote-{choice}").as_str())
    );
    focused.send_keys("\u{E007}").await.unwrap();
    sign_pending(browser, key, message).await;
}

async fn paste_ballot(browser: &Browser, ballot: &str) {
    let area = browser.client().find(Locator::Id("ballot")).await.unwrap();
    area.clear().await.unwrap();
    area.send_keys(ballot).await.unwrap();
    browser
        .client()
        .find(Locator::Id("submit-ballot"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voters_review_a_proposal_and_vote_with_a_wallet_and_a_pasted_ballot_in_chromium() {
    let started = Instant::now();
    if browser_binaries().is_none() {
        return;
    }
    let site = tokio::task::spawn_blocking(site).await.unwrap();
    let g = &site.governed;
    let Some(browser) = Browser::start(g.scratch.dir.path()).await else {
        return;
    };

    // The list: both proposals, their versions, status and tally.
    browser.goto(&format!("{}/gov", site.base)).await;
    let row = browser
        .text_with("#proposal-2", "Sharper multiplication")
        .await;
    for expected in [
        "arith",
        "v2 → v4",
        "open",
        "yes 0 · no 0",
        "quorum 50 not reached",
    ] {
        assert!(row.contains(expected), "{expected:?} in {row}");
    }
    let row = browser.text_with("#proposal-1", "executed").await;
    assert!(row.contains("v0 → v2") && row.contains("yes 70"), "{row}");
    browser.screenshot("gov-list", 1280, None).await;
    browser.screenshot("gov-list", 390, None).await;

    // The review, reached by keyboard-focusable link.
    browser
        .client()
        .find(Locator::Css("#proposal-2 a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let update = browser.text_with("#item-E0001", "updated").await;
    for expected in [
        "When a problem says each, multiply first.",
        "When a problem says each, multiply before adding anything.",
        "run r-web epoch 1 step 2",
        "queries q3, q7",
        "group rewards 1.00 0.00 0.50",
        "injected 12 times; helpful in 5, harmful in 1",
        "Measured credit: Δ mean reward +0.125 [+0.031, +0.219] on 8 queries × 4 at v3 (leave-one-out)",
        "it helps beyond its interval",
        "passed on 8 queries × 4",
    ] {
        assert!(update.contains(expected), "{expected:?} in {update}");
    }
    let removed = browser.script(
        "return [...document.querySelectorAll('#item-E0001 del')].map(e => e.textContent).concat(['|'], [...document.querySelectorAll('#item-E0001 ins')].map(e => e.textContent));",
        vec![],
    ).await;
    assert_eq!(removed, json!(["first.", "|", "before adding anything."]));
    let deleted = browser.text_with("#item-E0002", "deleted").await;
    assert!(
        deleted.contains("Reason: Units rarely differ in these problems."),
        "{deleted}"
    );
    assert!(deleted.contains("manual by tester"), "{deleted}");

    // Markup in an experience is shown as text and never runs.
    let added = browser.text_with("#item-E0003", "added").await;
    assert!(added.contains(XSS), "{added}");
    let dom = browser
        .script(
            "return { pwned: window.pwned === undefined ? null : window.pwned,
                      scripts: document.scripts.length,
                      images: document.querySelectorAll('main img').length };",
            vec![],
        )
        .await;
    assert_eq!(dom, json!({"pwned": null, "scripts": 2, "images": 0}));

    // Roots before and after are the proposal's.
    let governance = Governance::open(&g.scratch.dir.path().join("governance")).unwrap();
    let tracked = governance.proposal(2).unwrap();
    let before = browser.text_with("#root-before", "").await;
    let after = browser.text_with("#root-after", "").await;
    assert_eq!(before, tracked.proposal.base_root.to_hex());
    assert_eq!(after, tracked.proposal.new_root.to_hex());
    let yes_message = governance.subject(tracked, Choice::Yes).message();
    assert_eq!(browser.text_with("#message-yes", "").await, yes_message);

    // Alice votes yes through the wallet: the tally moves (40 of the 50 the quorum needs).
    wallet_vote(&browser, &g.keys[0], &g.addresses[0], "yes", &yes_message).await;
    let ok = browser.text_with("#vote-ok", "weight 40").await;
    assert!(ok.contains("Recorded yes"), "{ok}");
    browser.text_with("#tally-text", "Yes 40 · No 0").await;
    browser.text_with("#quorum-text", "not reached").await;
    browser.text_with("#votes-table", "40").await;

    // Bob's ballot from `gym gov vote --sign-only`, pasted: 70 of 100, decided.
    let ballot = g.scratch.ok(&[
        "gov",
        "vote",
        "2",
        "yes",
        "--key-file",
        g.key(1),
        "--sign-only",
    ]);
    paste_ballot(&browser, ballot.trim()).await;
    browser.text_with("#vote-ok", "weight 30").await;
    browser.text_with("#tally-text", "Yes 70 · No 0").await;
    browser.text_with("#proposal-status", "accepted").await;

    // Refusals show the server's reason: a double vote, a forged ballot, a non-voter, junk.
    wallet_vote(&browser, &g.keys[0], &g.addresses[0], "yes", &yes_message).await;
    let refused = browser
        .text_with("#vote-refused", "already voted yes")
        .await;
    assert!(refused.contains("(409)"), "{refused}");
    let carol = g.scratch.ok(&[
        "gov",
        "vote",
        "2",
        "no",
        "--key-file",
        g.key(2),
        "--sign-only",
    ]);
    let mut forged: Value = serde_json::from_str(&carol).unwrap();
    forged["choice"] = json!("yes");
    paste_ballot(&browser, &forged.to_string()).await;
    browser
        .text_with("#vote-refused", "does not sign this vote")
        .await;
    let mallory = g.scratch.ok(&[
        "gov",
        "vote",
        "2",
        "yes",
        "--key-file",
        g.key(3),
        "--sign-only",
    ]);
    paste_ballot(&browser, mallory.trim()).await;
    browser.text_with("#vote-refused", "is not a voter").await;
    paste_ballot(&browser, "yes please").await;
    browser
        .text_with("#vote-refused", "That is not a ballot")
        .await;
    browser.text_with("#tally-text", "Yes 70 · No 0").await;
    assert_eq!(
        Governance::tally(
            Governance::open(&g.scratch.dir.path().join("governance"))
                .unwrap()
                .proposal(2)
                .unwrap()
        )
        .yes,
        70
    );
    // A vote cast elsewhere (carol, from the CLI) appears without reloading the page.
    let (code, _, err) = g.vote("2", 2, "no");
    assert_eq!(code, 0, "{err}");
    browser.text_with("#tally-text", "Yes 70 · No 30").await;
    browser.text_with("#votes-table", "no").await;
    for width in [1280, 390] {
        browser.screenshot("gov-review", width, None).await;
        browser
            .screenshot("gov-review-changes", width, Some("#items-section"))
            .await;
    }

    // The list follows.
    browser.goto(&format!("{}/gov", site.base)).await;
    let row = browser.text_with("#proposal-2", "accepted").await;
    assert!(
        row.contains("yes 70 · no 30") && row.contains("quorum 50 reached"),
        "{row}"
    );
    browser.client().clone().close().await.unwrap();
    eprintln!(
        "browser voting test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_browser_diffs_versions_shows_a_history_and_downloads_a_proof_the_cli_verifies()
{
    let started = Instant::now();
    if browser_binaries().is_none() {
        return;
    }
    let site = tokio::task::spawn_blocking(site).await.unwrap();
    let g = &site.governed;
    let Some(browser) = Browser::start(g.scratch.dir.path()).await else {
        return;
    };
    browser.goto(&format!("{}/libraries", site.base)).await;
    browser.text_with("main table", "arith").await;
    browser
        .client()
        .find(Locator::LinkText("arith"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The governed version (2) to the head (4) by default.
    let summary = browser.text_with("#diff-summary", "v2 → v4").await;
    assert!(
        summary.contains("1 added, 1 updated, 1 deleted"),
        "{summary}"
    );
    let items = browser
        .text_with("#diff-items", "Reason: Units rarely differ")
        .await;
    assert!(items.contains(XSS), "{items}");
    let versions = browser
        .text_with("#versions", "run r-web epoch 1 step 2")
        .await;
    assert!(
        versions.contains("v1") && versions.contains("manual by tester"),
        "{versions}"
    );
    let words = browser
        .script(
            "return [...document.querySelectorAll('#diff-items ins')].map(e => e.textContent);",
            vec![],
        )
        .await;
    assert_eq!(words, json!(["before adding anything."]));
    assert_eq!(
        browser
            .script("return window.pwned === undefined;", vec![])
            .await,
        json!(true)
    );

    // Another pair of versions through the form.
    let client = browser.client();
    client
        .find(Locator::Css("#diff-from option[value='0']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .find(Locator::Css("#diff-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let summary = browser.text_with("#diff-summary", "v0 → v4").await;
    assert!(
        summary.contains("2 added, 0 updated, 0 deleted"),
        "{summary}"
    );
    client
        .find(Locator::Css("#diff-from option[value='2']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .find(Locator::Css("#diff-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.text_with("#diff-summary", "v2 → v4").await;
    browser
        .screenshot("library-diff", 1280, Some("#diff-section"))
        .await;
    browser
        .screenshot("library-diff", 390, Some("#diff-section"))
        .await;

    // E0001's history, and its proof at the head downloaded and checked by the CLI.
    client
        .find(Locator::Css("#experience-id option[value='E0001']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .find(Locator::Css("#experience-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let history = browser.text_with("#experience-history", "v3 update").await;
    assert!(
        history.contains("v1 add") && history.contains("run r-web epoch 1 step 2"),
        "{history}"
    );
    // Its measured credit beside its use counts.
    let shown = browser
        .text_with("#experience .credit", "Measured credit")
        .await;
    assert!(
        shown.contains("Δ mean reward +0.125 [+0.031, +0.219] on 8 queries × 4 at v3"),
        "{shown}"
    );
    client
        .find(Locator::Id("proof-download"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .text_with("#proof-status", "Downloaded arith-E0001-v4.proof.json")
        .await;
    let file = browser.downloads.join("arith-E0001-v4.proof.json");
    let waited = Instant::now();
    while !file.exists() && waited.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(file.exists(), "the browser saved {}", file.display());
    let proof: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(proof["version"], 4);
    let (code, out, err) = g
        .scratch
        .gym(&["library", "verify-proof", file.to_str().unwrap()]);
    assert_eq!(
        code, 0,
        "verify-proof refused the downloaded proof: {out}{err}"
    );

    // A proof of a deleted experience at the head is refused with the server's reason.
    client
        .find(Locator::Css("#experience-id option[value='E0002']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .find(Locator::Css("#experience-form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.text_with("#experience-history", "v4 delete").await;
    let version = client.find(Locator::Id("proof-version")).await.unwrap();
    assert_eq!(version.prop("value").await.unwrap().as_deref(), Some("3"));
    version.clear().await.unwrap();
    version.send_keys("4").await.unwrap();
    client
        .find(Locator::Id("proof-download"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.text_with("#proof-status", "No proof").await;
    browser.client().clone().close().await.unwrap();
    eprintln!(
        "library browser test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
