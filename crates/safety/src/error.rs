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
    /// The grammar's construct table (`data/constructs.toml`) did not load.
    #[error("embedded data file constructs.toml is invalid: {0}")]
    Rules(#[from] RuleTableError),
    /// Evaluation input could not be parsed.
    #[error("evaluation input line {line}: {detail}")]
    EvalInput {
        /// 1-based line (or record) number.
        line: usize,
        /// What was wrong.
        detail: String,
    },
}

/// Why the grammar's construct table (`data/constructs.toml`) did not load.
///
/// `rule` names the group, cue or construct (or `tag_set.NAME`) where the
/// problem is; every variant names only table text, never user text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleTableError {
    /// The file is not valid TOML or has a field the table does not know.
    #[error("does not parse: {0}")]
    Parse(String),
    /// A tag atom names a tag that `data/grammar.toml` does not define.
    #[error("{rule}: unknown tag {tag:?}")]
    UnknownTag {
        /// Where.
        rule: String,
        /// The unknown tag name.
        tag: String,
    },
    /// A `$name` that no `[tag_set]` entry defines.
    #[error("{rule}: unknown tag set {set:?}")]
    UnknownTagSet {
        /// Where.
        rule: String,
        /// The unknown set name.
        set: String,
    },
    /// An atom `scope:…` with a scope the engine does not know.
    #[error("{rule}: unknown scope {scope:?}")]
    UnknownScope {
        /// Where.
        rule: String,
        /// The unknown scope.
        scope: String,
    },
    /// A bare word, `cue:…` or `message:…` atom the engine does not know.
    #[error("{rule}: unknown flag {flag:?}")]
    UnknownFlag {
        /// Where.
        rule: String,
        /// The unknown flag.
        flag: String,
    },
    /// A comparison on a clause fact the engine does not know.
    #[error("{rule}: unknown fact {fact:?}")]
    UnknownFact {
        /// Where.
        rule: String,
        /// The unknown fact.
        fact: String,
    },
    /// `@name` of a group that is not defined earlier in the file.
    #[error("{rule}: unknown group {group:?} (a group is used only after its definition)")]
    UnknownGroup {
        /// Where.
        rule: String,
        /// The unknown group.
        group: String,
    },
    /// A `[[construct]]` whose name is no [`crate::grammar::Construct`].
    #[error("unknown construct {0:?}")]
    UnknownConstruct(String),
    /// A construct of [`crate::grammar::Construct::ALL`] the table lacks.
    #[error("construct {0} missing from the table")]
    MissingConstruct(&'static str),
    /// A `[[cue]]` whose name is not a cue of the grammar report.
    #[error("unknown cue {0:?}")]
    UnknownCue(String),
    /// A cue of the grammar report the table lacks.
    #[error("cue {0} missing from the table")]
    MissingCue(&'static str),
    /// A construct, cue, group or tag set defined twice.
    #[error("{0} defined twice")]
    Duplicate(String),
    /// A construct's `level` differs from [`crate::grammar::Construct::level`].
    #[error("construct {name}: level {found} in the table, {expected} in the code")]
    Level {
        /// The construct.
        name: &'static str,
        /// The table's level (0 when missing).
        found: u8,
        /// The code's level.
        expected: u8,
    },
    /// A cue rule reads a cue (directly or through a group); cues are
    /// computed before any rule may read them.
    #[error("cue {rule} reads the cue atom {atom:?}, which is computed after it")]
    CueReadsCue {
        /// The cue rule.
        rule: String,
        /// The atom or group that reads a cue.
        atom: String,
    },
    /// Anything else malformed: an empty condition, a bad number, a field in
    /// the wrong kind of entry, an unknown reach.
    #[error("{rule}: {detail}")]
    Malformed {
        /// Where.
        rule: String,
        /// What.
        detail: String,
    },
}
