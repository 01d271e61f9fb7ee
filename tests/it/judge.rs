//! The LLM judge end to end: over the OpenAI wire protocol, and on the real local model.

use std::sync::Arc;

use gym::backend::openai::{OpenAiBackend, OpenAiConfig};
use gym::data::Sample;
use gym::reward::{JudgeVerifier, Verifier};

use crate::fake_openai::FakeOpenAi;

fn sample() -> Sample {
    Sample {
        id: "q1".into(),
        question: "What is 6 times 7?".into(),
        answer: "42".into(),
    }
}

#[tokio::test]
async fn a_verdict_wrapped_in_prose_is_parsed_and_sent_with_its_schema() {
    // The server prefixes every reply with "draw S/I. ", so the JSON arrives inside prose.
    let server = FakeOpenAi::start(true, r#"{"reason": "6 x 7 = 42", "verdict": "correct"}"#).await;
    let backend = OpenAiBackend::new(OpenAiConfig::new(server.base_url(), "judge-model")).unwrap();
    let judge = JudgeVerifier::new(Arc::new(backend));
    let reward = judge.verify(&sample(), "It is 42.").await.unwrap();
    assert_eq!(reward.score, 1.0);
    assert!(reward.reason.contains("6 x 7 = 42"), "{}", reward.reason);
    assert_eq!(judge.unparsable_replies(), 0);
    let body = &server.bodies()[0];
    assert_eq!(body["temperature"], 0.0);
    assert!(body["response_format"]["json_schema"]["schema"]["properties"]["verdict"].is_object());
    assert!(body["messages"].to_string().contains("It is 42."));
}

#[tokio::test]
async fn an_unparsable_judge_is_retried_counted_and_then_an_error() {
    let server = FakeOpenAi::start(true, "I would rather not say.").await;
    let backend = OpenAiBackend::new(OpenAiConfig::new(server.base_url(), "judge-model")).unwrap();
    let judge = JudgeVerifier::new(Arc::new(backend));
    let error = judge.verify(&sample(), "42").await.unwrap_err();
    assert!(error.to_string().contains("rather not say"), "{error}");
    assert_eq!(judge.unparsable_replies(), 3);
    assert_eq!(server.requests(), 3);
}

#[cfg(feature = "llama")]
#[tokio::test]
async fn the_local_model_judges_with_a_schema_constrained_verdict() {
    use gym::backend::llama::{LlamaBackend, LlamaConfig};
    let backend = LlamaBackend::load(LlamaConfig::new(crate::common::model_path())).unwrap();
    let judge = JudgeVerifier::new(Arc::new(backend));
    for response in ["The answer is 42.", "The answer is 13."] {
        let reward = judge.verify(&sample(), response).await.unwrap();
        assert!(reward.score == 0.0 || reward.score == 1.0, "{reward:?}");
        assert!(!reward.reason.is_empty());
    }
    assert_eq!(
        judge.unparsable_replies(),
        0,
        "constrained output always parses"
    );
}
