//! The terminal side of [`crate::model::progress`]: a progress line on standard error (items
//! done of total, rate, time left), drawn with indicatif, the progress library of the Rust CLI
//! world (cargo-style tools, rustup). Shown only when a person is watching: both standard output
//! and standard error are terminals and the output is not machine-readable (`-o json`); with
//! either in a pipe or a file, nothing extra is written, so a script reads what it always read.

use std::io::IsTerminal as _;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::model::progress::{Progress, Reporter, silent};

/// A progress line for a command that prints `machine_readable` output or not.
pub fn for_command(machine_readable: bool) -> Reporter {
    if machine_readable || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
        return silent();
    }
    Reporter::new(Arc::new(Line::new(ProgressDrawTarget::stderr())))
}

/// One progress line (indicatif's bar, cleared when the command finishes so only its output stays).
#[derive(Debug)]
pub struct Line {
    bar: ProgressBar,
}

impl Line {
    /// A line drawn on `target` (at most 10 times a second).
    pub fn new(target: ProgressDrawTarget) -> Line {
        let bar = ProgressBar::with_draw_target(Some(0), target);
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} · {per_sec} · {eta} left")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        Line { bar }
    }
}

impl Progress for Line {
    fn add(&self, what: &str, total: u64) {
        if self.bar.message() == what {
            self.bar.inc_length(total);
        } else {
            // A new phase of the command (subscriptions prepared, then Clusters rendered).
            self.bar.reset();
            self.bar.set_length(total);
            self.bar.set_message(what.to_owned());
        }
    }

    fn done(&self) {
        self.bar.inc(1);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn suspend(&self, write: &mut dyn FnMut()) {
        self.bar.suspend(write);
    }
}

/// Standard error for the log: each line written with the progress line out of the way.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::model::progress::reporter().suspend(|| std::io::stderr().write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        crate::model::progress::reporter().suspend(|| std::io::stderr().write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::TermLike;
    use std::sync::Mutex;

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Default, Clone)]
    struct Screen(Arc<Mutex<Vec<String>>>);
    impl TermLike for Screen {
        fn width(&self) -> u16 {
            100
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().expect("screen").push(s.to_owned());
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.write_line(s)
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_line_says_items_done_of_total_rate_and_time_left() {
        let screen = Screen::default();
        let line = Line::new(ProgressDrawTarget::term_like(Box::new(screen.clone())));
        line.add("Clusters", 4);
        line.done();
        line.done();
        line.bar.tick();
        let drawn = screen.0.lock().expect("screen").join("\n");
        assert!(drawn.contains("Clusters [") && drawn.contains("2/4 · ") && drawn.contains("left"), "{drawn}");
        line.finish();
        assert!(line.bar.is_finished());
    }

    #[test]
    fn machine_readable_output_gets_no_line() {
        // Under `cargo test` standard output is captured (not a terminal) as well.
        let reporter = for_command(true);
        reporter.add("Clusters", 1);
        reporter.done();
        reporter.finish();
    }
}
