//! Cheap learned sentence features and small linear models.
//!
//! The crisis gate and the intent layers need to recognise *meanings* that
//! their phrase rules do not list, at a cost of microseconds per message and
//! with no model files at run time. This crate gives them three pieces, all
//! pure (no I/O, no async runtime):
//!
//! * [`features`]: a message becomes hashed word unigrams and bigrams and
//!   character 3–5-grams inside words (the fastText "subword" idea, so
//!   "overdosing" shares most of its features with "overdose"), with words
//!   inside a negation's scope marked ("i haven't thought about dying":
//!   `dying` and its character n-grams are seen as negated).
//! * [`embed`]: static token embeddings distilled from all-MiniLM-L6-v2
//!   (model2vec's method), embedded in the binary: a word's meaning as a
//!   table row, so wordings that share no n-gram can still score alike.
//!   A model turns them on with [`FeatureConfig::static_dims`].
//! * [`model`]: a linear model with one logistic head per output (ordinal
//!   heads such as "level ≥ 1" and "level ≥ 2", or one head per intent),
//!   scored over the whole text and over sentence windows, and a compact
//!   binary encoding that embeds in the binary and loads in well under a
//!   millisecond.
//! * [`train`]: deterministic trainers (AdaGrad with a seeded shuffle) for
//!   independent logistic heads ([`train()`]) and for softmax classes in
//!   groups ([`train_softmax`], the intent layer's), so checked-in weights
//!   can be reproduced exactly from the checked-in corpus.

pub mod embed;
pub mod error;
pub mod features;
pub mod model;
pub mod train;

pub use embed::StaticEmbeddings;
pub use error::LearnError;
pub use features::{FeatureConfig, Features, Featurizer};
pub use model::{LinearModel, ModelMeta, Scores};
pub use train::{Example, TrainConfig, softmax_over, train, train_softmax};
