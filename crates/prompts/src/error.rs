//! Typed errors for the embedded data files.

/// A reviewed data file failed to parse or is inconsistent.
///
/// These errors can only come from the files embedded at build time, so the
/// crate's tests catch them; at run time callers get a degraded but safe
/// answer and may surface the error once at startup via [`crate::check_data`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// A markdown file lacks a valid `---` front matter block.
    #[error("{file}: invalid front matter: {reason}")]
    FrontMatter {
        /// The embedded file's name.
        file: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A TOML data file does not match its schema.
    #[error("{file}: invalid TOML: {reason}")]
    Toml {
        /// The embedded file's name.
        file: &'static str,
        /// The parser's message.
        reason: String,
    },
    /// A data file parsed but breaks a consistency rule.
    #[error("{file}: {reason}")]
    Inconsistent {
        /// The embedded file's name.
        file: &'static str,
        /// Which rule is broken.
        reason: String,
    },
}

impl PromptError {
    pub(crate) fn toml(file: &'static str, err: &toml::de::Error) -> Self {
        PromptError::Toml {
            file,
            reason: err.message().to_owned(),
        }
    }

    pub(crate) fn inconsistent(file: &'static str, reason: impl Into<String>) -> Self {
        PromptError::Inconsistent {
            file,
            reason: reason.into(),
        }
    }
}
