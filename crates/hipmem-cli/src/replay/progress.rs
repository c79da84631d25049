//! A progress line on stderr, redrawn in place, only when stderr is a
//! terminal (and only for long replays: it appears after half a second).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// The progress of the current pass.
pub struct Progress {
    enabled: bool,
    label: String,
    total: u64,
    started: Instant,
    last_draw: Option<Instant>,
}

const WIDTH: usize = 30;

impl Progress {
    /// A progress line if stderr is a terminal, else one that draws nothing.
    pub fn on_terminal() -> Progress {
        Progress::new(std::io::stderr().is_terminal())
    }

    /// A progress line that draws only if `enabled`.
    pub fn new(enabled: bool) -> Progress {
        Progress { enabled, label: String::new(), total: 0, started: Instant::now(), last_draw: None }
    }

    /// Starts a pass of `total` steps.
    pub fn begin(&mut self, label: &str, total: u64) {
        self.label = label.to_string();
        self.total = total;
        self.started = Instant::now();
    }

    /// `done` steps of the pass are done.
    pub fn update(&mut self, done: u64) {
        if !self.enabled || self.started.elapsed() < Duration::from_millis(500) {
            return;
        }
        if self.last_draw.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return;
        }
        self.last_draw = Some(Instant::now());
        let fraction = if self.total == 0 { 1.0 } else { done as f64 / self.total as f64 };
        let filled = ((fraction * WIDTH as f64) as usize).min(WIDTH);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K{:<28} [{}{}] {:>5.1}% {}/{} ops",
            self.label,
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            fraction * 100.0,
            done,
            self.total
        );
        let _ = err.flush();
    }

    /// Clears the line.
    pub fn done(&mut self) {
        if self.enabled && self.last_draw.take().is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}
