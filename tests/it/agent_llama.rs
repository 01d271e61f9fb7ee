//! Agent rollouts on the real default model with the real calculator: trajectories are
//! recorded, every call is checked (valid arguments, or the error goes back to the model), and
//! the step limit holds. A recording decorator around the llama.cpp backend shows exactly what
//! the model was sent at every turn.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use gym::agent::Agent;
use gym::backend::{
    Backend, BackendError, ChatMessage, Group, GroupRequest, Role, Sampling, ToolChoice,
};
use gym::data::{DatasetSpec, Split};
use gym::rollout::prompt::solve_messages;
use gym::rollout::rollout;
use gym::tools::Toolbox;

use crate::llama_backend::backend;

/// The llama.cpp backend, keeping a copy of every request.
struct Recording {
    requests: Mutex<Vec<GroupRequest>>,
}

impl Backend for Recording {
    fn model(&self) -> &str {
        backend().model()
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        self.requests.lock().unwrap().push(request.clone());
        backend().generate(request)
    }
}

fn calculator() -> Toolbox {
    Toolbox::new(
        vec![Arc::new(gym::tools::calc::Calc::default())],
        Duration::from_secs(5),
    )
}

fn arith(limit: usize) -> gym::data::Dataset {
    let mut spec = DatasetSpec::new("builtin:arith");
    spec.split = Split::Heldout;
    spec.limit = Some(limit);
    gym::data::load(&spec).expect("the built-in suite")
}

#[tokio::test]
async fn agent_rollouts_call_the_calculator_record_trajectories_and_respect_the_step_limit() {
    let dataset = arith(2);
    let spec = dataset
        .default_reward
        .as_deref()
        .expect("arith has a reward spec");
    let verifier = gym::reward::build(&spec.parse().unwrap(), None).unwrap();
    let recording = Recording {
        requests: Mutex::new(Vec::new()),
    };
    let max_steps = 2;
    let agent = Agent {
        toolbox: calculator(),
        max_steps,
        first_turn: ToolChoice::Required,
    };
    let sampling = Sampling {
        max_tokens: 80,
        temperature: 0.7,
        seed: 11,
        ..Sampling::default()
    };
    for sample in &dataset.samples {
        let messages = solve_messages(sample, dataset.instruction.as_deref(), &[]);
        let group = rollout(
            &recording,
            verifier.as_ref(),
            sample,
            messages,
            2,
            &sampling,
            Some(&agent),
        )
        .await
        .expect("agent rollout");
        assert_eq!(group.answers.len(), 2);
        for answer in &group.answers {
            // The first turn had to call a tool; no trajectory goes past the limit.
            assert!(!answer.steps.is_empty(), "no tool call: {answer:?}");
            assert!(
                answer.steps.len() <= max_steps,
                "{} steps",
                answer.steps.len()
            );
            for step in &answer.steps {
                assert_eq!(step.call.name, "calc");
                // The grammar makes a finished call valid JSON with an `expression` string
                // (what the calculator makes of it is its own business); a call cut off by
                // `max_tokens` is still a call, and its error goes back to the model.
                match serde_json::from_str::<serde_json::Value>(&step.call.arguments) {
                    Ok(arguments) => assert!(arguments["expression"].is_string(), "{arguments}"),
                    Err(_) => assert!(
                        !step.observation.ok && step.observation.content.contains("not JSON"),
                        "{step:?}"
                    ),
                }
                if !step.observation.ok {
                    assert!(step.observation.content.starts_with("error:"));
                }
            }
            assert!(answer.tokens > 0);
            assert!((0.0..=1.0).contains(&answer.reward));
        }
    }
    let requests = recording.requests.lock().unwrap();
    // Every observation, success or error, went back to the model in a later request.
    let mut fed_back = 0;
    for request in requests.iter() {
        for (index, message) in request.messages.iter().enumerate() {
            if message.role == Role::Tool {
                let call = &request.messages[index - 1];
                assert!(
                    call.role == Role::Tool || !call.tool_calls.is_empty(),
                    "a tool result follows its call"
                );
                fed_back += 1;
            }
        }
        // The turn after the last allowed tool round may not call tools.
        let rounds = request
            .messages
            .iter()
            .filter(|m: &&ChatMessage| !m.tool_calls.is_empty())
            .count();
        assert!(rounds <= max_steps);
        if rounds == max_steps {
            assert_eq!(request.tool_choice, ToolChoice::None);
        }
    }
    assert!(fed_back > 0, "no observation was sent back");
}
