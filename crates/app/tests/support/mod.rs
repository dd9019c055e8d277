//! What the app's integration tests share.

/// Writes `text` as a config file in a fresh directory under the target directory.
pub fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("server.toml");
    std::fs::write(&path, text).expect("the config is written");
    path
}
