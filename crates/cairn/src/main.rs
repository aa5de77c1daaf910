//! The `cairn` executable: everything is in the library (`lib.rs`), so tests can reach it too.

fn main() -> std::process::ExitCode {
    cairn::main()
}
