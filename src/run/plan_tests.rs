use proptest::prelude::*;

use super::*;

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_prompt_tokens: 0,
    }
}

/// A pilot of 4 groups of 4 answers, every group kept, one lesson added: 100 prompt tokens per
/// group, 50 per answer; stages as a run of 4 kept groups makes them.
fn pilot() -> Pilot {
    Pilot {
        groups: 4,
        kept_groups: 4,
        group_size: 4,
        lessons: 0,
        rollouts: usage(400, 800),
        rollout_seconds: 80.0,
        stages: BTreeMap::from([
            (Stage::Summarize, (8, usage(2_400, 400))),
            (Stage::Extract, (4, usage(4_000, 800))),
            (Stage::Consolidate, (1, usage(500, 100))),
        ]),
        stage_seconds: 82.0,
        extract_success: 1.0,
        net_lessons: 1.0,
        tokens_per_lesson: 40.0,
        elapsed_s: 162.0,
        eval: None,
    }
}

fn shape() -> Shape {
    Shape {
        train_queries: 4,
        epochs: 1,
        batch_size: 4,
        group_size: 4,
        validate: 0,
        validate_each: false,
        admit: 0,
        admit_answers: 4,
        admit_rounds: 1,
        credit_queries: 0,
        credit_pairs: 6,
        eval_queries: 0,
        eval_k: 4,
        eval_placebo: true,
        lessons_at_start: 0,
        prompt_once_per_group: true,
        shown_at_most: 0,
    }
}

fn part(plan: &Plan, part: Part) -> &Estimate {
    plan.parts
        .iter()
        .find(|p| p.part == part)
        .unwrap_or_else(|| panic!("no {part:?} in {plan:?}"))
}

#[test]
fn a_run_shaped_like_its_pilot_is_planned_as_the_pilot_spent() {
    let plan = plan(&shape(), &pilot(), Prices::default()).unwrap();
    let total = plan.total();
    assert_eq!(total.prompt_tokens, 400.0 + 2_400.0 + 4_000.0 + 500.0);
    assert_eq!(total.completion_tokens, 800.0 + 400.0 + 800.0 + 100.0);
    assert_eq!(total.seconds, 162.0);
    assert_eq!(part(&plan, Part::Stage(Stage::Summarize)).calls, 8.0);
    assert!(plan.parts.iter().all(|p| p.part != Part::Validation));
    assert_eq!(total.cost_usd, None, "no price, no cost");
}

#[test]
fn rollouts_scale_with_epochs_and_queries_and_the_library_grows_their_prompts() {
    let mut shape = shape();
    shape.train_queries = 40;
    shape.batch_size = 10;
    shape.epochs = 2;
    let plan = plan(&shape, &pilot(), Prices::default()).unwrap();
    let rollouts = part(&plan, Part::Rollouts);
    assert_eq!(rollouts.calls, 80.0);
    assert_eq!(rollouts.answers, 320.0);
    assert_eq!(rollouts.completion_tokens, 80.0 * 4.0 * 50.0);
    // 8 steps, half a lesson each: 1.75 lessons on average in the prompt, 40 tokens each,
    // once per group.
    assert_eq!(plan.steps, 8);
    assert_eq!(rollouts.prompt_tokens, 80.0 * (100.0 + 1.75 * 40.0));
    assert_eq!(plan.lessons_at_end, 4.0);
}

#[test]
fn an_api_that_bills_each_answer_is_planned_per_answer() {
    let mut shape = shape();
    shape.prompt_once_per_group = false;
    shape.eval_queries = 10;
    shape.eval_k = 2;
    let mut pilot = pilot();
    pilot.rollouts = usage(1_600, 800);
    let plan = plan(&shape, &pilot, Prices::default()).unwrap();
    assert_eq!(part(&plan, Part::Rollouts).prompt_tokens, 1_600.0);
    // 100 base tokens per answer; the library (half a lesson at the end) per answer too; 3
    // conditions of 10 groups of 2 answers.
    let eval = part(&plan, Part::Evaluation);
    assert_eq!(eval.answers, 60.0);
    assert_eq!(eval.prompt_tokens, 60.0 * 100.0 + 2.0 * 20.0 * 0.5 * 40.0);
}

#[test]
fn the_gate_counts_two_conditions_on_queries_outside_the_batch() {
    let mut shape = shape();
    shape.train_queries = 12;
    shape.validate = 8;
    let plan = plan(&shape, &pilot(), Prices::default()).unwrap();
    // 3 steps, each with a candidate; only 8 queries lie outside a batch of 4.
    let validation = part(&plan, Part::Validation);
    assert_eq!(validation.calls, 3.0 * 2.0 * 8.0);
    assert_eq!(validation.answers, 3.0 * 2.0 * 8.0 * 4.0);

    shape.batch_size = 12;
    let plan = super::plan(&shape, &pilot(), Prices::default()).unwrap();
    assert!(
        plan.parts.iter().all(|p| p.part != Part::Validation),
        "a batch that holds every query leaves nothing to validate on"
    );
}

#[test]
fn the_source_problem_trial_counts_a_control_and_a_lesson_group_per_problem() {
    let mut shape = shape();
    shape.train_queries = 12;
    shape.admit = 2;
    shape.admit_answers = 8;
    let plan = plan(&shape, &pilot(), Prices::default()).unwrap();
    // 3 steps, one lesson each, on 2 problems: a control and a lesson group per problem.
    let trial = part(&plan, Part::Validation);
    assert_eq!(trial.calls, 3.0 * 2.0 * 2.0);
    assert_eq!(trial.answers, 3.0 * 2.0 * 2.0 * 8.0);
    // Two rounds: at most twice the groups.
    shape.admit_rounds = 2;
    let twice = plan_of(&shape);
    assert_eq!(part(&twice, Part::Validation).calls, 2.0 * trial.calls);
    shape.admit_rounds = 1;

    // Beside the gate: one validation part holding both.
    shape.validate = 8;
    let plan = plan_of(&shape);
    let both = part(&plan, Part::Validation);
    assert_eq!(both.calls, 3.0 * 2.0 * 8.0 + 3.0 * 2.0 * 2.0);
    assert_eq!(
        plan.parts
            .iter()
            .filter(|p| p.part == Part::Validation)
            .count(),
        1
    );
}

fn plan_of(shape: &Shape) -> Plan {
    plan(shape, &pilot(), Prices::default()).unwrap()
}

#[test]
fn credit_measures_each_lesson_left_out_after_each_epoch() {
    let mut shape = shape();
    shape.epochs = 2;
    shape.credit_queries = 6;
    let mut prolific = pilot();
    prolific.net_lessons = 2.0;
    let plan = plan(&shape, &prolific, Prices::default()).unwrap();
    // 2 lessons a step at the pilot: one after epoch 1 and two after epoch 2, each with the
    // full library and each left out, on min(6, 4) queries.
    assert_eq!(part(&plan, Part::Credit).calls, (2.0 + 3.0) * 4.0);

    let mut still = pilot();
    still.net_lessons = 0.0;
    let plan = super::plan(&shape, &still, Prices::default()).unwrap();
    assert!(
        plan.parts.iter().all(|p| p.part != Part::Credit),
        "an empty library has nothing to credit"
    );
}

#[test]
fn the_final_evaluation_has_a_placebo_only_beside_lessons() {
    let mut shape = shape();
    shape.eval_queries = 10;
    let plan = plan(&shape, &pilot(), Prices::default()).unwrap();
    assert_eq!(part(&plan, Part::Evaluation).calls, 30.0);
    shape.eval_placebo = false;
    let plan = super::plan(&shape, &pilot(), Prices::default()).unwrap();
    assert_eq!(part(&plan, Part::Evaluation).calls, 20.0);
}

#[test]
fn prices_cost_each_part_at_its_model_and_a_budget_says_where_it_ends() {
    let mut shape = shape();
    shape.train_queries = 40;
    let prices = Prices {
        rollout: Some(Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
        }),
        distill: None,
    };
    let plan = plan(&shape, &pilot(), prices).unwrap();
    let rollouts = part(&plan, Part::Rollouts);
    let expected = (rollouts.prompt_tokens + 2.0 * rollouts.completion_tokens) / 1e6;
    assert!((rollouts.cost_usd.unwrap() - expected).abs() < 1e-12);
    assert_eq!(part(&plan, Part::Stage(Stage::Extract)).cost_usd, None);
    assert_eq!(plan.total().cost_usd, None, "a part without a price");

    let tokens = plan.total().tokens();
    assert_eq!(plan.budget_stop(Some(tokens as u64 + 1), None), None);
    let stop = plan.budget_stop(Some((tokens / 2.0) as u64), None).unwrap();
    assert!((6..=10).contains(&stop), "{stop} of {}", plan.steps);
    assert!(plan.render().contains("no price"), "{}", plan.render());
}

#[test]
fn a_pilot_whose_extract_calls_failed_plans_no_candidates() {
    let mut shape = shape();
    shape.train_queries = 12;
    shape.validate = 8;
    let mut failed = pilot();
    failed.extract_success = 0.0;
    failed.net_lessons = 0.0;
    failed.stages.remove(&Stage::Consolidate);
    let plan = plan(&shape, &failed, Prices::default()).unwrap();
    let validation = plan.parts.iter().find(|p| p.part == Part::Validation);
    assert_eq!(validation.map(|v| v.calls), Some(0.0), "{plan:?}");
    assert_eq!(plan.lessons_at_end, 0.0);
    // Half of them failing: a step of 4 kept groups still makes a candidate most of the time.
    failed.extract_success = 0.5;
    let plan = super::plan(&shape, &failed, Prices::default()).unwrap();
    let validation = plan
        .parts
        .iter()
        .find(|p| p.part == Part::Validation)
        .unwrap();
    assert!((validation.calls - 3.0 * 2.0 * 8.0 * (1.0 - 0.5f64.powi(4))).abs() < 1e-9);
}

#[test]
fn the_final_evaluation_is_planned_from_its_own_pilot_when_it_ran() {
    let mut shape = shape();
    shape.eval_queries = 10;
    shape.eval_k = 2;
    let mut pilot = pilot();
    // Held-out answers half as long as training ones: 2 groups of 2 answers, 25 tokens each.
    pilot.eval = Some(EvalPilot {
        groups: 2,
        answers: 4,
        usage: usage(160, 100),
        seconds: 10.0,
    });
    let plan = plan(&shape, &pilot, Prices::default()).unwrap();
    let eval = part(&plan, Part::Evaluation);
    assert_eq!(eval.completion_tokens, 3.0 * 10.0 * 2.0 * 25.0);
    // 80 prompt tokens a group; half a lesson at the end in the library and placebo prompts.
    assert_eq!(
        eval.prompt_tokens,
        3.0 * 10.0 * 80.0 + 2.0 * 10.0 * 0.5 * 40.0
    );
    assert_eq!(eval.seconds, 1_500.0 * 0.1);
}

#[test]
fn a_pilot_without_groups_cannot_be_scaled() {
    let empty = Pilot::default();
    assert_eq!(
        plan(&shape(), &empty, Prices::default()),
        Err(PlanError::NoPilotGroups)
    );
}

#[test]
fn numbers_read_as_people_write_them() {
    assert_eq!(thousands(0.4), "0");
    assert_eq!(thousands(1_234_567.0), "1,234,567");
    assert_eq!(thousands(999.0), "999");
    assert_eq!(duration(12.0), "12s");
    assert_eq!(duration(250.0), "4m 10s");
    assert_eq!(duration(7_500.0), "2h 05m");
}

proptest! {
    /// More of anything never plans fewer tokens.
    #[test]
    fn more_epochs_queries_or_answers_never_cost_less(
        train in 1usize..200,
        batch in 1usize..40,
        epochs in 1u32..4,
        g in 2usize..8,
        validate in 0usize..10,
        credit in 0usize..10,
        kept in 0usize..=4,
        retrieve in 0usize..6,
    ) {
        let mut pilot = pilot();
        pilot.kept_groups = kept;
        let shape = Shape {
            train_queries: train,
            batch_size: batch,
            epochs,
            group_size: g,
            validate,
            credit_queries: credit,
            // Leave-one-out: the pairs' pass costs less past 2 × pairs lessons (see
            // `the_credit_pass_costs_less_once_it_measures_pairs`).
            credit_pairs: 0,
            eval_queries: 5,
            shown_at_most: retrieve,
            ..shape()
        };
        let base = plan(&shape, &pilot, Prices::default()).unwrap().total().tokens();
        for bigger in [
            Shape { epochs: epochs + 1, ..shape.clone() },
            Shape { train_queries: train + batch, ..shape.clone() },
            Shape { group_size: g + 1, ..shape.clone() },
            Shape { validate: validate + 1, ..shape.clone() },
        ] {
            let more = plan(&bigger, &pilot, Prices::default()).unwrap().total().tokens();
            prop_assert!(more >= base - 1e-6, "{bigger:?}: {more} < {base}");
        }
    }
}

#[test]
fn the_credit_pass_costs_less_once_it_measures_pairs() {
    // A library that grows past 2 × 6 lessons during the epoch: leave-one-out shows each of
    // 13 conditions nearly the whole library; the pairs' sides show about half of it.
    let shape = |train| Shape {
        train_queries: train,
        batch_size: 1,
        group_size: 2,
        credit_queries: 2,
        credit_pairs: 6,
        ..shape()
    };
    let mut pilot = pilot();
    pilot.kept_groups = pilot.groups;
    let credit_prompt = |train| {
        let plan = plan(&shape(train), &pilot, Prices::default()).unwrap();
        let credit = part(&plan, Part::Credit);
        (credit.calls, credit.prompt_tokens)
    };
    let (mut crossed, mut before) = (false, credit_prompt(1));
    for train in 2..200 {
        let now = credit_prompt(train);
        if now.1 < before.1 {
            // The same 13 conditions, each with fewer lessons in its prompt.
            assert_eq!(now.0, before.0, "train {train}");
            crossed = true;
            break;
        }
        before = now;
    }
    assert!(crossed, "the pass never switched to pairs");
}

#[test]
fn prompts_show_at_most_the_retrieved_lessons() {
    let mut pilot = pilot();
    pilot.kept_groups = pilot.groups;
    let shape = Shape {
        train_queries: 40,
        batch_size: 2,
        lessons_at_start: 20,
        eval_queries: 5,
        ..shape()
    };
    let all = plan(&shape, &pilot, Prices::default()).unwrap();
    let nearest = plan(
        &Shape {
            shown_at_most: 3,
            ..shape.clone()
        },
        &pilot,
        Prices::default(),
    )
    .unwrap();
    for p in [Part::Rollouts, Part::Evaluation] {
        assert!(
            part(&nearest, p).prompt_tokens < part(&all, p).prompt_tokens,
            "{p:?}"
        );
        assert_eq!(
            part(&nearest, p).completion_tokens,
            part(&all, p).completion_tokens
        );
    }
    // A library no larger than k is shown whole either way.
    let small = Shape {
        lessons_at_start: 0,
        train_queries: 1,
        batch_size: 1,
        ..shape
    };
    let whole = plan(&small, &pilot, Prices::default()).unwrap();
    let within = plan(
        &Shape {
            shown_at_most: 1000,
            ..small
        },
        &pilot,
        Prices::default(),
    )
    .unwrap();
    assert_eq!(whole, within);
}
