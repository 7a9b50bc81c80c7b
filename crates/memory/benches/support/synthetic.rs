//! Synthetic memory for the retrieval benchmarks (shared by the memory
//! crate's prepared-index bench and the runtime's real-store bench through
//! `#[path]`): a fixed vocabulary of everyday words, a seeded xorshift
//! generator, and the percentile helper, so both benches draw the same kind
//! of records and queries.

#![allow(dead_code)] // each bench uses a different part

/// Words the records and queries are drawn from.
pub const WORDS: &[&str] = &[
    "work",
    "stress",
    "sleep",
    "sister",
    "brother",
    "exam",
    "running",
    "walk",
    "anxious",
    "tired",
    "job",
    "boss",
    "friend",
    "panic",
    "breathing",
    "music",
    "family",
    "move",
    "city",
    "school",
    "money",
    "rent",
    "partner",
    "dog",
    "cat",
    "garden",
    "cooking",
    "therapy",
    "doctor",
    "health",
    "grief",
    "loss",
    "birthday",
    "holiday",
    "weekend",
    "morning",
    "night",
    "coffee",
    "reading",
    "painting",
    "guitar",
    "meeting",
    "deadline",
    "project",
    "team",
    "lonely",
    "calm",
    "hope",
    "goal",
    "habit",
    "pottery",
    "climbing",
    "swimming",
    "poetry",
    "chess",
    "yoga",
    "baking",
    "camping",
    "gardening",
    "volunteering",
    "dancing",
    "knitting",
    "hiking",
    "cycling",
];

/// Seeded xorshift64: the same sequence on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn word(&mut self) -> &'static str {
        WORDS[(self.next() % WORDS.len() as u64) as usize]
    }

    /// `n` words joined by spaces.
    pub fn words(&mut self, n: usize) -> String {
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }

    /// A value in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() % 10_000) as f32 / 5_000.0 - 1.0
    }

    /// A vector of `dim` values in [-1, 1) (not normalised: the index
    /// normalises what it stores).
    pub fn vector(&mut self, dim: usize) -> Vec<f32> {
        (0..dim).map(|_| self.unit()).collect()
    }
}

/// The `p` quantile (0..=1) of `v`, nearest rank; sorts `v`.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}
