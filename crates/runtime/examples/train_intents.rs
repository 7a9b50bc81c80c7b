//! Trains the intent layer from the project's intent corpus and writes
//! `data/intent_layer.bin` and `data/intent_layer.json`.
//!
//! ```sh
//! cargo run -p opencouch-runtime --example train_intents --release
//! ```
//!
//! The corpus (`training/intent_corpus.jsonl`, not kept in git) is generated
//! first by `python3 training/generate_intents.py --no-docs` when it is
//! missing; a path given as the first argument is read instead.
//!
//! Rows are grouped by their hand-written wording (a hand row and the
//! variants generated from it form one group), and groups are split by a
//! hash of the group's hand wording (stable when lines are added): 85 % trains, 15 % is held out to choose
//! the thresholds (`accept` in chat and `accept_exercise` inside an
//! exercise: the lowest probability, at least 0.4, at which the held-out
//! precision of the acted-on intents of that context is at least 0.95; `exit`:
//! the lowest, at least 0.5, at which held-out rows of other intents read as a stop are at
//! most 0.3 % of the held-out exercise rows of other intents, see below).
//! The shipped model is the one trained on the 85 %, so the held-out figures
//! it prints are honest (with `LEARN_SHIP_ALL=1` it is retrained on every row
//! with those thresholds). No evaluation set is read here.
//!
//! `LEARN_STATIC_DIMS=64` adds the static token embeddings of `opencouch-learn`
//! (build with `--features opencouch-learn/static-embeddings`); measured and
//! not used by the shipped weights (docs/benchmarks.md).

use std::path::PathBuf;

use opencouch_core::fnv;
use opencouch_learn::{Example, FeatureConfig, Featurizer, TrainConfig, train_softmax};
use opencouch_runtime::intent::{Intent, IntentContext, context_probabilities, normalize};
use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
struct Row {
    id: String,
    text: String,
    intent: String,
    source: String,
}

fn held_out(group: &str) -> bool {
    fnv::hash(group.as_bytes()) % 100 < 15
}

/// Intents whose recognition changes what the app does (the fallback
/// intents, `none` and `exercise_answer`, leave today's behaviour).
fn acts(i: Intent) -> bool {
    !matches!(i, Intent::None | Intent::ExerciseAnswer)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let arg = std::env::args().nth(1);
    let corpus_path = arg
        .as_ref()
        .map_or_else(|| root.join("training/intent_corpus.jsonl"), PathBuf::from);
    if !corpus_path.exists() && arg.is_none() {
        let status = std::process::Command::new("python3")
            .arg(root.join("training/generate_intents.py"))
            .arg("--no-docs")
            .status()?;
        if !status.success() {
            return Err("training/generate_intents.py failed".into());
        }
    }
    let corpus = std::fs::read_to_string(&corpus_path).map_err(|e| {
        format!(
            "{}: {e} (run training/generate_intents.py first)",
            corpus_path.display()
        )
    })?;
    let digest = hex::encode(Sha256::digest(corpus.as_bytes()));
    let rows: Vec<Row> = corpus
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("corpus line {}: {e}", i + 1)))
        .collect::<Result<_, _>>()?;
    let env = |name: &str| std::env::var(name).ok();
    let mut features = FeatureConfig {
        buckets_log2: 15,
        ..FeatureConfig::default()
    };
    if let Some(v) = env("LEARN_BUCKETS").and_then(|v| v.parse().ok()) {
        features.buckets_log2 = v;
    }
    if let Some(v) = env("LEARN_CHAR_MIN").and_then(|v| v.parse().ok()) {
        features.char_min = v;
    }
    if let Some(v) = env("LEARN_STATIC_DIMS").and_then(|v| v.parse().ok()) {
        features.static_dims = v;
    }
    if let Some(v) = env("LEARN_STATIC_GAIN").and_then(|v| v.parse().ok()) {
        features.static_gain = v;
    }
    let featurizer = Featurizer::checked(features)?;
    let k = Intent::ALL.len();
    let mut train_set = Vec::new();
    let mut dev: Vec<(Example, Intent)> = Vec::new();
    let mut group = String::new();
    for r in &rows {
        let intent: Intent = r
            .intent
            .parse()
            .map_err(|_| format!("row {}: unknown intent {}", r.id, r.intent))?;
        // A hand row opens its group; the group is keyed by the wording
        // itself (not its row id, which shifts when lines are added), so
        // editing one file does not reshuffle the whole held-out split.
        if r.source == "hand" || group.is_empty() {
            group = format!("{}|{}", r.intent, r.text.to_lowercase());
        }
        let context = intent.context();
        let targets = Intent::ALL
            .iter()
            .map(|i| {
                if i.context() != context {
                    f32::NAN
                } else {
                    f32::from(u8::from(*i == intent))
                }
            })
            .collect();
        let ex = Example {
            features: featurizer.features(&normalize(&r.text)),
            targets,
            weight: 1.0,
        };
        if held_out(&group) {
            dev.push((ex, intent));
        } else {
            train_set.push(ex);
        }
    }
    // Chosen on the held-out split (top-intent accuracy): a smaller step
    // and a little more L2 than the crisis gate's logistic heads.
    let mut config = TrainConfig {
        learning_rate: 0.05,
        l2: 1e-4,
        ..TrainConfig::default()
    };
    if let Some(v) = env("LEARN_L2").and_then(|v| v.parse().ok()) {
        config.l2 = v;
    }
    if let Some(v) = env("LEARN_EPOCHS").and_then(|v| v.parse().ok()) {
        config.epochs = v;
    }
    if let Some(v) = env("LEARN_LR").and_then(|v| v.parse().ok()) {
        config.learning_rate = v;
    }
    let heads: Vec<String> = Intent::ALL.iter().map(|i| i.as_str().to_owned()).collect();
    let started = std::time::Instant::now();
    let model = train_softmax(&train_set, &heads, *featurizer.config(), &config, &digest)?;
    println!(
        "trained on {} rows ({} held out, {k} heads) in {:.0} ms",
        train_set.len(),
        dev.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    // The shipped (pruned, compactly encoded) weights are the ones measured.
    let prune = env("LEARN_PRUNE")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.1f32);
    let bytes = model.encode_compact(prune);
    let model = opencouch_learn::LinearModel::decode(&bytes)?;
    // Held-out predictions: (gold, predicted, confidence).
    let preds: Vec<(Intent, Intent, f32)> = dev
        .iter()
        .map(|(ex, gold)| {
            let context = gold.context();
            let probs = context_probabilities(&model, &ex.features, context);
            let (best, p) = Intent::ALL
                .iter()
                .enumerate()
                .filter(|(_, i)| i.context() == context)
                .map(|(h, i)| (*i, probs[h]))
                .fold(
                    (*gold, -1.0f32),
                    |b, (i, p)| if p > b.1 { (i, p) } else { b },
                );
            (*gold, best, p)
        })
        .collect();
    let correct = preds.iter().filter(|(g, p, _)| g == p).count();
    println!(
        "held out, top intent: {correct}/{} correct ({:.3})",
        preds.len(),
        correct as f64 / preds.len().max(1) as f64
    );
    let precision_in = |t: f32, context: IntentContext| {
        let acted: Vec<_> = preds
            .iter()
            .filter(|(g, p, c)| acts(*p) && *c >= t && g.context() == context)
            .collect();
        let right = acted.iter().filter(|(g, p, _)| g == p).count();
        (right as f64 / acted.len().max(1) as f64, acted.len())
    };
    // The search starts at 0.4: a top intent below one half can still be
    // the right one (the other heads share the rest), and the held-out
    // precision decides where acting is safe. Leaving an exercise keeps a
    // bar of at least one half (below).
    let accept_floor: f32 = env("LEARN_ACCEPT_FLOOR")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.4);
    let mut accept = accept_floor;
    let min_precision: f64 = env("LEARN_MIN_PRECISION")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.95);
    while accept < 0.95 && precision_in(accept, IntentContext::Chat).0 < min_precision {
        accept += 0.01;
    }
    // Inside an exercise the fallback is the answer itself, and holding an
    // answer as a side question (or easier, stuck, …) costs the person a
    // repeated step: the bar there is chosen on the exercise rows alone.
    let mut accept_exercise = accept_floor;
    while accept_exercise < 0.95
        && precision_in(accept_exercise, IntentContext::Exercise).0 < min_precision
    {
        accept_exercise += 0.01;
    }
    let false_exit = |t: f32| {
        preds
            .iter()
            .filter(|(g, p, c)| *p == Intent::ExerciseStop && *g != Intent::ExerciseStop && *c >= t)
            .count()
    };
    // A false exit ends an exercise the person did not ask to leave; a
    // missed stop keeps them in it one more turn. Demanding *no* held-out
    // false exit let a single outlying wording (with its generated variants)
    // set the bar, and the bar swung from 0.60 to 0.83 between retrains while
    // stop recall fell. The bar is the lowest at which held-out false exits
    // are at most 0.3 % of the held-out exercise rows of other intents (0.5 %
    // until round 10, when a bar of 0.50 ended an exercise by mistake on the
    // frozen set).
    let others_in_exercise = preds
        .iter()
        .filter(|(g, _, _)| g.context() == IntentContext::Exercise && *g != Intent::ExerciseStop)
        .count();
    let max_false_exit_rate: f64 = env("LEARN_MAX_FALSE_EXIT_RATE")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.003);
    let allowed = (others_in_exercise as f64 * max_false_exit_rate).floor() as usize;
    let mut exit = accept.max(accept_exercise).max(0.5);
    while exit < 0.95 && false_exit(exit) > allowed {
        exit += 0.01;
    }
    if env("LEARN_DIAG").is_some() {
        // The held-out rows of other intents read as a stop (corpus text).
        for (gold, p, c) in &preds {
            if *p == Intent::ExerciseStop && *gold != Intent::ExerciseStop && *c >= accept {
                println!("  read as stop at {c:.2}: {}", gold.as_str());
            }
        }
        for t in [0.5f32, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8] {
            let stops = preds.iter().filter(|(g, _, _)| *g == Intent::ExerciseStop);
            let n = stops.clone().count();
            let hit = stops
                .filter(|(_, p, c)| *p == Intent::ExerciseStop && *c >= t)
                .count();
            println!(
                "  exit {t:.2}: stop recall {hit}/{n}, false exits {}",
                false_exit(t)
            );
        }
    }
    let (prec, n) = precision_in(accept, IntentContext::Chat);
    println!("held out, chat: accept at {accept:.2}: precision {prec:.3} over {n} acted-on rows");
    let (prec, n) = precision_in(accept_exercise, IntentContext::Exercise);
    println!(
        "held out, exercise: accept at {accept_exercise:.2}: precision {prec:.3} over {n} acted-on rows"
    );
    println!(
        "held out, exit at {exit:.2}: {} false exits of {others_in_exercise} exercise rows of other intents (at most {allowed})",
        false_exit(exit)
    );
    for i in Intent::ALL {
        let gold: Vec<_> = preds.iter().filter(|(g, _, _)| g == i).collect();
        let bar = if i.leaves_exercise() || i.changes_the_step() {
            exit
        } else if i.context() == IntentContext::Exercise {
            accept_exercise
        } else {
            accept
        };
        let hit = gold
            .iter()
            .filter(|(g, p, c)| g == p && (*c >= bar || !acts(*p)))
            .count();
        println!(
            "  {:<34} recall {:.3} ({hit}/{})",
            i.as_str(),
            hit as f64 / gold.len().max(1) as f64,
            gold.len()
        );
    }
    // The thresholds above were chosen on the held-out 15 %; with
    // LEARN_SHIP_ALL=1 the shipped weights are retrained on all rows with
    // the same settings (more wordings, same thresholds; the held-out
    // figures printed above are then those of the 85 % model).
    let bytes = if env("LEARN_SHIP_ALL").is_some_and(|v| v == "1") {
        train_set.extend(dev.into_iter().map(|(ex, _)| ex));
        let all = train_softmax(&train_set, &heads, *featurizer.config(), &config, &digest)?;
        println!("shipped weights retrained on all {} rows", train_set.len());
        all.encode_compact(prune)
    } else {
        bytes
    };
    std::fs::write(root.join("data/intent_layer.bin"), &bytes)?;
    let settings = serde_json::json!({
        "accept": (f64::from(accept) * 100.0).round() / 100.0,
        "accept_exercise": (f64::from(accept_exercise) * 100.0).round() / 100.0,
        "exit": (f64::from(exit) * 100.0).round() / 100.0,
        "chosen_on": format!("the corpus's held-out 15% (grouped by hand wording, split by a hash of the group's hand wording): accept (chat) and accept_exercise at the lowest softmax probability >= {accept_floor} with precision >= {min_precision} over the acted-on intents of that context; exit at the lowest >= 0.5 with held-out false exits at most {max_false_exit_rate} of the held-out exercise rows of other intents"),
    });
    std::fs::write(
        root.join("data/intent_layer.json"),
        serde_json::to_string_pretty(&settings)? + "\n",
    )?;
    println!(
        "wrote data/intent_layer.bin ({} bytes) and data/intent_layer.json; corpus sha256 {digest}",
        bytes.len()
    );
    Ok(())
}
