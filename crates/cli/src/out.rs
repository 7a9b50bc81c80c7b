//! Standard output that reports a failed write instead of panicking.
//!
//! `println!` panics when stdout is gone (`opencouch threads show ID | head`
//! closes the pipe after ten lines). Every command prints through
//! [`outln!`] / [`out!`] instead, which return the `io::Error`; it travels
//! up with `?`, and `main` ends quietly with status 0 on a broken pipe, as
//! other command-line tools do.

use std::fmt;
use std::io::{self, Write};

/// `println!` returning `io::Result<()>`.
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` (then a flush, so prompts and streamed text appear at once)
/// returning `io::Result<()>`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write_flush(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};

/// Writes to stdout.
pub fn write(args: fmt::Arguments<'_>) -> io::Result<()> {
    io::stdout().lock().write_fmt(args)
}

/// Writes to stdout and flushes it.
pub fn write_flush(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_fmt(args)?;
    stdout.flush()
}

/// Whether an error (or any error in its chain) is a closed output pipe.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
