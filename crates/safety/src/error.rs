//! Typed errors of the safety crate.

/// Errors from loading the embedded data files or parsing evaluation input.
///
/// Messages never contain user text: only file names, line numbers and
/// pattern identifiers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SafetyError {
    /// An embedded data file did not parse.
    #[error("embedded data file {file} is invalid: {detail}")]
    Data {
        /// The data file name.
        file: &'static str,
        /// What was wrong (parser message, never user text).
        detail: String,
    },
    /// A phrase pattern did not compile.
    #[error("pattern {index} of family {family} does not compile: {detail}")]
    Pattern {
        /// Family name.
        family: String,
        /// Index of the pattern inside the family.
        index: usize,
        /// Compiler message.
        detail: String,
    },
    /// Evaluation input could not be parsed.
    #[error("evaluation input line {line}: {detail}")]
    EvalInput {
        /// 1-based line (or record) number.
        line: usize,
        /// What was wrong.
        detail: String,
    },
}
