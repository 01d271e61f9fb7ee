//! Gym's JSON-schema → GBNF converter against llama.cpp's own (`json_schema_to_grammar`, from
//! llama.cpp's `common` library through llama-cpp-2), on the same schemas and the same model:
//!
//! 1. coverage: which schemas each converts, and what each does with a keyword it cannot express;
//! 2. cost: conversion time, grammar size, the time llama.cpp takes to load the grammar;
//! 3. output: greedy generation under each grammar with the real model, every answer parsed and
//!    validated against its schema (the `jsonschema` crate);
//! 4. bounds: schemas a hostile client could send (a huge `minItems`, deep nesting, a huge
//!    `enum`), timed, with the grammar's size.
//!
//! Usage (from the repository root; builds llama.cpp with its `common` library, a few minutes
//! once): `cargo run --release --manifest-path scripts/grammar-compare/Cargo.toml --
//! models/SmolLM2-135M-Instruct.Q4_1.gguf 96`. Not part of the workspace: the `common` feature
//! would rebuild llama.cpp for every gym build, for a comparison only.

// The converter `gym serve` uses, compiled in as it is.
#[path = "../../../src/backend/grammar.rs"]
#[allow(dead_code, clippy::all)]
mod grammar;

use std::num::NonZeroU32;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use serde_json::{Value, json};

fn corpus() -> Vec<(&'static str, Value)> {
    vec![
        (
            "answer+confidence",
            json!({"type": "object", "properties": {
                "answer": {"type": "string", "maxLength": 40},
                "confidence": {"type": "number"}},
                "required": ["answer", "confidence"], "additionalProperties": false}),
        ),
        (
            "enum+integer",
            json!({"type": "object", "properties": {
                "sentiment": {"enum": ["positive", "negative", "neutral"]},
                "stars": {"type": "integer"}},
                "required": ["sentiment", "stars"], "additionalProperties": false}),
        ),
        (
            "array of strings 1-3",
            json!({"type": "object", "properties": {
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                         "minItems": 1, "maxItems": 3}},
                "required": ["tags"], "additionalProperties": false}),
        ),
        (
            "nested person",
            json!({"type": "object", "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 30},
                "age": {"type": "integer"},
                "address": {"type": "object", "properties": {
                    "city": {"type": "string", "maxLength": 20},
                    "zip": {"type": ["string", "null"], "maxLength": 10}},
                    "required": ["city"], "additionalProperties": false}},
                "required": ["name", "age", "address"], "additionalProperties": false}),
        ),
        (
            "anyOf",
            json!({"type": "object", "properties": {
                "value": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}},
                "required": ["value"], "additionalProperties": false}),
        ),
        (
            "const + optional",
            json!({"type": "object", "properties": {
                "kind": {"const": "lesson"},
                "text": {"type": "string", "maxLength": 60},
                "note": {"type": "string", "maxLength": 20}},
                "required": ["kind", "text"], "additionalProperties": false}),
        ),
        (
            "pattern (date)",
            json!({"type": "object", "properties": {
                "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}},
                "required": ["date"], "additionalProperties": false}),
        ),
        (
            "format date",
            json!({"type": "object", "properties": {
                "date": {"type": "string", "format": "date"}},
                "required": ["date"], "additionalProperties": false}),
        ),
        (
            "$ref/$defs",
            json!({"type": "object", "$defs": {"step": {"type": "object", "properties": {
                    "n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false}},
                "properties": {"steps": {"type": "array", "items": {"$ref": "#/$defs/step"},
                                          "maxItems": 2}},
                "required": ["steps"], "additionalProperties": false}),
        ),
        (
            "integer minimum/maximum",
            json!({"type": "object", "properties": {
                "score": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["score"], "additionalProperties": false}),
        ),
        (
            "uniqueItems",
            json!({"type": "object", "properties": {
                "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true,
                        "maxItems": 3}},
                "required": ["ids"], "additionalProperties": false}),
        ),
        (
            "not",
            json!({"type": "object", "properties": {
                "word": {"type": "string", "maxLength": 10, "not": {"const": "yes"}}},
                "required": ["word"], "additionalProperties": false}),
        ),
    ]
}

fn hostile() -> Vec<(&'static str, Value)> {
    let mut deep = json!({"type": "integer"});
    for _ in 0..200 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    let big_enum: Vec<String> = (0..20_000).map(|i| format!("value-{i}")).collect();
    vec![
        (
            "minItems 1,000,000",
            json!({"type": "array", "items": {"type": "integer"}, "minItems": 1_000_000}),
        ),
        (
            "maxLength 10,000,000",
            json!({"type": "string", "maxLength": 10_000_000}),
        ),
        ("200 levels deep", deep),
        ("enum of 20,000", json!({"enum": big_enum})),
    ]
}

struct Converted {
    grammar: Result<String, String>,
    micros: f64,
}

fn ours(schema: &Value) -> Converted {
    let started = Instant::now();
    let grammar = grammar::json_schema_to_gbnf(schema).map_err(|e| e.to_string());
    Converted {
        grammar,
        micros: started.elapsed().as_secs_f64() * 1e6,
    }
}

fn theirs(schema: &Value) -> Converted {
    let text = schema.to_string();
    let started = Instant::now();
    let grammar = llama_cpp_2::json_schema_to_grammar(&text).map_err(|e| e.to_string());
    Converted {
        grammar,
        micros: started.elapsed().as_secs_f64() * 1e6,
    }
}

/// Greedy generation under `grammar`; returns the text and whether llama.cpp took the grammar.
fn generate(
    backend: &LlamaBackend,
    model: &LlamaModel,
    grammar: &str,
    question: &str,
    max_tokens: usize,
) -> Result<(String, f64, f64), String> {
    let started = Instant::now();
    let grammar_sampler =
        LlamaSampler::grammar(model, grammar, "root").map_err(|e| format!("rejected: {e}"))?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut sampler = LlamaSampler::chain_simple([grammar_sampler, LlamaSampler::greedy()]);
    let template = model.chat_template(None).map_err(|e| e.to_string())?;
    let chat =
        vec![LlamaChatMessage::new("user".into(), question.into()).map_err(|e| e.to_string())?];
    let prompt = model
        .apply_chat_template(&template, &chat, true)
        .map_err(|e| e.to_string())?;
    let tokens = model.vocab().tokenize(prompt.as_bytes(), true, true);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(2048))
        .with_n_threads(2)
        .with_n_threads_batch(2);
    let mut context = model
        .new_context(backend, params)
        .map_err(|e| e.to_string())?;
    let mut batch = LlamaBatch::new(2048, 1);
    for (i, &token) in tokens.iter().enumerate() {
        batch
            .add(token, i as i32, &[0], i + 1 == tokens.len())
            .map_err(|e| e.to_string())?;
    }
    context.decode(&mut batch).map_err(|e| e.to_string())?;
    let mut position = tokens.len() as i32;
    let mut bytes: Vec<u8> = Vec::new();
    let generating = Instant::now();
    let mut at = batch.n_tokens() - 1;
    for _ in 0..max_tokens {
        // `sample` also accepts the token (the grammar advances).
        let token = sampler.sample(&context, at);
        if model.vocab().is_eog(token) {
            break;
        }
        bytes.extend(model.vocab().token_to_piece(token, false, None));
        batch.clear();
        batch
            .add(token, position, &[0], true)
            .map_err(|e| e.to_string())?;
        position += 1;
        context.decode(&mut batch).map_err(|e| e.to_string())?;
        at = 0;
    }
    Ok((
        String::from_utf8_lossy(&bytes).into_owned(),
        load_ms,
        generating.elapsed().as_secs_f64() * 1e3,
    ))
}

fn verdict(schema: &Value, text: &str) -> &'static str {
    match serde_json::from_str::<Value>(text.trim()) {
        Err(_) => "not JSON (cut at the token limit?)",
        Ok(value) => match jsonschema::validator_for(schema) {
            Err(_) => "schema not compilable by the validator",
            Ok(validator) if validator.is_valid(&value) => "valid",
            Ok(_) => "INVALID against the schema",
        },
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let model_path = args
        .next()
        .expect("usage: grammar-compare MODEL.gguf [MAX_TOKENS]");
    let max_tokens: usize = args.next().map_or(96, |n| n.parse().expect("MAX_TOKENS"));
    let backend = LlamaBackend::init().expect("llama backend");
    let model = LlamaModel::load_from_file(&backend, &model_path, &LlamaModelParams::default())
        .expect("model");

    println!("## Coverage, cost and output ({max_tokens} tokens at most, greedy)\n");
    println!("| schema | converter | converts | µs | grammar bytes | load ms | output |");
    println!("|---|---|---|---|---|---|---|");
    for (name, schema) in corpus() {
        let question = format!("Reply with one JSON value for this schema, nothing else: {schema}");
        for (who, converted) in [("gym", ours(&schema)), ("llama.cpp", theirs(&schema))] {
            match &converted.grammar {
                Err(error) => println!(
                    "| {name} | {who} | refused: {} | {:.0} | - | - | - |",
                    error.replace('|', "/"),
                    converted.micros
                ),
                Ok(grammar) => {
                    let (load, output) =
                        match generate(&backend, &model, grammar, &question, max_tokens) {
                            Ok((text, load_ms, _)) => (
                                format!("{load_ms:.1}"),
                                format!(
                                    "{}: `{}`",
                                    verdict(&schema, &text),
                                    text.replace('|', "/").replace('\n', " ")
                                ),
                            ),
                            Err(error) => ("-".into(), error),
                        };
                    println!(
                        "| {name} | {who} | yes | {:.0} | {} | {load} | {output} |",
                        converted.micros,
                        grammar.len()
                    );
                }
            }
        }
    }

    println!("\n## Hostile schemas\n");
    println!("| schema | converter | result | ms | grammar bytes | llama.cpp load ms |");
    println!("|---|---|---|---|---|---|");
    for (name, schema) in hostile() {
        for (who, converted) in [("gym", ours(&schema)), ("llama.cpp", theirs(&schema))] {
            match &converted.grammar {
                Err(error) => println!(
                    "| {name} | {who} | refused: {} | {:.1} | - | - |",
                    error.replace('|', "/"),
                    converted.micros / 1e3
                ),
                Ok(grammar) => {
                    let started = Instant::now();
                    let loaded = LlamaSampler::grammar(&model, grammar, "root").is_ok();
                    println!(
                        "| {name} | {who} | converted | {:.1} | {} | {:.1}{} |",
                        converted.micros / 1e3,
                        grammar.len(),
                        started.elapsed().as_secs_f64() * 1e3,
                        if loaded { "" } else { " (rejected)" }
                    );
                }
            }
        }
    }
}
