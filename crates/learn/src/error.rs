//! Errors of this crate.

/// Why a model could not be decoded or trained.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LearnError {
    /// The bytes are not a model of this format.
    #[error("not an OpenCouch linear model (bad magic or version)")]
    BadMagic,
    /// The bytes end before the model does.
    #[error("model data truncated at {0}")]
    Truncated(&'static str),
    /// The header does not parse or disagrees with the weights.
    #[error("model header invalid: {0}")]
    Header(String),
    /// Training was asked for something impossible.
    #[error("training configuration invalid: {0}")]
    Config(String),
}
