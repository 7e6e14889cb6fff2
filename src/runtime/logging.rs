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

/// Installs the global subscriber. `RUST_LOG` overrides the default level (`info`).
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).with_ansi(ansi);
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
