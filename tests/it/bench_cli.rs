//! `gym bench stages` on the small default model: a tiny step, both modes printed.

use crate::common::{Scratch, model_path};

#[test]
fn bench_stages_runs_the_calls_batched_and_one_at_a_time() {
    let scratch = Scratch::new();
    let model = model_path();
    let output = scratch
        .model_command(&[
            "bench",
            "stages",
            "--model",
            model.to_str().expect("a UTF-8 model path"),
            "--queries",
            "1",
            "--group",
            "2",
            "--max-tokens",
            "8",
            "--threads",
            "2",
        ])
        .output()
        .expect("run gym bench stages");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("2 summarize + 1 extract calls"), "{stdout}");
    assert!(stdout.contains("\nbatched "), "{stdout}");
    assert!(stdout.contains("\nsequential "), "{stdout}");
    assert!(
        stdout.contains("speed-up of batched stage calls: "),
        "{stdout}"
    );
}
