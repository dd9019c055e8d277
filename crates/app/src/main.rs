//! The `rally` binary: see the library ([`rally_app`]) for everything it does.

fn main() -> std::process::ExitCode {
    rally_app::main()
}
