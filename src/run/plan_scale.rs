//! The pilot's figures scaled to the run being planned, one method per part of the run (see
//! the parent module for what each part counts).

use super::{Estimate, LATER_STEP_SHARE, Part, Pilot, Shape, add};
use crate::run::journal::Stage;

/// The pilot's figures scaled to a run of the shape: how the library grows, and what a group
/// of answers costs.
pub(super) struct Scale<'a> {
    pub(super) shape: &'a Shape,
    pub(super) pilot: &'a Pilot,
    /// Answers per group in the run.
    pub(super) g: f64,
    pub(super) steps: u64,
    pub(super) s: f64,
    pub(super) train: f64,
    pub(super) batch: f64,
    pub(super) steps_per_epoch: f64,
    /// The fraction of groups kept.
    pub(super) kept: f64,
    /// The chance that a step has a kept group whose extract call gives lessons, so
    /// consolidates and makes a candidate.
    pub(super) active: f64,
    /// Lessons the library gains per step.
    pub(super) growth: f64,
    l0: f64,
    /// Tokens per lesson.
    pub(super) tpl: f64,
    pub(super) mean_lessons: f64,
    pub(super) lessons_at_end: f64,
    pub(super) per_answer_prompt: bool,
    pub(super) base_prompt: f64,
    pub(super) base_per_answer: f64,
    pub(super) completion_per_answer: f64,
    pub(super) seconds_per_completion: f64,
}

impl<'a> Scale<'a> {
    pub(super) fn new(shape: &'a Shape, pilot: &'a Pilot) -> Self {
        let g = shape.group_size.max(1) as f64;
        let pilot_g = if pilot.group_size == 0 {
            g
        } else {
            pilot.group_size as f64
        };
        let steps = shape.steps();
        let batch = shape.batch_size.max(1).min(shape.train_queries.max(1)) as f64;
        let kept = pilot.kept_groups as f64 / pilot.groups as f64;
        let active = 1.0 - (1.0 - kept * pilot.extract_success.clamp(0.0, 1.0)).powf(batch);
        let growth = LATER_STEP_SHARE * pilot.net_lessons.max(0.0) * active;
        let mut scale = Scale {
            shape,
            pilot,
            g,
            steps,
            s: steps as f64,
            train: shape.train_queries as f64,
            batch,
            steps_per_epoch: (shape.train_queries.div_ceil(shape.batch_size.max(1))) as f64,
            kept,
            active,
            growth,
            l0: shape.lessons_at_start as f64,
            tpl: pilot.tokens_per_lesson,
            mean_lessons: 0.0,
            lessons_at_end: 0.0,
            // Rollout-like groups: a prompt of the group's base tokens plus the lessons it
            // shows.
            per_answer_prompt: !shape.prompt_once_per_group,
            base_prompt: 0.0,
            base_per_answer: 0.0,
            completion_per_answer: pilot.rollouts.completion_tokens as f64
                / (pilot.groups as f64 * pilot_g),
            seconds_per_completion: pilot.rollout_seconds / pilot.rollouts.completion_tokens as f64,
        };
        scale.mean_lessons = scale.lessons_at((scale.s - 1.0).max(0.0) / 2.0);
        scale.lessons_at_end = scale.lessons_at(scale.s);
        let pilot_group_prompt = pilot.rollouts.prompt_tokens as f64 / pilot.groups as f64;
        scale.base_prompt = (pilot_group_prompt
            - scale.shown(pilot.lessons as f64) * scale.tpl * scale.lesson_share(pilot_g))
        .max(0.0);
        scale.base_per_answer = scale.base_prompt / pilot_g;
        scale
    }

    fn lessons_at(&self, step: f64) -> f64 {
        self.l0 + self.growth * step
    }

    /// What a prompt shows of a library of `lessons`: its query's nearest `--retrieve` of them.
    fn shown(&self, lessons: f64) -> f64 {
        match self.shape.shown_at_most {
            0 => lessons,
            k => lessons.min(k as f64),
        }
    }

    /// How many times a group of `answers` shows its lessons.
    fn lesson_share(&self, answers: f64) -> f64 {
        if self.per_answer_prompt { answers } else { 1.0 }
    }

    fn group_prompt(&self, answers: f64, lessons: f64) -> f64 {
        let base = if self.per_answer_prompt {
            self.base_per_answer * answers
        } else {
            self.base_prompt
        };
        base + self.shown(lessons) * self.tpl * self.lesson_share(answers)
    }

    /// `groups` groups of `answers_each` answers shown `lessons` lessons.
    pub(super) fn answering(
        &self,
        part: Part,
        groups: f64,
        answers_each: f64,
        lessons: f64,
    ) -> Estimate {
        let completion = groups * answers_each * self.completion_per_answer;
        Estimate {
            part,
            calls: groups,
            answers: groups * answers_each,
            prompt_tokens: groups * self.group_prompt(answers_each, lessons),
            completion_tokens: completion,
            seconds: completion * self.seconds_per_completion,
            cost_usd: None,
        }
    }

    /// Prompt and completion tokens per call of `stage`, and its calls, as the pilot measured
    /// them.
    fn per_call(&self, stage: Stage) -> Option<(f64, f64, f64)> {
        self.pilot
            .stages
            .get(&stage)
            .filter(|(calls, _)| *calls > 0)
            .map(|(calls, usage)| {
                let calls = *calls as f64;
                (
                    usage.prompt_tokens as f64 / calls,
                    usage.completion_tokens as f64 / calls,
                    calls,
                )
            })
    }

    /// The stages, per call as the pilot measured them, added to `parts`; returns whether
    /// integrate was counted as an upper bound.
    pub(super) fn stages(&self, parts: &mut Vec<Estimate>) -> bool {
        let (shape, pilot, s, active) = (self.shape, self.pilot, self.s, self.active);
        let kept_groups = self.kept * f64::from(shape.epochs) * self.train;
        let pilot_kept = pilot.kept_groups as f64;
        let stage_tokens: u64 = pilot
            .stages
            .values()
            .map(|(_, u)| u.prompt_tokens + u.completion_tokens)
            .sum();
        let seconds_per_stage_token = if stage_tokens > 0 {
            pilot.stage_seconds / stage_tokens as f64
        } else {
            0.0
        };
        let grown = (self.mean_lessons - pilot.lessons as f64).max(0.0) * self.tpl;
        let mut stage = |stage: Stage, calls: f64, prompt: f64, completion: f64| {
            parts.push(Estimate {
                part: Part::Stage(stage),
                calls,
                answers: 0.0,
                prompt_tokens: calls * prompt,
                completion_tokens: calls * completion,
                seconds: calls * (prompt + completion) * seconds_per_stage_token,
                cost_usd: None,
            });
        };
        if pilot_kept > 0.0 {
            if let Some((p, c, calls)) = self.per_call(Stage::Summarize) {
                stage(Stage::Summarize, kept_groups * calls / pilot_kept, p, c);
            }
            if let Some((p, c, calls)) = self.per_call(Stage::Extract) {
                stage(
                    Stage::Extract,
                    kept_groups * calls / pilot_kept,
                    p + grown,
                    c,
                );
            }
        }
        // `--propose`: the pilot step's calls (`--propose-calls`, fewer when nothing failed)
        // each step.
        if let Some((p, c, calls)) = self.per_call(Stage::Propose) {
            stage(Stage::Propose, s * active * calls, p, c);
        }
        let consolidate = self.per_call(Stage::Consolidate);
        if let Some((p, c, _)) = consolidate {
            // The prompt lists the batch's proposals: scale it by the kept groups of a step.
            let scale = (self.batch * self.kept / pilot_kept.max(1.0)).max(1.0);
            stage(Stage::Consolidate, s * active, p * scale + grown, c);
        }
        let integrate = self.per_call(Stage::Integrate);
        let integrate_bound = self.l0 == 0.0 && pilot.lessons == 0;
        let integrate_calls = if integrate_bound {
            self.growth * (s - 1.0).max(0.0)
        } else {
            let observed = integrate.map_or(0.0, |(_, _, calls)| calls);
            observed * s * active
        };
        if integrate_calls > 0.0 {
            // Unobserved, an integrate call is about the size of a consolidate call.
            if let Some((p, c, _)) = integrate.or(consolidate) {
                stage(Stage::Integrate, integrate_calls, p, c);
            }
        }
        integrate_bound
    }

    /// The validation gate (the current library and the candidate, or each change, on V
    /// queries) and the source-problem trial, as one part.
    pub(super) fn validation(&self) -> Option<Estimate> {
        let (shape, pilot, s, active) = (self.shape, self.pilot, self.s, self.active);
        let outside = shape.train_queries.saturating_sub(shape.batch_size) as f64;
        let validated = (shape.validate as f64).min(outside);
        let mut validation = None;
        if validated > 0.0 {
            let conditions = if shape.validate_each && pilot.net_lessons > 1.0 {
                pilot.net_lessons + 1.0
            } else {
                2.0
            };
            validation = Some(self.answering(
                Part::Validation,
                s * active * conditions * validated,
                self.g,
                self.mean_lessons,
            ));
        }
        // The source-problem trial: each step's new lessons on up to N problems each, with a
        // control group per problem (counted as if no two lessons shared one, and every
        // lesson were drawn in every round: an upper bound).
        if shape.admit > 0 && pilot.net_lessons > 0.0 {
            let rounds = shape.admit_rounds.max(1) as f64;
            let groups = 2.0 * pilot.net_lessons * shape.admit as f64 * rounds;
            let k = shape.admit_answers.max(1) as f64;
            let trial = self.answering(Part::Validation, s * active * groups, k, self.mean_lessons);
            validation = Some(match validation {
                None => trial,
                Some(sum) => add(sum, &trial),
            });
        }
        validation
    }

    /// The credit pass after each epoch: the full library and each lesson left out, or past
    /// 2 × pairs lessons the full library and the pairs' two sides.
    pub(super) fn credit(&self) -> Option<Estimate> {
        let shape = self.shape;
        if shape.credit_queries == 0 {
            return None;
        }
        let queries = (shape.credit_queries as f64).min(self.train);
        let mut credit: Option<Estimate> = None;
        for epoch in 1..=shape.epochs {
            let lessons = self.lessons_at(self.steps_per_epoch * f64::from(epoch));
            if lessons < 0.5 {
                continue;
            }
            let pairs = shape.credit_pairs as f64;
            // Conditions, and the lessons a condition shows on average (a pair's sides split
            // the library between them).
            let (conditions, shown) = if shape.credit_pairs == 0 || lessons <= 2.0 * pairs {
                (lessons + 1.0, lessons)
            } else {
                let conditions = 2.0 * pairs + 1.0;
                (conditions, (lessons + pairs * lessons) / conditions)
            };
            let part = self.answering(Part::Credit, conditions * queries, self.g, shown);
            credit = Some(match credit {
                None => part,
                Some(sum) => add(sum, &part),
            });
        }
        credit
    }

    /// The final evaluation: without the library, with the placebo, with the library.
    pub(super) fn evaluation(&self) -> Option<Estimate> {
        let shape = self.shape;
        if shape.eval_queries == 0 {
            return None;
        }
        let h = shape.eval_queries as f64;
        let k = shape.eval_k.max(1) as f64;
        let mut eval = self.eval_condition(h, k, 0.0);
        eval = add(eval, &self.eval_condition(h, k, self.lessons_at_end));
        if shape.eval_placebo && self.lessons_at_end >= 0.5 {
            eval = add(eval, &self.eval_condition(h, k, self.lessons_at_end));
        }
        Some(eval)
    }

    /// One condition of the final evaluation: `h` queries × `k` answers shown `lessons`
    /// lessons. Held-out answers can run longer or shorter than training ones (another
    /// prompt): the eval pilot's figures when it ran, else the rollouts'.
    fn eval_condition(&self, h: f64, k: f64, lessons: f64) -> Estimate {
        match &self.pilot.eval {
            Some(measured) if measured.groups > 0 && measured.usage.completion_tokens > 0 => {
                let groups = measured.groups as f64;
                let per_answer = measured.usage.completion_tokens as f64 / measured.answers as f64;
                let base = measured.usage.prompt_tokens as f64 / groups;
                let base = if self.per_answer_prompt {
                    base / (measured.answers as f64 / groups) * k
                } else {
                    base
                };
                let completion = h * k * per_answer;
                Estimate {
                    part: Part::Evaluation,
                    calls: h,
                    answers: h * k,
                    prompt_tokens: h
                        * (base + self.shown(lessons) * self.tpl * self.lesson_share(k)),
                    completion_tokens: completion,
                    seconds: completion * measured.seconds
                        / measured.usage.completion_tokens as f64,
                    cost_usd: None,
                }
            }
            _ => self.answering(Part::Evaluation, h, k, lessons),
        }
    }
}
