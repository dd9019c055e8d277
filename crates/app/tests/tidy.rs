//! Goal: the house rules that a compiler does not check hold across the workspace. Method: scan
//! the sources: the sans-IO layers never touch a clock, a socket, a thread or unseeded
//! randomness (shared/DESIGN.md section 3), and no source line is wider than 100 columns.

use std::path::{Path, PathBuf};

/// The layers that must stay sans-IO, as folders under crates/.
const SANS_IO: [&str; 5] = ["wire", "proto", "netem", "engine", "sim"];

/// Calls that read the OS or spawn work, and so belong in the driver only.
/// (`std::net::SocketAddr` is plain data and allowed; sockets are not.)
const BANNED: [&str; 9] = [
    "Instant::now",
    "SystemTime::now",
    "thread_rng",
    "rand::random",
    "UdpSocket",
    "TcpStream",
    "TcpListener",
    "thread::spawn",
    "from_entropy",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn sans_io_layers_never_touch_clocks_sockets_or_threads() {
    let mut violations = Vec::new();
    for layer in SANS_IO {
        let mut files = Vec::new();
        rust_files(&workspace().join("crates").join(layer).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source files are readable");
            for (n, line) in text.lines().enumerate() {
                for banned in BANNED.iter().filter(|b| line.contains(*b)) {
                    violations.push(format!("{}:{}: {banned}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(violations.is_empty(), "sans-IO violations:\n{}", violations.join("\n"));
}

#[test]
fn no_line_is_wider_than_100_columns() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    assert!(files.len() > 10, "the scan found the sources");
    let mut wide = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source files are readable");
        for (n, line) in text.lines().enumerate() {
            if line.chars().count() > 100 {
                wide.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(wide.is_empty(), "lines over 100 columns:\n{}", wide.join("\n"));
}
