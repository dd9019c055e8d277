//! The `rally-bench` binary: see the library ([`rally_bench`]) for everything it does.

fn main() -> std::process::ExitCode {
    rally_bench::main()
}
