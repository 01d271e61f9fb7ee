//! The review page of a ledger anchored on a real chain (`anvil`): the root accepted on chain,
//! first not the governed head (nothing accepted yet), then the governed head once the anchored
//! proposal is executed on chain.

use std::time::Instant;

use super::browser::Browser;
use super::{browser_binaries, serve};
use crate::gov_cli::Governed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_page_shows_whether_the_governed_head_is_the_root_accepted_on_chain() {
    let started = Instant::now();
    if browser_binaries().is_none() {
        return;
    }
    let anvil = tokio::task::spawn_blocking(crate::gov_chain::start_anvil)
        .await
        .unwrap();
    let rpc = anvil.url.clone();
    let keys = anvil.keys.clone();
    let (g, mut server, base) = tokio::task::spawn_blocking(move || {
        let g = Governed::new_with_keys("1h", &keys[1..]);
        let s = &g.scratch;
        s.ok(&["gov", "propose", "arith"]);
        for voter in 0..3 {
            assert_eq!(g.vote("1", voter, "yes").0, 0);
        }
        assert_eq!(g.execute("1", 0).0, 0);
        std::fs::write(s.dir.path().join("deployer.key"), &keys[0]).unwrap();
        s.ok(&[
            "gov",
            "deploy",
            "--rpc-url",
            &rpc,
            "--key-file",
            "deployer.key",
            "--voters",
            "voters.toml",
            "--voting-period",
            "1h",
        ]);
        // Chain readings reused for 1 s, not 30: the page must see the execution on chain.
        let (server, base) = serve(s, &["--rpc-url", &rpc, "--chain-cache", "1"]);
        (g, server, base)
    })
    .await
    .unwrap();
    let Some(browser) = Browser::start(g.scratch.dir.path()).await else {
        return;
    };
    browser.goto(&format!("{base}/gov/proposals/1")).await;
    let anchor = browser
        .text_with("#anchor", "Anchored on chain 31337")
        .await;
    assert!(anchor.contains("Accepted on chain: version 0"), "{anchor}");
    browser
        .text_with("#anchor-match", "does not match the root accepted on chain")
        .await;

    let rpc = anvil.url.clone();
    let g = tokio::task::spawn_blocking(move || {
        let s = &g.scratch;
        s.ok(&[
            "gov",
            "anchor",
            "arith",
            "--rpc-url",
            &rpc,
            "--key-file",
            g.key(0),
        ]);
        for voter in 0..2 {
            let key = g.key(voter).to_owned();
            s.ok(&[
                "gov",
                "vote",
                "1",
                "yes",
                "--chain",
                "--rpc-url",
                &rpc,
                "--key-file",
                &key,
            ]);
        }
        s.ok(&[
            "gov",
            "execute",
            "1",
            "--chain",
            "--rpc-url",
            &rpc,
            "--sender-key-file",
            "deployer.key",
        ]);
        g
    })
    .await
    .unwrap();
    browser.goto(&format!("{base}/gov/proposals/1")).await;
    let matched = browser
        .text_with("#anchor-match", "matches the root accepted on chain")
        .await;
    assert!(matched.contains("(v2)"), "{matched}");
    let root = browser.text_with("#root-after", "").await;
    let anchor = browser
        .text_with("#anchor", "Accepted on chain: version 2")
        .await;
    assert!(anchor.contains(&root), "{anchor} names {root}");
    browser.client().clone().close().await.unwrap();
    let _ = server.kill();
    let _ = server.wait();
    drop(g);
    eprintln!(
        "anchor page test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
