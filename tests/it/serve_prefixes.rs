//! `gym serve --keep-prompt-prefixes`: a request that arrives alone after another with the
//! same long prompt prefix borrows its KV cells, and without the flag it evaluates its whole
//! prompt (the real server, the real OpenAI client).

use crate::common::{Scratch, python_client};

const CLIENT: &str = r#"
import json, sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
shared = " ".join(f"Rule {i}: answer every question about the number {i} in one word." for i in range(24))
usage = []
for i in range(2):
    c = client.completions.create(model="gym", prompt=f"{shared}\nQuestion {i}: what is {i} plus one?",
                                  max_tokens=4, temperature=0)
    usage.append([c.usage.prompt_tokens, c.usage.prompt_tokens_details.cached_tokens])
print(json.dumps(usage))
"#;

/// (prompt tokens, cached tokens) of two requests sent one after the other to `gym serve ARGS`.
fn two_requests_one_after_the_other(args: &[&str]) -> Vec<(u64, u64)> {
    let scratch = Scratch::new();
    let mut all = vec!["--threads", "2"];
    all.extend(args);
    let (mut server, url) = scratch.serve(&all);
    let usage = python_client(CLIENT, &[&url], &mut server);
    usage
        .as_array()
        .expect("a list of usages")
        .iter()
        .map(|u| (u[0].as_u64().unwrap(), u[1].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_lone_request_reuses_an_earlier_prefix_only_when_asked_to() {
    let cleared = two_requests_one_after_the_other(&[]);
    assert_eq!(
        cleared.iter().map(|u| u.1).collect::<Vec<_>>(),
        [0, 0],
        "the cache is cleared between rounds: {cleared:?}"
    );
    let kept = two_requests_one_after_the_other(&["--keep-prompt-prefixes"]);
    assert_eq!(kept[0].1, 0, "nothing kept before the first: {kept:?}");
    let (prompt, cached) = kept[1];
    // The 24 rules are over 400 tokens; the question after them differs.
    assert!(
        cached >= 384 && cached % 32 == 0 && cached < prompt,
        "the second borrows the rules' cells: {kept:?}"
    );
}
