//! `${var}` substitution in manifest text, with the position of every unknown variable.
//!
//! Forms: `${name}`; `${name:-fallback}` (the fallback when `name` is not set); `$${...}` writes a
//! literal `${...}`. A `$` not followed by `{` is left alone.

use std::collections::BTreeMap;

/// A substitution problem at a 1-based line and column of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {message}")]
pub struct SubstError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// Variables by name, borrowed from where they are kept (a Cluster's values, its release): a
/// render copies none of them.
pub type Variables<'a> = BTreeMap<&'a str, &'a str>;

/// Replaces every `${...}` in `text` from `vars`.
///
/// # Errors
/// Every unknown variable, malformed name and unterminated `${` (all of them, in order).
pub fn substitute(text: &str, vars: &Variables<'_>) -> Result<String, Vec<SubstError>> {
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let mut rest = line;
        let mut col = 1;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            col += rest[..pos].chars().count();
            let after = &rest[pos..];
            if let Some(escaped) = after.strip_prefix("$${") {
                out.push_str("${");
                rest = escaped;
                col += 3;
                continue;
            }
            let Some(body_start) = after.strip_prefix("${") else {
                out.push('$');
                rest = &after[1..];
                col += 1;
                continue;
            };
            let Some(end) = body_start.find('}') else {
                errors.push(SubstError { line: i + 1, col, message: "unterminated `${`: expected `}` on the same line".into() });
                out.push_str(after);
                rest = "";
                continue;
            };
            let body = &body_start[..end];
            let (name, fallback) = match body.split_once(":-") {
                Some((n, f)) => (n, Some(f)),
                None => (body, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
                errors.push(SubstError { line: i + 1, col, message: format!("`${{{body}}}` is not a valid variable reference") });
            } else {
                match (vars.get(name), fallback) {
                    (Some(v), _) => out.push_str(v),
                    (None, Some(f)) => out.push_str(f),
                    (None, None) => {
                        errors.push(SubstError { line: i + 1, col, message: format!("unknown variable `{name}`; known: {}", known(vars)) })
                    }
                }
            }
            let consumed = 2 + end + 1;
            col += after[..consumed].chars().count();
            rest = &after[consumed..];
        }
        out.push_str(rest);
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

fn known(vars: &Variables<'_>) -> String {
    let names: Vec<&str> = vars.keys().copied().collect();
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Variables<'static> {
        [("cluster.name", "alpha"), ("region", "eu-1")].into_iter().collect()
    }

    #[test]
    fn substitutes_known_variables() {
        let table = [
            ("name: ${cluster.name}\n", "name: alpha\n"),
            ("r: ${region}-${cluster.name}", "r: eu-1-alpha"),
            ("zone: ${zone:-a}", "zone: a"),
            ("literal: $${HOME} and $PATH", "literal: ${HOME} and $PATH"),
            ("price: 5$", "price: 5$"),
        ];
        for (input, want) in table {
            assert_eq!(substitute(input, &vars()).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn unknown_variables_are_located() {
        let errs = substitute("a: 1\nb: x-${nope} ${cluster.nam}\nc: ${bad name}\nd: ${open\n", &vars()).unwrap_err();
        let found: Vec<(usize, usize)> = errs.iter().map(|e| (e.line, e.col)).collect();
        assert_eq!(found, vec![(2, 6), (2, 14), (3, 4), (4, 4)]);
        assert!(errs[0].message.contains("unknown variable `nope`"), "{}", errs[0].message);
    }
}
