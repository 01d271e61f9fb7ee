//! `calc`: an arithmetic expression evaluator. It parses and evaluates in one pass (recursive
//! descent) and never executes code, so a model can call it on any text. Integers stay exact
//! (i128) as long as they fit; a result that leaves i128 continues as a float rather than failing,
//! because a calculator that refuses `2^200` is less useful than one that answers `1.6e60`.

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Tool, ToolError};
use crate::backend::ToolSpec;

/// Longer expressions are refused: no arithmetic a model needs is that long.
pub const MAX_EXPRESSION_CHARS: usize = 1000;
/// Deeper nesting (parentheses, unary signs, powers) is refused so the parser's recursion is bounded.
const MAX_DEPTH: usize = 64;

/// Why an expression could not be evaluated. `column` is 1-based, in characters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}{}", column.map(|c| format!(" at column {c}")).unwrap_or_default())]
pub struct CalcError {
    pub message: String,
    pub column: Option<usize>,
}

/// A number: an exact integer or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn float(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl std::fmt::Display for Num {
    /// Integers (and integral floats of ordinary size) without `.0`; very large or small floats in
    /// scientific notation; otherwise the shortest text that reads back as the same float.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(0.0) => write!(f, "0"),
            Num::Float(x) if x.abs() >= 1e16 || x.abs() < 1e-6 => write!(f, "{x:e}"),
            Num::Float(x) if x.fract() == 0.0 => write!(f, "{}", x as i128),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

/// Evaluates `expression`: `+ - * / % ^ (or **)`, parentheses, unary signs, decimals, scientific
/// notation, the functions sqrt abs floor ceil round min max ln log10 exp sin cos tan, and the
/// constants pi and e. `%` takes the sign of the divisor (as in Python); `^` is right-associative
/// and binds tighter than unary minus (`-2^2` is -4).
pub fn evaluate(expression: &str) -> Result<Num, CalcError> {
    let chars = expression.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(CalcError {
            message: format!(
                "the expression is {chars} characters long; the limit is {MAX_EXPRESSION_CHARS}"
            ),
            column: None,
        });
    }
    let mut parser = Parser {
        chars: expression.chars().collect(),
        pos: 0,
        depth: 0,
    };
    parser.skip_space();
    if parser.peek().is_none() {
        return Err(CalcError {
            message: "the expression is empty".into(),
            column: None,
        });
    }
    let value = parser.expr()?;
    parser.skip_space();
    match parser.peek() {
        None => Ok(value),
        Some(_) => Err(parser.unexpected()),
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

const FUNCTIONS: &str = "sqrt, abs, floor, ceil, round, min, max, ln, log10, exp, sin, cos, tan";

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn error(&self, message: impl Into<String>, pos: usize) -> CalcError {
        CalcError {
            message: message.into(),
            column: Some(pos + 1),
        }
    }

    fn unexpected(&self) -> CalcError {
        match self.peek() {
            Some(c) => self.error(format!("unexpected `{c}`"), self.pos),
            None => CalcError {
                message: "unexpected end of the expression".into(),
                column: Some(self.chars.len() + 1),
            },
        }
    }

    /// Consumes `c` (after spaces) if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("nested deeper than {MAX_DEPTH} levels"), self.pos));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Num, CalcError> {
        let mut value = self.term()?;
        loop {
            self.skip_space();
            let at = self.pos;
            let op = match self.peek() {
                Some(op @ ('+' | '-')) => op,
                _ => return Ok(value),
            };
            self.pos += 1;
            let right = self.term()?;
            value = binary(op, value, right).map_err(|m| self.error(m, at))?;
        }
    }

    fn term(&mut self) -> Result<Num, CalcError> {
        let mut value = self.unary()?;
        loop {
            self.skip_space();
            let at = self.pos;
            let op = match (self.peek(), self.chars.get(self.pos + 1)) {
                (Some('*'), Some('*')) => return Ok(value),
                (Some(op @ ('*' | '/' | '%')), _) => op,
                _ => return Ok(value),
            };
            self.pos += 1;
            let right = self.unary()?;
            value = binary(op, value, right).map_err(|m| self.error(m, at))?;
        }
    }

    fn unary(&mut self) -> Result<Num, CalcError> {
        self.skip_space();
        match self.peek() {
            Some(sign @ ('-' | '+')) => {
                self.pos += 1;
                self.enter()?;
                let value = self.unary()?;
                self.depth -= 1;
                if sign == '+' {
                    return Ok(value);
                }
                Ok(match value {
                    Num::Int(i) => i.checked_neg().map_or(Num::Float(-(i as f64)), Num::Int),
                    Num::Float(f) => Num::Float(-f),
                })
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<Num, CalcError> {
        let base = self.primary()?;
        self.skip_space();
        let at = self.pos;
        let is_pow = match self.peek() {
            Some('^') => {
                self.pos += 1;
                true
            }
            Some('*') if self.chars.get(self.pos + 1) == Some(&'*') => {
                self.pos += 2;
                true
            }
            _ => false,
        };
        if !is_pow {
            return Ok(base);
        }
        self.enter()?;
        let exponent = self.unary()?;
        self.depth -= 1;
        binary('^', base, exponent).map_err(|m| self.error(m, at))
    }

    fn primary(&mut self) -> Result<Num, CalcError> {
        self.skip_space();
        let at = self.pos;
        match self.peek() {
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if c.is_alphabetic() => {
                let name: String = self.take_while(|c| c.is_alphanumeric() || c == '_');
                self.skip_space();
                if self.peek() == Some('(') {
                    self.pos += 1;
                    self.call(&name, at)
                } else {
                    match name.as_str() {
                        "pi" => Ok(Num::Float(std::f64::consts::PI)),
                        "e" => Ok(Num::Float(std::f64::consts::E)),
                        _ => Err(self.error(
                            format!("unknown name `{name}` (the constants are pi and e)"),
                            at,
                        )),
                    }
                }
            }
            Some('(') => {
                self.pos += 1;
                self.enter()?;
                let value = self.expr()?;
                self.depth -= 1;
                if !self.eat(')') {
                    return Err(self.unexpected());
                }
                Ok(value)
            }
            _ => Err(self.unexpected()),
        }
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let start = self.pos;
        while self.peek().is_some_and(&keep) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn number(&mut self) -> Result<Num, CalcError> {
        let at = self.pos;
        let mut text = self.take_while(|c| c.is_ascii_digit());
        let mut is_float = false;
        if self.peek() == Some('.') {
            self.pos += 1;
            is_float = true;
            text.push('.');
            text.push_str(&self.take_while(|c| c.is_ascii_digit()));
        }
        if text == "." {
            return Err(self.error("a number needs digits", at));
        }
        // An exponent only when digits follow, so `2e` stays "2 then the name e" (an error).
        if matches!(self.peek(), Some('e' | 'E')) {
            let mut look = self.pos + 1;
            if matches!(self.chars.get(look), Some('+' | '-')) {
                look += 1;
            }
            if self.chars.get(look).is_some_and(char::is_ascii_digit) {
                let start = self.pos;
                self.pos = look;
                self.take_while(|c| c.is_ascii_digit());
                text.extend(&self.chars[start..self.pos]);
                is_float = true;
            }
        }
        if !is_float && let Ok(i) = text.parse::<i128>() {
            return Ok(Num::Int(i));
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Num::Float(f)),
            _ => Err(self.error(format!("the number `{text}` is too large"), at)),
        }
    }

    fn call(&mut self, name: &str, at: usize) -> Result<Num, CalcError> {
        self.enter()?;
        let mut args = Vec::new();
        if !self.eat(')') {
            loop {
                args.push(self.expr()?);
                if self.eat(')') {
                    break;
                }
                if !self.eat(',') {
                    return Err(self.unexpected());
                }
            }
        }
        self.depth -= 1;
        function(name, &args).map_err(|m| self.error(m, at))
    }
}

/// Floats that left the finite reals become errors instead of `inf`/`NaN` answers.
fn finite(op: &str, x: f64) -> Result<Num, String> {
    if x.is_nan() {
        Err(format!("`{op}` is undefined for these arguments"))
    } else if x.is_infinite() {
        Err(format!("overflow in `{op}`"))
    } else {
        Ok(Num::Float(x))
    }
}

fn binary(op: char, a: Num, b: Num) -> Result<Num, String> {
    use Num::{Float, Int};
    let zero = matches!(b, Int(0)) || matches!(b, Float(f) if f == 0.0);
    if matches!(op, '/' | '%') && zero {
        return Err("division by zero".into());
    }
    let exact = match (op, a, b) {
        ('+', Int(x), Int(y)) => x.checked_add(y),
        ('-', Int(x), Int(y)) => x.checked_sub(y),
        ('*', Int(x), Int(y)) => x.checked_mul(y),
        ('/', Int(x), Int(y)) if x.checked_rem(y) == Some(0) => x.checked_div(y),
        ('%', Int(x), Int(y)) => x.checked_rem(y).map(|r| {
            if r != 0 && (r < 0) != (y < 0) {
                r + y
            } else {
                r
            }
        }),
        ('^', Int(x), Int(y)) if y >= 0 => u32::try_from(y).ok().and_then(|y| x.checked_pow(y)),
        _ => None,
    };
    if let Some(i) = exact {
        return Ok(Int(i));
    }
    let (x, y) = (a.float(), b.float());
    let value = match op {
        '+' => x + y,
        '-' => x - y,
        '*' => x * y,
        '/' => x / y,
        '%' => {
            let r = x % y;
            if r != 0.0 && (r < 0.0) != (y < 0.0) {
                r + y
            } else {
                r
            }
        }
        _ => x.powf(y),
    };
    finite(&op.to_string(), value)
}

fn function(name: &str, args: &[Num]) -> Result<Num, String> {
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!(
                "`{name}` takes {n} argument(s), got {}",
                args.len()
            ))
        }
    };
    // Integral results of rounding are exact integers when they fit.
    let integral = |x: f64| {
        if x.abs() < 1e30 {
            Ok(Num::Int(x as i128))
        } else {
            finite(name, x)
        }
    };
    match name {
        "min" | "max" => {
            let Some(&first) = args.first() else {
                return Err(format!("`{name}` needs at least one argument"));
            };
            Ok(args.iter().copied().fold(first, |best, x| {
                let better = if name == "min" {
                    x.float() < best.float()
                } else {
                    x.float() > best.float()
                };
                if better { x } else { best }
            }))
        }
        "abs" => {
            arity(1)?;
            match args[0] {
                Num::Int(i) => Ok(i
                    .checked_abs()
                    .map_or(Num::Float((i as f64).abs()), Num::Int)),
                Num::Float(f) => Ok(Num::Float(f.abs())),
            }
        }
        "floor" | "ceil" | "round" => {
            arity(1)?;
            match args[0] {
                Num::Int(i) => Ok(Num::Int(i)),
                Num::Float(f) => integral(match name {
                    "floor" => f.floor(),
                    "ceil" => f.ceil(),
                    _ => f.round(),
                }),
            }
        }
        "sqrt" | "ln" | "log10" | "exp" | "sin" | "cos" | "tan" => {
            arity(1)?;
            let x = args[0].float();
            if matches!(name, "sqrt") && x < 0.0 {
                return Err("`sqrt` of a negative number".into());
            }
            if matches!(name, "ln" | "log10") && x <= 0.0 {
                return Err(format!("`{name}` needs a positive argument"));
            }
            if let (Num::Int(i), "sqrt") = (args[0], name) {
                let root = x.sqrt().round() as i128;
                if root.checked_mul(root) == Some(i) {
                    return Ok(Num::Int(root));
                }
            }
            let f = match name {
                "sqrt" => x.sqrt(),
                "ln" => x.ln(),
                "log10" => x.log10(),
                "exp" => x.exp(),
                "sin" => x.sin(),
                "cos" => x.cos(),
                _ => x.tan(),
            };
            finite(name, f)
        }
        _ => Err(format!(
            "unknown function `{name}` (the functions are {FUNCTIONS})"
        )),
    }
}

/// The `calc` tool.
pub struct Calc {
    spec: ToolSpec,
}

impl Default for Calc {
    fn default() -> Self {
        Self {
            spec: ToolSpec {
                name: "calc".into(),
                description: format!(
                    "Evaluates an arithmetic expression and returns its value. Integers are exact. \
                     Operators: + - * / % ^ (or **), parentheses. Functions: {FUNCTIONS}. \
                     Constants: pi, e. Example: (17 * 23 + 4) / 5"
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "expression": {"type": "string", "description": "The expression to evaluate, e.g. 2^10 - sqrt(16)"}
                    },
                    "required": ["expression"],
                    "additionalProperties": false
                }),
            },
        }
    }
}

impl Tool for Calc {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: Value) -> BoxFuture<'_, Result<String, ToolError>> {
        let result =
            match arguments.get("expression") {
                Some(Value::String(expression)) => evaluate(expression)
                    .map(|n| n.to_string())
                    .map_err(|e| ToolError::Failed {
                        tool: "calc".into(),
                        message: e.to_string(),
                    }),
                // Models sometimes send a bare number; it is still an expression.
                Some(Value::Number(n)) => {
                    evaluate(&n.to_string())
                        .map(|n| n.to_string())
                        .map_err(|e| ToolError::Failed {
                            tool: "calc".into(),
                            message: e.to_string(),
                        })
                }
                _ => Err(ToolError::InvalidArguments {
                    tool: "calc".into(),
                    message: "expected {\"expression\": \"<arithmetic expression>\"}".into(),
                }),
            };
        Box::pin(async move { result })
    }
}

#[cfg(test)]
#[path = "calc_tests.rs"]
mod tests;
