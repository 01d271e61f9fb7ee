//! Tests of `calc` (a file of their own to keep calc.rs short).

use super::*;
use proptest::prelude::*;

fn eval(text: &str) -> String {
    match evaluate(text) {
        Ok(n) => n.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn arithmetic_follows_the_usual_precedence() {
    assert_eq!(eval("1 + 2 * 3"), "7");
    assert_eq!(eval("(1 + 2) * 3"), "9");
    assert_eq!(eval("2 ^ 3 ^ 2"), "512");
    assert_eq!(eval("2 ** 10"), "1024");
    assert_eq!(eval("-2^2"), "-4");
    assert_eq!(eval("2^-1"), "0.5");
    assert_eq!(eval("--3"), "3");
    assert_eq!(eval("+4 - -1"), "5");
    assert_eq!(eval("10 / 4"), "2.5");
    assert_eq!(eval("12 / 4"), "3");
    assert_eq!(eval("7 % 3"), "1");
    assert_eq!(eval("-7 % 3"), "2");
    assert_eq!(eval("7 % -3"), "-2");
    assert_eq!(eval("5.5 % 2"), "1.5");
    assert_eq!(eval("0.1 + 0.2"), "0.30000000000000004");
    assert_eq!(eval(".5 * 4"), "2");
    assert_eq!(eval("1.5e3 + 2E-1"), "1500.2");
    assert_eq!(eval("  3  "), "3");
}

#[test]
fn integers_stay_exact() {
    assert_eq!(eval("2^62 + 1"), "4611686018427387905");
    assert_eq!(eval("2^100"), "1267650600228229401496703205376");
    assert_eq!(eval("99999999999999999999 * 3"), "299999999999999999997");
    // Past i128 the value continues as a float.
    assert_eq!(eval("2^200"), "1.6069380442589903e60");
    assert_eq!(
        eval("170141183460469231731687303715884105727 + 1"),
        "1.7014118346046923e38"
    );
}

#[test]
fn functions_and_constants() {
    assert_eq!(eval("sqrt(16)"), "4");
    assert_eq!(eval("sqrt(2)"), "1.4142135623730951");
    assert_eq!(eval("abs(-3)"), "3");
    assert_eq!(eval("floor(2.7) + ceil(2.1) + round(2.5)"), "8");
    assert_eq!(eval("round(-2.5)"), "-3");
    assert_eq!(eval("min(3, 1, 2)"), "1");
    assert_eq!(eval("max(3, 1.5 * 4, 2)"), "6");
    assert_eq!(eval("ln(e)"), "1");
    assert_eq!(eval("log10(1000)"), "3");
    assert_eq!(eval("exp(0)"), "1");
    assert_eq!(eval("sin(0) + cos(0)"), "1");
    assert_eq!(eval("round(tan(pi / 4) * 1000)"), "1000");
    assert_eq!(eval("pi"), "3.141592653589793");
    assert_eq!(eval("1e-9"), "1e-9");
}

#[test]
fn errors_say_what_and_where() {
    assert_eq!(eval("(1 + 2))"), "error: unexpected `)` at column 8");
    assert_eq!(eval("1 + * 2"), "error: unexpected `*` at column 5");
    assert_eq!(
        eval("(1 + 2"),
        "error: unexpected end of the expression at column 7"
    );
    assert_eq!(eval("1 / 0"), "error: division by zero at column 3");
    assert_eq!(eval("5 % (2 - 2)"), "error: division by zero at column 3");
    assert_eq!(eval("1 / 0.0"), "error: division by zero at column 3");
    assert_eq!(eval("10.0 ^ 400"), "error: overflow in `^` at column 6");
    assert_eq!(eval("exp(1000)"), "error: overflow in `exp` at column 1");
    assert_eq!(
        eval("sqrt(-1)"),
        "error: `sqrt` of a negative number at column 1"
    );
    assert_eq!(
        eval("ln(0)"),
        "error: `ln` needs a positive argument at column 1"
    );
    assert_eq!(
        eval("(-8) ^ 0.5"),
        "error: `^` is undefined for these arguments at column 6"
    );
    assert_eq!(
        eval("foo(1)"),
        format!("error: unknown function `foo` (the functions are {FUNCTIONS}) at column 1")
    );
    assert_eq!(
        eval("x + 1"),
        "error: unknown name `x` (the constants are pi and e) at column 1"
    );
    assert_eq!(
        eval("sqrt(1, 2)"),
        "error: `sqrt` takes 1 argument(s), got 2 at column 1"
    );
    assert_eq!(
        eval("max()"),
        "error: `max` needs at least one argument at column 1"
    );
    assert_eq!(eval("2e"), "error: unexpected `e` at column 2");
    assert_eq!(eval("1,000"), "error: unexpected `,` at column 2");
    assert_eq!(eval(""), "error: the expression is empty");
    assert_eq!(eval("."), "error: a number needs digits at column 1");
    assert_eq!(
        eval("1e999"),
        "error: the number `1e999` is too large at column 1"
    );
    let long = "1+".repeat(600) + "1";
    assert_eq!(
        eval(&long),
        "error: the expression is 1201 characters long; the limit is 1000"
    );
    let deep = "(".repeat(100) + "1" + &")".repeat(100);
    assert!(eval(&deep).starts_with("error: nested deeper than 64 levels"));
    assert!(eval(&"-".repeat(500)).starts_with("error: nested deeper than 64 levels"));
}

#[tokio::test]
async fn the_tool_reads_its_arguments_and_reports_errors() {
    let calc = Calc::default();
    assert_eq!(calc.spec().name, "calc");
    assert_eq!(calc.spec().parameters["required"], json!(["expression"]));
    assert_eq!(
        calc.call(json!({"expression": "6 * 7"})).await,
        Ok("42".into())
    );
    assert_eq!(calc.call(json!({"expression": 12})).await, Ok("12".into()));
    assert_eq!(
        calc.call(json!({"expression": "1/0"})).await,
        Err(ToolError::Failed {
            tool: "calc".into(),
            message: "division by zero at column 2".into()
        })
    );
    assert!(matches!(
        calc.call(json!({"expr": "1"})).await,
        Err(ToolError::InvalidArguments { .. })
    ));
}

proptest! {
    #[test]
    fn never_panics_on_any_text(text in "\\PC{0,200}") {
        let _ = evaluate(&text);
    }

    #[test]
    fn never_panics_on_arithmetic_looking_text(text in "[0-9.eE+*/%^() -]{0,300}|[a-z0-9(),.+*/^ -]{0,100}") {
        let _ = evaluate(&text);
    }

    #[test]
    fn integer_sums_and_products_are_exact(a in -1_000_000_000_000i64..1_000_000_000_000, b in -1_000_000i64..1_000_000) {
        prop_assert_eq!(eval(&format!("{a} + ({b})")), (a as i128 + b as i128).to_string());
        prop_assert_eq!(eval(&format!("{a} * ({b})")), (a as i128 * b as i128).to_string());
    }
}
