//! Log output: human-readable by default, one JSON object per line with `--log-format json` —
//! for every line the process writes to stderr, start-up errors included. Colour only on a
//! terminal, and never when `NO_COLOR` is set (<https://no-color.org>).
//! Spans carry `subscription`, `source`, `tag` and `commit`, so every line about a release names it.

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Whether to colour: stderr is a terminal and `NO_COLOR` is unset or empty.
pub fn colour(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// kube-client's HTTP trace layer logs every 5xx answer at ERROR with nothing but the status
/// (`failed with status 503 Service Unavailable`), beside the request's own error, which the
/// caller logs with what it was about. Off, unless `RUST_LOG` names `kube_client` itself.
const QUIET: &str = "kube_client::client::builder=off";

/// The filter for `RUST_LOG` (`spec`; `info` when unset or unreadable), with [`QUIET`].
fn filter(spec: Option<&str>) -> EnvFilter {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty()).unwrap_or("info");
    let spec = if spec.contains("kube_client") { spec.to_owned() } else { format!("{spec},{QUIET}") };
    EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new(format!("info,{QUIET}")))
}

/// Installs the global subscriber. `RUST_LOG` overrides the default level (`info`).
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    let ansi = colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| super::progress::Stderr).with_target(false).with_ansi(ansi);
    // A second init (tests calling main paths twice) is harmless; ignore it.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(true).try_init(),
    };
}

/// Whether `--log-format json` is in force (or, before the arguments are parsed, asked for).
pub fn is_json() -> bool {
    FORMAT.get().copied() == Some(LogFormat::Json)
}

/// `--log-format json` / `--log-format=json` among raw arguments: for errors found while parsing
/// them, before [`init`].
pub fn json_requested(args: &[String]) -> bool {
    args.iter().any(|a| a == "--log-format=json") || args.windows(2).any(|w| w[0] == "--log-format" && w[1] == "json")
}

/// Writes a line for the operator on stderr: as is in text mode, as an ERROR event (one JSON
/// object) with `--log-format json`.
pub fn error_line(text: &str) {
    if is_json() {
        tracing::error!("{text}");
    } else {
        eprintln!("{text}");
    }
}

#[cfg(test)]
mod tests {

    /// Regression: every failed request to a 5xx server had a second, context-free ERROR line
    /// from kube-client (`failed with status 503 …`).
    #[test]
    fn kube_clients_context_free_error_lines_are_off_unless_asked_for() {
        for spec in [None, Some(""), Some("debug"), Some("info,stacksync=trace"), Some("not a filter===")] {
            assert!(super::filter(spec).to_string().contains("kube_client::client::builder=off"), "{spec:?}");
        }
        assert!(!super::filter(Some("kube_client=debug")).to_string().contains("=off"));
    }
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }

    #[test]
    fn json_is_found_in_raw_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(json_requested(&args(&["stacksync", "--log-format", "json", "run"])));
        assert!(json_requested(&args(&["stacksync", "run", "--log-format=json"])));
        assert!(!json_requested(&args(&["stacksync", "--log-format", "text"])));
    }
}
