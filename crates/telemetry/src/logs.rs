//! The log layer: the usual compact text lines, with every field (of the
//! event and of the spans it is inside) passed through the redaction rules.
//! The project never logs content on purpose; this catches what a future
//! `tracing::debug!(user_message = …)` would leak.

use std::fmt;

use opencouch_prompts::redact::{REDACTED, is_sensitive_key};
use tracing::field::Field;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::{self, Writer};
use tracing_subscriber::registry::LookupSpan;

/// Formats one field: sensitive keys as `[redacted]`, values cut to 240
/// characters.
pub fn write_field(w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    let name = field.name();
    if is_sensitive_key(name) {
        return write!(w, "{name}={REDACTED}");
    }
    let text = format!("{value:?}");
    let text = crate::redact::cut(&text);
    if name == "message" {
        w.write_str(text)
    } else {
        write!(w, "{name}={text}")
    }
}

/// The log layer writing to `writer`, with redacted fields.
pub fn layer<S, W>(writer: W) -> impl tracing_subscriber::Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .fmt_fields(format::debug_fn(write_field).delimited(" "))
}
