//! DAG validation and ordering at scale: `Dag::build` alone, and the full `parse_workflow` of a
//! generated `workflow.toml` (TOML parsing, per-step checks, DAG, template ancestor checks).
//!
//! Run with `cargo bench -p cairn-core --bench dag`. Optional arguments filter the cases: a number
//! selects a size, other words match the shape or what is measured (e.g. `-- 10000 chain build`
//! keeps the cases that match every kind of filter given). `CAIRN_BENCH_RUNS` sets the number of
//! timed runs per case (default 7); a case whose first run exceeds 10 s stops at 3 runs, and one
//! whose first run exceeds 60 s at that single run (the table says how many runs it took).
//! No harness, no extra dependencies: `std::time::Instant`, median of the runs.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[path = "support/allocator.rs"]
mod allocator;

#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

use cairn_core::dag::Dag;
use cairn_core::workflow::parse_workflow;

/// A small deterministic generator (SplitMix64), so every run benchmarks the same graphs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// s0 <- s1 <- … : each step needs the previous one.
    Chain,
    /// Layers of `LAYER_WIDTH` steps; each step after the first layer needs 1 to 3 distinct
    /// pseudo-random steps of earlier layers (half of the picks from the layer just before).
    Layered,
    /// A chain whose templates reference the grandparent (an ancestor that is not in `needs`),
    /// which takes `Dag::is_ancestor`'s search path rather than its direct-needs shortcut.
    ChainGrandparentRefs,
    /// Independent steps and one join that needs every one of them (a sweep's summary): one step
    /// with as many needs as the DAG has steps.
    FanIn,
}

const LAYER_WIDTH: usize = 100;

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Chain => "chain",
            Shape::Layered => "layered",
            Shape::ChainGrandparentRefs => "chain, refs to grandparent",
            Shape::FanIn => "fan-in",
        }
    }
}

/// `needs` of every step, by index.
fn generate(shape: Shape, n: usize) -> Vec<Vec<usize>> {
    let mut rng = Rng(0x00C0_FFEE ^ n as u64);
    (0..n)
        .map(|i| match shape {
            Shape::Chain | Shape::ChainGrandparentRefs => {
                if i == 0 {
                    vec![]
                } else {
                    vec![i - 1]
                }
            }
            Shape::FanIn => {
                if i + 1 == n {
                    (0..i).collect()
                } else {
                    vec![]
                }
            }
            Shape::Layered => {
                let layer = i / LAYER_WIDTH;
                if layer == 0 {
                    return vec![];
                }
                let prev_start = (layer - 1) * LAYER_WIDTH;
                let earlier = layer * LAYER_WIDTH; // steps [0, earlier) are in earlier layers
                let k = 1 + rng.below(3);
                let mut needs = Vec::with_capacity(k);
                while needs.len() < k {
                    let d = if rng.below(2) == 0 { prev_start + rng.below(LAYER_WIDTH) } else { rng.below(earlier) };
                    if !needs.contains(&d) {
                        needs.push(d);
                    }
                }
                needs
            }
        })
        .collect()
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("s{i}")).collect()
}

/// A `workflow.toml` with one `[[steps]]` table a step; each step's args reference its needs'
/// results (or, for `ChainGrandparentRefs`, its grandparent's).
fn workflow_text(shape: Shape, needs: &[Vec<usize>], names: &[String]) -> String {
    let mut t = String::with_capacity(needs.len() * 160);
    t.push_str("[workflow]\nname = \"bench\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"/bin/echo\", \"{}\"]\n\n");
    for (i, deps) in needs.iter().enumerate() {
        let _ = write!(t, "[[steps]]\nid = \"{}\"\ntool = \"t\"\n", names[i]);
        if !deps.is_empty() {
            let list: Vec<String> = deps.iter().map(|&d| format!("\"{}\"", names[d])).collect();
            let _ = writeln!(t, "needs = [{}]", list.join(", "));
        }
        let refs: Vec<usize> = match shape {
            Shape::ChainGrandparentRefs if i >= 2 => vec![i - 2],
            // The join's arguments name no result: a 100,000-field table is not what is measured.
            Shape::FanIn => vec![],
            _ => deps.clone(),
        };
        if refs.is_empty() {
            t.push_str("args = { x = \"${input.x}\" }\n");
        } else {
            let fields: Vec<String> =
                refs.iter().enumerate().map(|(k, &d)| format!("x{k} = \"${{steps.{}.result}}\"", names[d])).collect();
            let _ = writeln!(t, "args = {{ {} }}", fields.join(", "));
        }
        t.push('\n');
    }
    t
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fmt(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 10_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1e3)
    }
}

/// On-CPU time of the calling thread (the first field of `/proc/thread-self/schedstat`, in ns),
/// so a figure can be told apart from time spent waiting for a CPU on a loaded machine.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(text.split_whitespace().next()?.parse().ok()?))
}

struct Measured {
    median: Duration,
    min: Duration,
    max: Duration,
    /// Median on-CPU time, when the platform tells it.
    cpu: Option<Duration>,
    runs: usize,
}

/// Times `f` `runs` times (fewer if it is very slow: 3 runs when the first takes over 10 s, one
/// when it takes over 60 s), wall clock and on-CPU.
fn measure(runs: usize, mut f: impl FnMut()) -> Measured {
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    let mut target = runs;
    while wall.len() < target {
        let c = thread_cpu();
        let t = Instant::now();
        f();
        wall.push(t.elapsed());
        if let (Some(c0), Some(c1)) = (c, thread_cpu()) {
            cpu.push(c1.saturating_sub(c0));
        }
        if wall.len() == 1 && wall[0] > Duration::from_secs(60) {
            target = 1;
        } else if wall.len() == 1 && wall[0] > Duration::from_secs(10) {
            target = target.min(3);
        }
    }
    Measured {
        min: *wall.iter().min().unwrap(),
        max: *wall.iter().max().unwrap(),
        runs: wall.len(),
        median: median(wall),
        cpu: (!cpu.is_empty()).then(|| median(cpu)),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let words: Vec<String> = args.iter().filter(|a| a.parse::<usize>().is_err()).map(|a| a.to_lowercase()).collect();
    let runs: usize = std::env::var("CAIRN_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(7).max(1);
    println!(
        "DAG validation and ordering; median of up to {runs} runs (std::time::Instant; cpu = on-CPU time); {}\n",
        allocator::name()
    );
    println!(
        "| {:>7} | {:<26} | {:<16} | {:>10} | {:>10} | {:>10} | {:>10} | {:>4} | {:>9} | {:<4} |",
        "steps", "shape", "measured", "median", "cpu", "min", "max", "runs", "target", "met"
    );
    println!(
        "|{:-<9}|{:-<28}|{:-<18}|{:->12}|{:->12}|{:->12}|{:->12}|{:->6}|{:->11}|{:-<6}|",
        "", "", "", "", "", "", "", "", "", ""
    );
    for n in [10_000usize, 100_000] {
        if !sizes.is_empty() && !sizes.contains(&n) {
            continue;
        }
        let target = if n == 10_000 { Duration::from_millis(100) } else { Duration::from_secs(1) };
        for shape in [Shape::Chain, Shape::Layered, Shape::FanIn, Shape::ChainGrandparentRefs] {
            // The grandparent variant is a diagnostic; at 100,000 steps it costs ~10 more CPU
            // minutes, so it runs there only when asked for by name.
            if shape == Shape::ChainGrandparentRefs && n > 10_000 && !words.iter().any(|w| w.contains("grandparent")) {
                continue;
            }
            let needs = generate(shape, n);
            let ids = names(n);
            let edges: usize = needs.iter().map(Vec::len).sum();
            let text = workflow_text(shape, &needs, &ids);
            let row = |what: &str, m: Measured| {
                println!(
                    "| {n:>7} | {:<26} | {what:<16} | {:>10} | {:>10} | {:>10} | {:>10} | {:>4} | {:>9} | {:<4} |",
                    shape.name(),
                    fmt(m.median),
                    m.cpu.map(fmt).unwrap_or_else(|| "-".into()),
                    fmt(m.min),
                    fmt(m.max),
                    m.runs,
                    format!("< {}", fmt(target).replace(".00", "")),
                    if m.median < target { "yes" } else { "NO" },
                );
            };
            let label = format!("{n} {}", shape.name());
            let wanted = |what: &str| {
                let hay = format!("{} {}", shape.name(), what.to_lowercase());
                words.is_empty() || words.iter().any(|w| hay.contains(w.as_str()))
            };

            // The graph must be valid and its order a topological permutation.
            let dag = Dag::build(
                needs.iter().enumerate().map(|(i, d)| (ids[i].as_str(), d.iter().map(|&j| ids[j].as_str()))),
            )
            .expect("a generated DAG is valid");
            assert_eq!(dag.order().len(), n);
            let mut pos = vec![0; n];
            for (p, &i) in dag.order().iter().enumerate() {
                pos[i] = p;
            }
            assert!((0..n).all(|i| dag.needs(i).iter().all(|&d| pos[d] < pos[i])));

            if shape != Shape::ChainGrandparentRefs && wanted("Dag::build") {
                row(
                    "Dag::build",
                    measure(runs, || {
                        let dag = Dag::build(
                            needs
                                .iter()
                                .enumerate()
                                .map(|(i, d)| (ids[i].as_str(), d.iter().map(|&j| ids[j].as_str()))),
                        )
                        .unwrap();
                        black_box(dag.order().len());
                    }),
                );
            }
            if wanted("parse_workflow") {
                // No untimed warm-up: at 100,000 steps one parse takes minutes. Each timed parse
                // is checked instead.
                row(
                    "parse_workflow",
                    measure(runs, || {
                        let spec =
                            parse_workflow(black_box(&text), "workflow.toml").expect("the generated workflow is valid");
                        assert_eq!(spec.steps.len(), n);
                        black_box(spec);
                    }),
                );
            }
            if args.is_empty() {
                eprintln!("  ({label}: {edges} edges, workflow.toml {:.1} MB)", text.len() as f64 / 1e6);
            }
        }
    }
}
