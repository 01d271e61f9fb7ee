//! The candle fine-tuning stack on the real default model (SmolLM2-135M GGUF).

use candle_core::Device;
use gym::backend::ChatMessage;
use gym::backend::default_model_path;
use gym::finetune::{BaseModel, generate};

fn base() -> BaseModel {
    BaseModel::load(&default_model_path(), &Device::Cpu).expect("the default model (make setup)")
}

/// The greedy answer of llama.cpp (the Q4_1 model, `gym eval --temperature 0`) to the built-in
/// arithmetic prompt starts with these words; the dequantized candle forward pass must agree.
#[test]
fn greedy_decoding_agrees_with_llama_cpp() {
    let base = base();
    let sample = gym::data::Sample {
        id: "x".into(),
        question: "Kenji had 37 marbles. He gave 7 to each of 2 friends and then bought 5 more. How many marbles does Kenji have now?".into(),
        answer: "28".into(),
    };
    let messages: Vec<ChatMessage> = gym::rollout::prompt::solve_messages(&sample, None, &[]);
    let prompt = base.tokenizer.chat_prompt(&messages).unwrap();
    let (cache, logits) = generate::prefill(&base, &prompt).unwrap();
    let sampling = gym::backend::Sampling {
        temperature: 0.0,
        max_tokens: 24,
        ..Default::default()
    };
    let out = generate::complete(&base, cache, logits, &sampling, 0).unwrap();
    eprintln!("prompt tokens {}: {:?}", prompt.len(), out.text);
    assert!(
        out.text
            .starts_with("Kenji had 37 marbles, and he gave 7 to each of 2 friends"),
        "{:?}",
        out.text
    );
}

/// A handful of LoRA steps on a tiny set lower the answer loss; the saved adapter reloads
/// (manifest checked), equals what was trained, and changes what the model says.
#[test]
fn lora_steps_lower_the_loss_and_the_saved_adapter_changes_outputs() {
    use gym::finetune::lora::{LoraConfig, load_adapters};
    use gym::finetune::sft::SftExample;
    use gym::finetune::train::{self, TrainConfig};

    let base = base();
    // Short prompts keep the test quick: the cost of a step grows with its tokens.
    let examples: Vec<SftExample> = [
        ("4 + 3?", "4 + 3 = 7.\nAnswer: 7"),
        ("10 - 6?", "10 - 6 = 4.\nAnswer: 4"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (q, a))| SftExample {
        sample_id: i.to_string(),
        messages: vec![ChatMessage::system("Solve."), ChatMessage::user(*q)],
        answer: (*a).into(),
    })
    .collect();
    let tokens = train::tokenize(&base.tokenizer, &examples, 64).unwrap();
    let config = TrainConfig {
        lora: LoraConfig {
            rank: 4,
            alpha: 8.0,
            ..LoraConfig::default()
        },
        learning_rate: 5e-3,
        steps: 6,
        batch_size: 2,
        ..TrainConfig::default()
    };
    let before = train::mean_loss(&base.model, None, &tokens).unwrap();
    let started = std::time::Instant::now();
    let trained = train::train(&base, &tokens, &config, &mut |r, _, _| {
        eprintln!("step {} loss {:.4} ({:.2} s)", r.step, r.loss, r.seconds);
        Ok(())
    })
    .unwrap();
    eprintln!(
        "{:.2} s/step; loss before {before:.4}, curve {:?}",
        started.elapsed().as_secs_f64() / config.steps as f64,
        trained.losses
    );
    let adapters = trained.lora.adapters();
    let after = train::mean_loss(&base.model, Some(&adapters), &tokens).unwrap();
    assert!(after < 0.7 * before, "loss {before} -> {after}");

    let dir = tempfile::tempdir().unwrap();
    let mut manifest = train::Manifest {
        format: train::MANIFEST_FORMAT.into(),
        base_model: train::ModelRef {
            path: base.path.clone(),
            sha256: base.sha256.clone(),
        },
        data: train::DataRef {
            run: "test".into(),
            dataset: "inline".into(),
            examples: examples.len(),
            sha256: gym::finetune::sft::hash(&examples),
        },
        hyper_parameters: config.clone(),
        trainable_parameters: trained.lora.parameters(),
        steps_done: trained.losses.len(),
        loss_curve: trained.losses.clone(),
        seconds: trained.seconds,
        seconds_per_step: trained.seconds / config.steps as f64,
        adapter_file: String::new(),
        adapter_sha256: String::new(),
        created_at: String::new(),
    };
    train::save(dir.path(), &trained.lora, &mut manifest).unwrap();
    let read = train::read_manifest(dir.path()).unwrap();
    assert_eq!(read.base_model, manifest.base_model);
    assert_eq!(read.data, manifest.data);
    assert_eq!(read.hyper_parameters, config);
    assert_eq!(read.loss_curve.len(), config.steps);
    let loaded = load_adapters(
        &dir.path().join(train::ADAPTER_FILE),
        &base.model.config,
        &Device::Cpu,
    )
    .unwrap();
    assert_eq!(loaded.pairs.len(), adapters.pairs.len());
    let reloaded_loss = train::mean_loss(&base.model, Some(&loaded), &tokens).unwrap();
    assert!(
        (reloaded_loss - after).abs() < 1e-4,
        "{reloaded_loss} vs {after}"
    );

    // Merged into the weights, the adapter changes the greedy answer's tokens.
    let prompt = base.tokenizer.chat_prompt(&examples[0].messages).unwrap();
    let greedy_base = generate::greedy_next(&base, &prompt).unwrap();
    let mut tuned = BaseModel::load(&default_model_path(), &Device::Cpu).unwrap();
    tuned.model.merge(&loaded).unwrap();
    let merged_loss = train::mean_loss(&tuned.model, None, &tokens).unwrap();
    assert!(
        (merged_loss - after).abs() < 1e-3,
        "{merged_loss} vs {after}"
    );
    let sampling = gym::backend::Sampling {
        temperature: 0.0,
        max_tokens: 12,
        ..Default::default()
    };
    let (cache, logits) = generate::prefill(&base, &prompt).unwrap();
    let plain = generate::complete(&base, cache, logits, &sampling, 0).unwrap();
    let (cache, logits) = generate::prefill(&tuned, &prompt).unwrap();
    let fine = generate::complete(&tuned, cache, logits, &sampling, 0).unwrap();
    eprintln!(
        "base: {:?} (first token {greedy_base})\ntuned: {:?}",
        plain.text, fine.text
    );
    assert_ne!(plain.text, fine.text);
    // A corrupted adapter is refused by its manifest.
    std::fs::write(dir.path().join(train::ADAPTER_FILE), b"garbage").unwrap();
    let error = train::read_manifest(dir.path()).unwrap_err().to_string();
    assert!(error.contains("does not match its manifest"), "{error}");
}

/// `gym finetune --regenerate K` on a run whose journal is empty: answers are sampled afresh
/// with the run's library in the prompt, the solved ones are kept, and an adapter is trained.
#[test]
fn regenerated_answers_train_an_adapter() {
    let scratch = crate::common::Scratch::new();
    scratch.ok(&["library", "init", "tiny"]);
    scratch.ok(&[
        "library",
        "add",
        "tiny",
        "--text",
        "When counting a letter in a word, spell the word out one letter at a time.",
    ]);
    let run = scratch.dir.path().join("runs/regen");
    std::fs::create_dir_all(&run).unwrap();
    // The flags `gym grpo` saved for the run: the queries, the library and the sampling. The
    // reward counts any answer with a digit as solved, which the small model writes in about
    // 3 answers of 4 (the suite's own reward: about 1 in 10, too rare to rely on); sampling
    // stops at the first solved one.
    let args = [
        "--dataset",
        "builtin:letters",
        "--reward",
        "regex:[0-9]",
        "--samples",
        "16",
        "--library",
        "tiny",
        "--max-tokens",
        "64",
        "--temperature",
        "1.0",
        "--run-id=regen",
    ];
    std::fs::write(run.join("args.json"), serde_json::to_vec(&args).unwrap()).unwrap();
    let started = std::time::Instant::now();
    let output = scratch
        .model_command(&[
            "finetune",
            "--run",
            "regen",
            "--regenerate",
            "3",
            // Sampling stops at the first query that gives a solved answer.
            "--max-examples",
            "1",
            "--steps",
            "1",
            "--batch-size",
            "1",
            "--rank",
            "2",
            "--checkpoint-every",
            "0",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "finetune --regenerate: {:.1} s\n{stderr}\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("3 answer(s) per training query with 1 experience(s) of tiny@1"),
        "{stderr}"
    );
    let manifest = gym::finetune::train::read_manifest(&run.join("finetune")).unwrap();
    assert_eq!(manifest.data.run, "regen");
    assert_eq!(manifest.data.examples, 1);
    assert_eq!(manifest.steps_done, 1);
}

/// Distilling BitDelta's row scales against the fine-tuned model's logits lowers the logit
/// error on the calibration prompts (a low-rank delta, as LoRA gives, on two layers).
#[test]
fn distilled_bitdelta_scales_match_the_fine_tuned_logits_better() {
    use gym::delta::bitdelta::{Matrix, compress};
    use gym::delta::file::{Bits, Dense};
    use gym::delta::scale_fit;
    use gym::finetune::Proj;
    use rand::{Rng as _, SeedableRng as _};

    let base = base();
    let dim = base.model.config.dim;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut dense = Dense::new();
    for layer in [0, 1] {
        for proj in [Proj::Q, Proj::O] {
            // Rank 2: B [dim, 2] · A [2, dim].
            let a: Vec<f32> = (0..2 * dim).map(|_| rng.random_range(-0.1..0.1)).collect();
            let b: Vec<f32> = (0..2 * dim).map(|_| rng.random_range(-0.1..0.1)).collect();
            let data = (0..dim * dim)
                .map(|i| {
                    let (r, c) = (i / dim, i % dim);
                    b[2 * r] * a[c] + b[2 * r + 1] * a[dim + c]
                })
                .collect();
            dense.insert(
                proj.weight_name(layer),
                Matrix::new(dim, dim, data).unwrap(),
            );
        }
    }
    let mut bits: Bits = dense
        .iter()
        .map(|(n, m)| (n.clone(), compress(m)))
        .collect();
    let prompts: Vec<Vec<u32>> = ["What is 4 + 3?", "Count the r in strawberry."]
        .iter()
        .map(|q| {
            base.tokenizer
                .chat_prompt(&[ChatMessage::user(*q)])
                .unwrap()
        })
        .collect();
    let before = scale_fit::logit_error(&base.model, &dense, &bits, &prompts).unwrap();
    let start_scales = bits["blk.0.attn_q.weight"].scales.clone();
    let losses = scale_fit::refine(
        &base.model,
        &dense,
        &mut bits,
        &prompts,
        4,
        5e-2,
        &mut |step, loss| eprintln!("refine step {step}: {loss:.4e}"),
    )
    .unwrap();
    let after = scale_fit::logit_error(&base.model, &dense, &bits, &prompts).unwrap();
    eprintln!("logit MSE {before:.4e} -> {after:.4e}; curve {losses:?}");
    assert_eq!(losses.len(), 4);
    assert!(
        (losses[0] - before).abs() < 1e-3 * before.max(1e-9),
        "{losses:?} vs {before}"
    );
    assert!(after < before, "{after} >= {before}");
    assert_ne!(bits["blk.0.attn_q.weight"].scales, start_scales);
}
