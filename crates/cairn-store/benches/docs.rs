//! The procedure-doc index with 1,000 docs: the search itself (SQLite FTS5, BM25 ranking, the
//! snippet of each hit), as `SqliteStore::search_docs` answers it, for queries from one match to
//! every doc; and a save (version row, index row and search row in one fsynced transaction).
//! Target (issue 18): search median under 10 ms. Run with `cargo bench -p cairn-store --bench docs`.

use std::time::{Duration, Instant};

use cairn_core::canonical::sha256_hex;
use cairn_core::docs::title_of;
use cairn_core::store::{Docs, NewDocVersion, SaveDoc};
use cairn_store::SqliteStore;

const DOCS: usize = 1000;
const REPS: usize = 200;

/// Deterministic words: a few domain words and a synthetic vocabulary, drawn Zipf-like.
struct Words {
    vocab: Vec<String>,
    seed: u64,
}

impl Words {
    fn new() -> Words {
        let mut vocab: Vec<String> = [
            "the",
            "data",
            "derive",
            "threshold",
            "from",
            "new",
            "then",
            "filter",
            "cells",
            "genes",
            "pca",
            "clustering",
            "normalise",
            "counts",
            "umap",
            "quality",
            "control",
            "batch",
            "samples",
            "model",
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        let syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "dr"];
        for i in 0..3000usize {
            let a = syllables[i % 12];
            let b = syllables[(i / 12) % 12];
            let c = syllables[(i / 144) % 12];
            vocab.push(format!("{a}{b}{c}{}", i % 7));
        }
        Words { vocab, seed: 0x9E37_79B9_7F4A_7C15 }
    }

    fn next(&mut self) -> &str {
        self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = ((self.seed >> 11) as f64) / ((1u64 << 53) as f64);
        // Zipf with exponent 1 over the vocabulary, by inverting the harmonic CDF approximately.
        let n = self.vocab.len() as f64;
        let rank = (n.powf(u) - 1.0).floor() as usize;
        &self.vocab[rank.min(self.vocab.len() - 1)]
    }

    fn sentence(&mut self, n: usize) -> String {
        (0..n).map(|_| self.next().to_string()).collect::<Vec<_>>().join(" ")
    }
}

/// A procedure doc of about 5 KiB: a title, four sections of prose, a code block, a marker word
/// only it holds.
fn doc(i: usize, w: &mut Words) -> String {
    let mut text = format!("# {} procedure {i}\n\nmarker{i:04} {}.\n", w.sentence(3), w.sentence(40));
    for s in 0..4 {
        text.push_str(&format!("\n## Step {s}: {}\n\n{}.\n\n{}.\n", w.sentence(3), w.sentence(60), w.sentence(50)));
    }
    text.push_str(
        "\n```python\nthreshold = np.percentile(values, 95)\ncells = cells[cells.n_genes > threshold]\n```\n",
    );
    text
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(samples[samples.len() / 2]), ms(samples[samples.len() * 95 / 100]))
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(&dir.path().join("cairn.db")).expect("the registry opens");
    let mut w = Words::new();
    let mut saves = Vec::with_capacity(DOCS);
    let mut bytes = 0;
    for i in 0..DOCS {
        let text = doc(i, &mut w);
        bytes += text.len();
        let new = NewDocVersion {
            name: format!("procedure-{i:04}"),
            title: title_of(&text).unwrap_or_default(),
            sha256: sha256_hex(text.as_bytes()),
            text,
            verification_id: None,
            notebook: None,
            at: i as i64,
        };
        let started = Instant::now();
        assert!(matches!(store.save_doc(&new).expect("saved"), SaveDoc::Saved(_)));
        saves.push(started.elapsed());
    }
    let (save_median, save_p95) = stats(saves);
    println!("{DOCS} docs, {:.1} KiB each on average", bytes as f64 / DOCS as f64 / 1024.0);
    println!("save (one fsynced transaction): median {save_median:.2} ms, p95 {save_p95:.2} ms");
    println!();
    println!("| query | hits (limit 10 / all) | median | p95 |");
    println!("|---|---:|---:|---:|");
    let rare = w.vocab[300].clone();
    let queries = [
        ("one doc's marker word", "marker0423".to_string()),
        ("a word in every doc", "threshold".to_string()),
        ("two common words", "data filter".to_string()),
        ("a phrase", "\"derive the threshold\"".to_string()),
        ("a prefix", "clust*".to_string()),
        ("OR of two words", "pca OR umap".to_string()),
        ("a word in a fifth of the docs", rare),
    ];
    let mut worst: f64 = 0.0;
    for (what, q) in &queries {
        let q = q.as_str();
        let all = store.search_docs(q, 1000).expect("search").len();
        for _ in 0..5 {
            store.search_docs(q, 10).expect("search");
        }
        let mut samples = Vec::with_capacity(REPS);
        let mut hits = 0;
        for _ in 0..REPS {
            let started = Instant::now();
            hits = store.search_docs(q, 10).expect("search").len();
            samples.push(started.elapsed());
        }
        let (median, p95) = stats(samples);
        worst = worst.max(median);
        println!("| {what} (`{q}`) | {hits} / {all} | {median:.2} ms | {p95:.2} ms |");
    }
    println!();
    println!("slowest median {worst:.2} ms; target < 10 ms: {}", if worst < 10.0 { "met" } else { "NOT met" });
}
