use std::collections::{BTreeMap, BTreeSet, HashSet};

use proptest::prelude::{any, prop_assert, proptest};

use super::super::rng::Rng;
use super::super::{Split, load};
use super::*;

fn recompute(problem: Gsm) -> f64 {
    match problem {
        Gsm::Remainder(p) => p.recompute(),
        Gsm::Each(p) => p.recompute(),
        Gsm::Rate(p) => p.recompute(),
        Gsm::Units(p) => p.recompute(),
        Gsm::Percent(p) => p.recompute(),
        Gsm::Ages(p) => p.recompute(),
    }
}

/// `Family(Template`: the key up to the template's fields.
fn template(problem: Gsm) -> String {
    let key = problem.key();
    key.split(" {").next().unwrap_or(&key).to_owned()
}

/// The answer is exact at every step and agrees with the floating-point recomputation.
fn check(problem: Gsm, question: &str) {
    let answer = problem
        .answer()
        .unwrap_or_else(|| panic!("an inexact step in {problem:?}: {question}"));
    let expected = recompute(problem);
    assert!(
        (f64::from(answer) - expected).abs() < 1e-9,
        "{problem:?}: answer {answer}, recomputed {expected}: {question}"
    );
    assert!(answer > 0, "{problem:?}: {question}");
    assert!(question.ends_with('?'), "{question}");
    assert!(!question.contains("  "), "{question:?}");
}

#[test]
fn every_template_is_exact_over_thousands_of_seeds() {
    let mut drawn: BTreeMap<String, usize> = BTreeMap::new();
    for seed in 0..3000 {
        let (problem, question) = draw(&mut Rng::new(seed));
        check(problem, &question);
        *drawn.entry(template(problem)).or_default() += 1;
    }
    let templates: Vec<_> = drawn.keys().map(String::as_str).collect();
    assert_eq!(
        templates,
        [
            "Ages(AgoLater",
            "Ages(Sum",
            "Ages(Times",
            "Each(Change",
            "Each(Legs",
            "Each(Snacks",
            "Percent(DiscountTax",
            "Percent(Rises",
            "Percent(Spend",
            "Rate(Drive",
            "Rate(Together",
            "Rate(UnitPrice",
            "Remainder(Packing",
            "Remainder(Trip",
            "Units(Cents",
            "Units(Dozens",
            "Units(Films",
            "Units(Practice",
            "Units(Rope",
        ]
    );
    // No template is starved: each of the 19 gets a fair share of 3000 draws.
    assert!(drawn.values().all(|&n| n > 50), "{drawn:?}");
}

#[test]
fn all_six_families_reach_the_suite() {
    let (train, heldout) = super::super::generate(&SUITE, 0);
    assert_eq!(train.len() + heldout.len(), 700);
    let mut rng = Rng::for_suite("gsm", 0);
    let families: HashSet<Family> = (0..700).map(|_| draw(&mut rng).0.family()).collect();
    assert_eq!(families.len(), 6);
}

#[test]
fn every_remainder_question_kind_is_asked() {
    let mut asks = BTreeSet::new();
    let mut rng = Rng::new(3);
    for _ in 0..500 {
        let (remainder::Remainder::Packing { ask, .. } | remainder::Remainder::Trip { ask, .. }) =
            remainder::Remainder::draw(&mut rng);
        asks.insert(format!("{ask:?}"));
    }
    assert_eq!(asks.len(), 4, "{asks:?}");
}

#[test]
fn the_traps_give_different_answers_than_the_shortcuts() {
    let mut rng = Rng::new(17);
    for _ in 0..2000 {
        match draw(&mut rng).0 {
            // 25% off then 10% tax is not 15% off.
            Gsm::Percent(
                problem @ percent::Percent::DiscountTax {
                    price,
                    discount,
                    tax,
                },
            ) => {
                let additive =
                    f64::from(price) * (1.0 - f64::from(discount) / 100.0 + f64::from(tax) / 100.0);
                assert_ne!(
                    f64::from(problem.answer().unwrap()),
                    additive,
                    "{problem:?}"
                );
            }
            // The average speed is not the mean of the speeds.
            Gsm::Rate(
                problem @ rate::Rate::Drive {
                    speed1,
                    speed2,
                    average: true,
                    ..
                },
            ) => {
                let mean = f64::from(speed1 + speed2) / 2.0;
                assert_ne!(f64::from(problem.answer().unwrap()), mean, "{problem:?}");
            }
            // A multiple of ages holds only at the time it is stated.
            Gsm::Ages(problem @ ages::Ages::Times { b_now, factor, .. }) => {
                assert_ne!(problem.answer().unwrap(), factor * b_now, "{problem:?}");
            }
            _ => {}
        }
    }
}

#[test]
fn one_problem_has_several_wordings_and_one_key() {
    let mut rng = Rng::new(8);
    let mut reworded = 0;
    for _ in 0..200 {
        let problem = Gsm::draw(&mut rng);
        let wordings: HashSet<String> = (0..8).map(|_| problem.word(&mut rng)).collect();
        reworded += usize::from(wordings.len() > 1);
    }
    assert!(
        reworded > 190,
        "only {reworded} of 200 problems have two wordings"
    );
    // The key is the template and its numbers: names, items and phrasing are not in it.
    let key = Gsm::Ages(ages::Ages::Sum {
        people: 2,
        sum: 30,
        years: 4,
    })
    .key();
    assert_eq!(key, "Ages(Sum { people: 2, sum: 30, years: 4 })");
}

#[test]
fn splits_are_disjoint_by_key_and_deterministic() {
    let (train, heldout) = super::super::generate(&SUITE, 5);
    let keys: HashSet<_> = train.iter().map(|p| &p.key).collect();
    assert!(heldout.iter().all(|p| !keys.contains(&p.key)));
    let (again, _) = super::super::generate(&SUITE, 5);
    let texts = |problems: &[Problem]| -> Vec<String> {
        problems
            .iter()
            .map(|p| format!("{} => {}", p.question, p.answer))
            .collect()
    };
    assert_eq!(texts(&train), texts(&again));
}

#[test]
fn the_suite_is_graded_numerically_and_asks_for_steps() {
    let dataset = load("gsm", Split::Heldout, 0).unwrap();
    assert_eq!(dataset.default_reward.as_deref(), Some("numeric"));
    let instruction = dataset.instruction.unwrap();
    assert!(instruction.contains("step by step") && instruction.contains("Answer:"));
    assert_eq!(dataset.samples[3].id, "gsm-heldout-0003");
    assert!(
        dataset
            .samples
            .iter()
            .all(|s| s.answer.parse::<u32>().is_ok())
    );
}

#[test]
fn one_question_per_family_is_pinned() {
    let mut rng = Rng::new(2024);
    let mut first: BTreeMap<String, String> = BTreeMap::new();
    while first.len() < 6 {
        let (problem, question) = draw(&mut rng);
        let answer = problem.answer().unwrap();
        first
            .entry(format!("{:?}", problem.family()))
            .or_insert_with(|| format!("{question} => {answer}"));
    }
    let lines: Vec<_> = first
        .iter()
        .map(|(family, q)| format!("{family}: {q}"))
        .collect();
    insta::assert_snapshot!(lines.join("\n"), @r"
        Ages: The ages of Tara, Pablo, Leo and Hiro add up to 105 years. What will their ages add up to in 9 years? => 141
        Each: A farm has 10 chickens, 13 horses and 11 sheep. How many legs do the animals have altogether? => 116
        Percent: The price of a desk is $580. It rises by 10% in spring, and in autumn it rises by 50% of the spring price. How many dollars does it cost after both increases? => 957
        Rate: A train travels at 55 km/h for 2 hours and then at 75 km/h for the next 3 hours. What is the total distance traveled, in kilometers? => 335
        Remainder: There are 5 trays of 8 muffins. 5 of the muffins are set aside for a party, and the others are packed 12 to a box. How many muffins do not fit into a full box? => 11
        Units: For 6 weeks, Leo spends 25 minutes on the piano on each of 2 days every week. How many hours is that in total? => 5
    ");
}

#[test]
fn first_train_questions_are_pinned() {
    let samples = load("gsm", Split::Train, 0).unwrap().samples;
    let lines: Vec<_> = samples[..4]
        .iter()
        .map(|s| format!("{}: {} => {}", s.id, s.question, s.answer))
        .collect();
    insta::assert_snapshot!(lines.join("\n"), @r"
        gsm-train-0000: A team of 6 children shares a snack table. Every child puts 4 strawberries on the table and later takes 3 strawberries to eat. How many strawberries are still on the table? => 6
        gsm-train-0001: The ages of Tara, Aisha and Pablo add up to 98 years. What will their ages add up to in 10 years? => 128
        gsm-train-0002: The price of a guitar is $390. It rises by 50% in spring, and in autumn it rises by 20% of the spring price. How many dollars does it cost after both increases? => 702
        gsm-train-0003: Keiko paid $6 for 3 light bulbs. At the same price per light bulb, how many dollars would 2 light bulbs cost? => 4
    ");
}

proptest! {
    #[test]
    fn any_seed_gives_an_exact_answer(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        for _ in 0..4 {
            let (problem, question) = draw(&mut rng);
            check(problem, &question);
            let generated = generate(&mut Rng::new(seed));
            prop_assert!(!generated.key.is_empty());
        }
    }
}
