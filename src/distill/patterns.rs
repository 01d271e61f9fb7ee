//! The differences between right and wrong answers that recur over a step's groups, for the
//! propose stage (`--propose`): "in 5 of the 7 problems answered both right and wrong, wrong
//! answers wrote Python code and an output that nothing ran".
//!
//! Why: extract sees one group at a time, and the 1.5B distiller wrote no lesson about what
//! most groups shared. In the ninth paper-setting run (1.5B on `builtin:arith`) 28 of the 40
//! mixed groups had wrong answers writing code where no right answer did, and the held-out
//! answers with code were right 45 % of the time against 90 % without (docs/benchmarks.md);
//! shown the code fact group by group, the tenth run's distiller still wrote "When addition
//! and subtraction, add or subtract the numbers correctly". Propose writes a procedure for a
//! step's failed problems; told what recurs in the answers, its procedure can avoid it. Like
//! [`super::contrast`]'s facts, a pattern states what was seen, not what to do.

use super::contrast::{Kind, all_facts};
use super::prompt::grade;
use crate::data::Sample;
use crate::rollout::RolloutGroup;

/// Fewest groups a kind of difference must be seen in to be a pattern: once is one problem.
pub const MIN_GROUPS: usize = 2;

/// The kinds of difference seen in at least [`MIN_GROUPS`] of `groups` (only groups with
/// both right and wrong answers have any), most often seen first, one sentence each naming
/// how many groups showed it.
pub fn step_patterns<'a>(
    groups: impl IntoIterator<Item = (&'a Sample, &'a RolloutGroup)>,
) -> Vec<String> {
    let mut mixed = 0;
    // Per kind: the groups showing it, and how many of those had only invented outputs.
    let mut seen: Vec<(Kind, usize, usize)> = Vec::new();
    let same = |a: &Kind, b: &Kind| std::mem::discriminant(a) == std::mem::discriminant(b);
    for (sample, group) in groups {
        let graded = |name: &str| group.answers.iter().any(|a| grade(a.reward) == name);
        if !(graded("correct") && graded("wrong")) {
            continue;
        }
        mixed += 1;
        let facts = all_facts(&sample.question, &sample.answer, &group.answers);
        let mut kinds: Vec<Kind> = Vec::new();
        for fact in &facts {
            if !kinds.iter().any(|kind| same(kind, &fact.kind)) {
                kinds.push(fact.kind);
            }
        }
        for kind in kinds {
            let invented = matches!(kind, Kind::WrongCode { invented: true });
            match seen.iter_mut().find(|(k, _, _)| same(k, &kind)) {
                Some((_, count, invented_count)) => {
                    *count += 1;
                    *invented_count += usize::from(invented);
                }
                None => seen.push((kind, 1, usize::from(invented))),
            }
        }
    }
    // Stable: kinds seen equally often keep the order facts are stated in.
    seen.sort_by_key(|&(_, count, _)| std::cmp::Reverse(count));
    seen.into_iter()
        .filter(|&(_, count, _)| count >= MIN_GROUPS)
        .map(|(kind, count, invented)| {
            let what = match kind {
                Kind::WrongCode { .. } if invented == count => {
                    "wrong answers wrote Python code and an output for it that nothing ran, \
                     while every right answer worked the numbers out in words"
                }
                Kind::WrongCode { .. } => {
                    "wrong answers wrote code, while every right answer worked the numbers out \
                     in words"
                }
                Kind::RightCode => "every right answer wrote code and some wrong answer did not",
                Kind::UnusedNumber => {
                    "a wrong answer never used one of the numbers the problem gives, while \
                     every right answer used it"
                }
                Kind::Reached => {
                    "every right answer worked out an intermediate result that no wrong answer \
                     reached"
                }
            };
            format!("In {count} of the {mixed} problems answered both right and wrong, {what}.")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::testing::{answer, group, problem};

    fn answered(answers: &[(&str, f64)]) -> RolloutGroup {
        let mut g = group();
        g.answers = answers.iter().map(|&(text, r)| answer(text, r)).collect();
        g
    }

    /// Code using both numbers and an output nothing ran.
    fn coded(a: u32, b: u32) -> String {
        format!("```python\nprint({a} + {b})\n```\n```output\n8\n```\nAnswer: 8")
    }

    #[test]
    fn a_difference_seen_in_two_groups_is_a_pattern_and_one_seen_once_is_not() {
        let (a, b, c, d) = (
            problem("a", "Tom has 3 apples and buys 4 more. How many?", "7"),
            problem("b", "Ann has 5 pens and buys 2 more. How many?", "7"),
            problem("c", "Sam has 9 cards and gives away 2. How many?", "7"),
            problem("d", "Kim has 1 cat. How many cats?", "1"),
        );
        let ga = answered(&[("3 + 4 = 7. Answer: 7", 1.0), (&coded(3, 4), 0.0)]);
        let gb = answered(&[("5 + 2 = 7. Answer: 7", 1.0), (&coded(5, 2), 0.0)]);
        // Wrong without code, and never using the 9.
        let gc = answered(&[("9 - 2 = 7. Answer: 7", 1.0), ("2 + 2 = 4. Answer: 4", 0.0)]);
        // All right: no facts, and not a mixed group.
        let gd = answered(&[("Answer: 1", 1.0), ("Answer: 1", 1.0)]);
        let patterns = step_patterns([(&a, &ga), (&b, &gb), (&c, &gc), (&d, &gd)]);
        assert_eq!(
            patterns,
            [
                "In 2 of the 3 problems answered both right and wrong, wrong answers wrote Python \
                 code and an output for it that nothing ran, while every right answer worked the \
                 numbers out in words."
            ],
            "{patterns:?}"
        );
    }

    #[test]
    fn the_commonest_pattern_comes_first_and_kinds_are_counted_once_per_group() {
        let (a, b, c) = (
            problem("a", "Tom has 3 apples and buys 4 more. How many?", "7"),
            problem("b", "Ann has 5 pens and buys 2 more. How many?", "7"),
            problem("c", "Sam has 9 cards and gives away 2. How many?", "7"),
        );
        // Each wrong answer leaves out both of the problem's numbers: two facts, one kind.
        let ga = answered(&[("3 + 4 = 7. Answer: 7", 1.0), ("Answer: 6", 0.0)]);
        let gb = answered(&[("5 + 2 = 7. Answer: 7", 1.0), ("Answer: 6", 0.0)]);
        let gc = answered(&[
            ("9 - 2 = 7. Answer: 7", 1.0),
            ("```python\nprint(9 - 2)\n```\nAnswer: 6", 0.0),
        ]);
        let patterns = step_patterns([(&a, &ga), (&b, &gb), (&c, &gc)]);
        assert_eq!(patterns.len(), 1, "{patterns:?}");
        assert!(
            patterns[0].starts_with("In 2 of the 3 problems answered both right and wrong, a wrong answer never used one of the numbers"),
            "{patterns:?}"
        );
    }
}
