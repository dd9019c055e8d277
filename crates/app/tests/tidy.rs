//! Goal: the house rules that a compiler does not check hold across the workspace. Method: scan
//! the sources: the sans-IO layers never touch a clock, a socket, a thread or unseeded
//! randomness (docs/design.md section 3), no source line is wider than 100 columns, and the
//! docs and comments point only at files a clone of the repository has.

use std::path::{Path, PathBuf};

/// The layers that must stay sans-IO, as folders under crates/.
const SANS_IO: [&str; 6] = ["wire", "proto", "netem", "engine", "sim", "web-client"];

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

/// Text that names a place outside the repository: the planning notes the project was started
/// from live beside the clone, not in it. (Split with `concat!` so that this file passes too.)
const OUTSIDE: [&str; 6] = [
    concat!("../", "shared"),
    concat!("shared", "/DESIGN"),
    concat!("shared", "/STYLE"),
    concat!("shared", "/seeds"),
    concat!("DESIGN", ".md"),
    concat!("STYLE", ".md"),
];

/// Files whose text is scanned for links and mentions (sources, docs, configs, scripts).
const TEXT: [&str; 11] = ["rs", "md", "toml", "go", "sh", "hpp", "cpp", "js", "mjs", "html", "css"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `dir` whose extension is in `extensions`, skipping build output, git and
/// dependency folders.
fn files_with(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(&*name, "target" | ".git" | "node_modules") {
                files_with(&path, extensions, out);
            }
        } else if path.extension().is_some_and(|e| extensions.iter().any(|x| e == *x)) {
            out.push(path);
        }
    }
}

/// The targets of the inline links and images in a markdown text (`[text](target)`), outside
/// fenced code blocks, with their line numbers.
fn markdown_links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find(')') else { break };
            links.push((n + 1, rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
    links
}

/// `path` with `.` and `..` folded, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
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

#[test]
fn no_text_names_a_place_outside_the_repository() {
    let mut files = Vec::new();
    files_with(&workspace(), &TEXT, &mut files);
    assert!(files.iter().any(|f| f.ends_with("README.md")), "the scan found the docs");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("text files are readable");
        for (n, line) in text.lines().enumerate() {
            for outside in OUTSIDE.iter().filter(|o| line.contains(*o)) {
                found.push(format!("{}:{}: {outside}", file.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "mentions of places outside the repository:\n{}", found.join("\n"));
}

#[test]
fn every_relative_link_in_the_docs_reaches_a_file_in_the_repository() {
    let root = normalize(&workspace().canonicalize().expect("the workspace exists"));
    let mut files = Vec::new();
    files_with(&root, &["md"], &mut files);
    let mut links = 0;
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("docs are readable");
        for (n, target) in markdown_links(&text) {
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let resolved = normalize(&file.parent().expect("a file has a folder").join(path));
            if !resolved.starts_with(&root) || !resolved.exists() {
                broken.push(format!("{}:{n}: {target}", file.display()));
            }
        }
    }
    assert!(links > 20, "the scan found the docs' links ({links})");
    assert!(
        broken.is_empty(),
        "links to nothing, or outside the repository:\n{}",
        broken.join("\n")
    );
}
