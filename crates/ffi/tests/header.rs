//! include/rally.h is the C ABI as cbindgen generates it from rally-ffi, and compiles.
//! Goal: the committed header cannot drift from the code, and C and C++ compilers accept it
//! with every warning an error. Method: regenerate it and compare; compile a file that
//! includes it as C11 and as C++17. `RALLY_BLESS=1 cargo test -p rally-ffi --test header`
//! rewrites it.

use std::path::Path;
use std::process::Command;

const CRATE: &str = env!("CARGO_MANIFEST_DIR");

fn header() -> String {
    let config = cbindgen::Config::from_file(Path::new(CRATE).join("cbindgen.toml"))
        .expect("crates/ffi/cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(CRATE)
        .with_config(config)
        .generate()
        .expect("cbindgen reads rally-ffi")
        .write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn committed_header_is_generated_from_the_code() {
    let path = Path::new(CRATE).join("../../include/rally.h");
    let generated = header();
    if std::env::var_os("RALLY_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let file = std::fs::read_to_string(&path).expect("include/rally.h");
    assert_eq!(
        file, generated,
        "include/rally.h drifted from rally-ffi: RALLY_BLESS=1 rewrites it"
    );
}

#[test]
fn header_compiles_as_c11_and_cpp17() {
    let include = Path::new(CRATE).join("../../include");
    let dir = std::env::temp_dir().join(format!("rally-ffi-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Uses a few declarations, so that a header that parses but declares nonsense fails.
    let source = "#include \"rally.h\"\n\
        int main(void) {\n\
            RallyConfig config;\n\
            RallyEvent event;\n\
            (void)event;\n\
            return rally_config_default(&config) == RALLY_STATUS_OK ? 0 : 1;\n\
        }\n";
    for (compiler, file, std) in [("cc", "use.c", "-std=c11"), ("c++", "use.cpp", "-std=c++17")] {
        let file = dir.join(file);
        std::fs::write(&file, source).unwrap();
        let output = Command::new(compiler)
            .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I"])
            .arg(&include)
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("{compiler}: {e}"));
        assert!(
            output.status.success(),
            "{compiler} {std} refused include/rally.h:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
