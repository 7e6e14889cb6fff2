//! A Go `text/template` engine for SovereignCloudStack values templates
//! (`cluster-addon-values.yaml`, `overwrite.yaml`), which the SCS cluster-stack-operator executes
//! with Go's `text/template` and slim-sprig's `TxtFuncMap`: the whole template language
//! (`define` / `template` / `block`, every action, comments and trim markers as Go parses them),
//! Go's builtins, `fmt` formatting of each Go type, and every slim-sprig function except the
//! few that read the clock, the environment or the network ([`funcs::unsupported_reason`]).
//!
//! The output is meant to be byte-for-byte Go's; `tests/conformance.rs` and `tests/template_fuzz`
//! check it against the real Go program (README.md says what is proven). Like Go with its default
//! `missingkey`, a missing map key prints `<no value>`; this engine also reports each one as a
//! [`Warning`] (the caller may refuse them).
//!
//! Bounded: nesting is limited when parsing ([`MAX_DEPTH`]), template calls, steps and output
//! when executing ([`Limits`]), and both run on a thread with a stack sized for those limits, so
//! no template can take the process down.
//!
//! What it is not: `html/template` (no contextual escaping), Go's reflection over arbitrary values
//! (data is JSON, as Kubernetes decodes unstructured objects: maps, slices, strings, `int64`,
//! `float64`, bools, nil), custom function maps, or helm's template functions beyond `toYaml` and
//! `required` ([`funcs::EXTENSIONS`]). The API is [`Template::parse`] then
//! [`Template::execute`]; it imports nothing of stacksync.

#![warn(missing_docs)]

mod exec;
pub mod funcs;
mod gofmt;
mod gonum;
mod parse;
mod value;

use std::fmt;

use serde_json::Value;

pub use parse::MAX_DEPTH;

/// A template problem at a 1-based line of its file (0 when no line applies).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    /// The template's file name, as given to [`Template::parse`].
    pub file: String,
    /// The 1-based line, 0 when no line applies.
    pub line: usize,
    /// What went wrong, in Go's words where Go reports the same error.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(f, "{}: {}", self.file, self.message)
        }
    }
}

/// Something Go would print silently that is probably a mistake: `<no value>` for a missing
/// key, or `<nil>` for a nil value, in the output at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The template's file name.
    pub file: String,
    /// The 1-based line of the action that printed it.
    pub line: usize,
    /// What was printed: the field path (`.Cluster.spec.foo`), variable or function.
    pub path: String,
    /// `<no value>` or `<nil>`.
    pub printed: &'static str,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: `{}` printed {} (missing or nil in the cluster's objects)", self.file, self.line, self.path, self.printed)
    }
}

/// Bounds on one execution. Exceeding one is an [`Error`] naming the file and line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nested `template` calls (a template calling itself).
    pub calls: usize,
    /// Nodes executed, range iterations and function calls.
    pub steps: u64,
    /// Output bytes.
    pub output: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { calls: 1_000, steps: 1_000_000, output: 16 * 1024 * 1024 }
    }
}

/// What an execution produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The rendered text, byte for byte what Go renders.
    pub text: String,
    /// Each `<no value>` and `<nil>` printed, in output order.
    pub warnings: Vec<Warning>,
}

/// Stack for parsing and executing: enough for [`MAX_DEPTH`] nesting inside [`Limits::calls`]
/// template calls in a debug build, whatever the caller's thread has.
const STACK_BYTES: usize = 256 * 1024 * 1024;

/// Runs `f` on a thread with [`STACK_BYTES`] of stack.
fn on_big_stack<T: Send>(file: &str, f: impl FnOnce() -> Result<T, Error> + Send) -> Result<T, Error> {
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new().name("gotemplate".into()).stack_size(STACK_BYTES).spawn_scoped(s, f);
        match spawned {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                Err(Error { file: file.to_owned(), line: 0, message: "template engine failed unexpectedly".to_owned() })
            }),
            Err(e) => Err(Error { file: file.to_owned(), line: 0, message: format!("cannot start the template thread: {e}") }),
        }
    })
}

/// A parsed template, ready to execute any number of times.
#[derive(Debug, Clone)]
pub struct Template {
    file: String,
    tree: parse::Tree,
}

impl Template {
    /// Parses `text`, read from `file` (the template's name, used in messages).
    ///
    /// # Errors
    /// The first syntax error, unknown function, or nesting past [`MAX_DEPTH`].
    pub fn parse(file: &str, text: &str) -> Result<Template, Error> {
        let tree = on_big_stack(file, || parse::parse(file, text))?;
        Ok(Template { file: file.to_owned(), tree })
    }

    /// Executes the template with `data` as `.` and `$`, within the default [`Limits`]. Pure:
    /// the same data gives the same output.
    ///
    /// # Errors
    /// The first execution error (a failing function, a type error, a limit exceeded).
    pub fn execute(&self, data: &Value) -> Result<Output, Error> {
        self.execute_with(data, Limits::default())
    }

    /// As [`Template::execute`], within `limits`.
    ///
    /// # Errors
    /// As [`Template::execute`].
    pub fn execute_with(&self, data: &Value, limits: Limits) -> Result<Output, Error> {
        self.execute_as(&self.file, data, limits)
    }

    /// As [`Template::execute_with`], with `name` as the name of the whole template (what
    /// `{{ template "name" }}` calls), as the operator names it `cluster-addon-values-<cluster>`.
    ///
    /// # Errors
    /// As [`Template::execute`].
    pub fn execute_as(&self, name: &str, data: &Value, limits: Limits) -> Result<Output, Error> {
        on_big_stack(&self.file, || {
            let (text, warnings) = exec::Exec::run(&self.file, name, &self.tree, value::Val::from_json(data), limits)?;
            Ok(Output { text, warnings })
        })
    }
}

#[cfg(test)]
mod tests;
