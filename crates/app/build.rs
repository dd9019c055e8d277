//! Builds the browser player's client (crates/web-client) for wasm32-unknown-unknown, so that
//! `cargo demo` serves a playable page with nothing installed by hand: adds the wasm target
//! with rustup when it is missing, runs cargo on the client into a target dir of its own
//! (beside the host build, so the two never wait on each other's lock), and leaves the module
//! in OUT_DIR for `include_bytes!`. Whatever fails, the build goes on with an empty module and
//! a warning, and the page says how to get it (docs/web.md). `RALLY_WEB_CLIENT=skip` skips it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates the client is built from: a change in any of them rebuilds it.
const SOURCES: [&str; 6] = ["web-client", "proto", "engine", "sim", "wire", "netem"];
const TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let module = out.join("rally_web_client.wasm");
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for source in SOURCES {
        println!("cargo:rerun-if-changed={}", crates.join(source).display());
    }
    // The lock file pins the client's crates; the manifest holds its `web` profile.
    for file in ["Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", crates.join("..").join(file).display());
    }
    println!("cargo:rerun-if-env-changed=RALLY_WEB_CLIENT");
    let built = if std::env::var("RALLY_WEB_CLIENT").as_deref() == Ok("skip") {
        Err("RALLY_WEB_CLIENT=skip".to_string())
    } else {
        build(&crates.join(".."), &out)
    };
    let bytes = built.unwrap_or_else(|why| {
        println!("cargo:warning=the browser player's wasm client was not built: {why}");
        Vec::new()
    });
    std::fs::write(&module, bytes).expect("OUT_DIR is writable");
}

/// The client's module, built with the `web` profile.
fn build(workspace: &Path, out: &Path) -> Result<Vec<u8>, String> {
    add_target()?;
    let target_dir = target_root(out).join("web-client");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--quiet", "--locked", "-p", "rally-web-client", "--profile", "web"])
        .args(["--target", TARGET, "--target-dir"])
        .arg(&target_dir)
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        // The host build's flags and wrappers (clippy's driver, a host CPU) are not the
        // client's; the jobserver (CARGO_MAKEFLAGS) stays, so both builds share the cores.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR");
    let status = command.status().map_err(|e| format!("cargo did not start: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of rally-web-client for {TARGET}: {status}"));
    }
    let module = target_dir.join(TARGET).join("web/rally_web_client.wasm");
    std::fs::read(&module).map_err(|e| format!("{}: {e}", module.display()))
}

/// Adds the wasm target to the toolchain with rustup, once.
fn add_target() -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustc did not start: {e}"))?;
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    if Path::new(&sysroot).join("lib/rustlib").join(TARGET).is_dir() {
        return Ok(());
    }
    let added = Command::new("rustup").args(["target", "add", TARGET]).status();
    match added {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("`rustup target add {TARGET}` failed ({status})")),
        Err(e) => Err(format!("no {TARGET} target and no rustup to add it ({e})")),
    }
}

/// The build's target directory (where cargo leaves CACHEDIR.TAG), found from OUT_DIR.
fn target_root(out: &Path) -> PathBuf {
    out.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()).unwrap_or(out).to_path_buf()
}
