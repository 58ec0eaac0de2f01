//! Files named in prose exist: every code span that looks like a path of
//! the repository (`crates/runtime/src/store.rs`, `io/log_shards.rs`,
//! `scripts/test.sh`) in README.md, CONTRIBUTING.md, `docs/` and the `//!`
//! comments of every Rust file names a file or directory that is there —
//! whole, or as the tail of one (`store.rs` as a module's file). A file
//! deleted or renamed takes its mentions with it. No service needed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Parser};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file and directory of the repository, relative to its root, `/`
/// separated (build output, VCS and dependency folders left out).
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if matches!(name.as_str(), "target" | ".git" | "node_modules" | ".kshard") {
                continue;
            }
            let path = dir.join(&name);
            out.insert(path.to_string_lossy().replace('\\', "/"));
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// Extensions of the repository's own files a span may name.
const EXTENSIONS: [&str; 8] = ["rs", "md", "sh", "toml", "py", "java", "proto", "tsv"];

/// True when `span` reads as a path of the repository: no spaces or
/// placeholders, and a file with one of [`EXTENSIONS`] (or a directory,
/// with a `/` at its end and one inside).
fn looks_like_a_path(span: &str) -> bool {
    if span.is_empty()
        || span.starts_with(['/', '~', '.', '-'])
        || span.contains(|c: char| c.is_whitespace() || "<>{}[]()*$?=:,;|'\"#@%&…".contains(c))
        || span.contains("..")
        // Build output, made by a run.
        || span.starts_with("target/")
    {
        return false;
    }
    if let Some(dir) = span.strip_suffix('/') {
        return dir.contains('/');
    }
    let name = span.rsplit('/').next().unwrap_or(span);
    let Some((stem, ext)) = name.rsplit_once('.') else { return false };
    !stem.is_empty() && EXTENSIONS.contains(&ext) && (span.contains('/') || ext == "rs" || ext == "sh")
}

/// True when `tree` holds `span`, whole or as the tail of a path.
fn exists(tree: &BTreeSet<String>, span: &str) -> bool {
    let span = span.trim_end_matches('/');
    tree.contains(span) || tree.iter().any(|p| p.ends_with(&format!("/{span}")))
}

/// The code spans of a Markdown page.
fn markdown_spans(text: &str) -> Vec<String> {
    Parser::new(text)
        .filter_map(|e| match e {
            Event::Code(code) => Some(code.into_string()),
            _ => None,
        })
        .collect()
}

/// The code spans of a Rust file's `//!` lines.
fn doc_comment_spans(text: &str) -> Vec<String> {
    let docs: String = text.lines().filter_map(|l| l.trim_start().strip_prefix("//!")).collect::<Vec<_>>().join("\n");
    markdown_spans(&docs)
}

/// `(where, span)` of every span that looks like a path and names nothing.
fn missing(root: &Path) -> Vec<(String, String)> {
    let tree = tree(root);
    let mut out = Vec::new();
    for file in &tree {
        let spans =
            if file == "README.md" || file == "CONTRIBUTING.md" || (file.starts_with("docs/") && file.ends_with(".md"))
            {
                markdown_spans(&std::fs::read_to_string(root.join(file)).unwrap_or_default())
            } else if file.ends_with(".rs") {
                doc_comment_spans(&std::fs::read_to_string(root.join(file)).unwrap_or_default())
            } else {
                continue;
            };
        for span in spans {
            if looks_like_a_path(&span) && !exists(&tree, &span) {
                out.push((file.clone(), span));
            }
        }
    }
    out
}

#[test]
fn every_file_the_documentation_names_exists() {
    let missing = missing(&root());
    let list: Vec<String> = missing.iter().map(|(file, span)| format!("{file}: `{span}`")).collect();
    assert!(list.is_empty(), "files named that do not exist:\n{}", list.join("\n"));
}

#[test]
fn what_reads_as_a_path_and_what_does_not() {
    for path in ["crates/runtime/src/store.rs", "store.rs", "scripts/test.sh", "docs/api.md", "crates/runtime/"] {
        assert!(looks_like_a_path(path), "{path}");
    }
    for not in [
        "target/failed-run-logs/",
        "sums.json",
        "a.b",
        "kshard shards list",
        "{name}.redb",
        "/tmp/x.rs",
        "Store::get",
        "x.md",
        "io/",
    ] {
        assert!(!looks_like_a_path(not), "{not}");
    }
    let tree: BTreeSet<String> = ["crates/runtime/src/store.rs".to_owned()].into();
    assert!(exists(&tree, "store.rs") && exists(&tree, "runtime/src/store.rs"));
    assert!(!exists(&tree, "ore.rs"), "a tail is a whole name");
    assert_eq!(doc_comment_spans("//! see `a/b.rs` and `c`\nfn x() {}"), ["a/b.rs", "c"]);
}
