//! The `cairn` executable: everything is in the library (`lib.rs`), so tests can reach it too.

/// mimalloc, not glibc's malloc: a workflow of 100,000 steps is millions of small allocations,
/// and glibc spent over a quarter of its parse in malloc, free and their consolidation (BENCHMARKS.md
/// §1). Built without transparent huge pages (`no_thp`, Cargo.toml): they cost the daemon 12-19 MiB.
/// The benchmarks of `cairn-core` use the same allocator, so they measure what users run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cairn::main()
}
