//! The terminal client of OpenCouch (`opencouch chat`).
//!
//! A full-screen interface (ratatui over crossterm) when stdin and stdout
//! are a terminal, and a line mode for pipes, `--plain` and `--json`; both
//! run the same command set ([`commands`], executed by [`session`]). It
//! uses only the runtime's service API (`opencouch_runtime::service`).
//!
//! - [`commands`]: the command table, help, parsing, closest suggestion.
//! - [`session`]: one conversation and the commands' effects.
//! - [`markdown`]: replies rendered with wrapping, committed line by line
//!   while they stream.
//! - [`app`] and [`ui`]: the full screen's state and drawing (tested with
//!   ratatui's `TestBackend`); [`full`]: its event loop.
//! - [`line`]: the line mode; [`doctor`]: `/doctor`; [`export`]: `/export`.
//!
//! Nothing typed is written anywhere but the database: the input history
//! lives in memory for this run only.

pub mod app;
pub mod commands;
pub mod diag;
pub mod doctor;
pub mod export;
pub mod full;
pub mod line;
pub mod markdown;
pub mod session;
pub mod theme;
pub mod ui;

pub use session::{Options, Session};
