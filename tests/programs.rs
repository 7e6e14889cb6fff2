//! Every external program the project runs is installed by its own scripts: the code (the daemon,
//! tests, benches, testkit, the crates and the examples) and the scripts are read, every program
//! they start is collected, and each must be a row of `scripts/programs.tsv` — the table
//! `scripts/ensure-programs.sh` installs Debian's packages from (and the rows the tool scripts
//! build). A failure names the program and the file and line that runs it.
//!
//! What counts as starting a program, in Rust: `Command::new("name")` (std or tokio), a path
//! literal under `/usr/bin`, `/usr/sbin`, `/usr/lib/git-core` (and libfaketime's library), and the
//! tools helpers `tool("name")`; in shell: the arguments of `ensure-programs.sh` and of
//! `command -v`. A program reached only through a variable is found where the variable is set
//! from one of these.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The table: program -> how it is installed (`debian:<package>` or `script:<script>`).
fn table() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join("scripts/programs.tsv")).expect("scripts/programs.tsv");
    let mut rows = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        assert!(cols.len() >= 3, "scripts/programs.tsv:{}: want `program<TAB>installed by<TAB>needed for`, got {line:?}", n + 1);
        let how = cols[1];
        assert!(
            how.starts_with("debian:") || how.starts_with("script:"),
            "scripts/programs.tsv:{}: `{how}` is neither debian:<package> nor script:<script>",
            n + 1
        );
        if let Some(script) = how.strip_prefix("script:") {
            assert!(root().join("scripts").join(script).is_file(), "scripts/programs.tsv:{}: no scripts/{script}", n + 1);
        }
        assert!(rows.insert(cols[0].to_owned(), how.to_owned()).is_none(), "scripts/programs.tsv:{}: {} twice", n + 1, cols[0]);
    }
    rows
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            // Build output, fetched dependencies and examples' work dirs hold no code of ours.
            if !matches!(name.as_ref(), "target" | ".git" | ".work" | "node_modules") {
                files(&path, ext, out);
            }
        } else if name.ends_with(ext) {
            out.push(path);
        }
    }
}

/// The string literal starting right after `prefix` at each place it occurs on `line`.
fn literals_after<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        if let Some(end) = rest.find('"') {
            found.push(&rest[..end]);
        }
    }
    found
}

/// The programs one line of Rust starts.
fn rust_programs(line: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for prefix in ["Command::new(\"", "tool(\""] {
        found.extend(literals_after(line, prefix).into_iter().map(str::to_owned));
    }
    for dir in ["/usr/bin/", "/usr/sbin/", "/usr/lib/git-core/"] {
        found.extend(literals_after(line, &format!("\"{dir}")).into_iter().map(str::to_owned));
    }
    if line.contains("/faketime/libfaketime.so") {
        found.push("faketime".to_owned());
    }
    // A full path names the program by its last part (`/usr/bin/time` is `time`).
    found.into_iter().map(|p| p.rsplit('/').next().unwrap_or(&p).to_owned()).filter(|p| !p.is_empty()).collect()
}

/// The programs one line of shell makes sure of.
fn shell_programs(line: &str) -> Vec<String> {
    let code = line.split(" #").next().unwrap_or(line);
    if code.trim_start().starts_with('#') {
        return Vec::new();
    }
    let mut found = Vec::new();
    if let Some(at) = code.find("ensure-programs.sh ") {
        let args = &code[at + "ensure-programs.sh ".len()..];
        for word in args.split_whitespace() {
            // `${oci:+umoci runc}`: the words inside a parameter expansion count too.
            let word = word.trim_start_matches("${oci:+").trim_end_matches('}');
            if word.starts_with('-') || word.starts_with('$') || word.contains(['>', '|', ';', '&', '(', ')']) {
                break;
            }
            found.push(word.to_owned());
        }
    }
    let mut rest = code;
    while let Some(at) = rest.find("command -v ") {
        rest = &rest[at + "command -v ".len()..];
        let word = rest.split(|c: char| c.is_whitespace() || c == ')' || c == ';').next().unwrap_or("");
        let word = word.trim_matches('"');
        // `command -v "$tool"` is a loop over a list checked elsewhere.
        if !word.is_empty() && !word.starts_with('$') {
            found.push(word.to_owned());
        }
    }
    found
}

/// Programs a shell script may test for that are not the project's to install: the toolchains
/// every machine of this kind has before anything runs, and an alternative the script falls back from.
const TOOLCHAIN: &[&str] = &["cargo", "go", "npm", "node", "rustup", "sudo", "nextest", "cargo-nextest"];

#[test]
fn every_program_the_project_runs_is_installed_by_its_scripts() {
    let table = table();
    let mut rust = Vec::new();
    for dir in ["src", "tests", "benches", "testkit", "crates", "examples", "fuzz"] {
        files(&root().join(dir), ".rs", &mut rust);
    }
    let mut shell = Vec::new();
    for dir in ["scripts", "examples", ".ci"] {
        files(&root().join(dir), ".sh", &mut shell);
    }
    shell.push(root().join(".ci/run"));
    let this = root().join("tests/programs.rs");

    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut check = |path: &Path, programs: Vec<String>, n: usize, toolchain_ok: bool| {
        for program in programs {
            seen.insert(program.clone());
            if table.contains_key(&program) || (toolchain_ok && TOOLCHAIN.contains(&program.as_str())) {
                continue;
            }
            let at = format!("{}:{}", path.strip_prefix(root()).unwrap_or(path).display(), n + 1);
            missing.entry(program).or_default().insert(at);
        }
    };
    for path in &rust {
        if path == &this {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            check(path, rust_programs(line), n, false);
        }
    }
    for path in &shell {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            check(path, shell_programs(line), n, true);
        }
    }
    let report: Vec<String> =
        missing.iter().map(|(p, at)| format!("{p} (run at {})", at.iter().cloned().collect::<Vec<_>>().join(", "))).collect();
    assert!(
        report.is_empty(),
        "programs the project runs that no script installs: add each to scripts/programs.tsv (and make sure its installer has it):\n  {}",
        report.join("\n  ")
    );
    // The scan found what it is known to find: a change to how the code starts programs that
    // blinds it fails here instead of passing for want of finds.
    for known in ["git", "runc", "umoci", "openssl", "sshd", "lighttpd", "docker-registry", "promtool", "faketime", "kubectl", "helm"] {
        assert!(seen.contains(known), "the scan no longer sees `{known}` being run: update tests/programs.rs");
    }
}

#[test]
fn the_scanners_read_what_the_code_writes() {
    assert_eq!(rust_programs(r#"let c = tokio::process::Command::new("runc").arg("run");"#), ["runc"]);
    assert_eq!(
        rust_programs(r#"Path::new("/usr/sbin/sshd"), Path::new("/usr/lib/git-core/git-http-backend")"#),
        ["sshd", "git-http-backend"]
    );
    assert_eq!(rust_programs(r#"let k = common::tool("kubectl")?;"#), ["kubectl"]);
    assert_eq!(rust_programs(r#"env("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")"#), ["faketime"]);
    assert_eq!(
        shell_programs(r#"scripts/ensure-programs.sh buildah skopeo ${oci:+umoci runc} >/dev/null"#),
        ["buildah", "skopeo", "umoci", "runc"]
    );
    assert_eq!(shell_programs(r#"if ! command -v wrk >/dev/null || [ -x "$(command -v jq)" ]; then"#), ["wrk", "jq"]);
    assert_eq!(shell_programs(r#"for t in a b; do command -v "$t"; done"#), Vec::<String>::new());
    assert!(shell_programs("# command -v nothing").is_empty());
}
