//! The documentation's links: README.md, CONTRIBUTING.md and every page of
//! `docs/` are parsed as Markdown, and every link or image that is not a web
//! address must name a file that exists, relative to the page, and — when it
//! has a `#anchor` into a Markdown file — a heading of that file whose
//! GitHub anchor is that. Every page of `docs/` must be linked from
//! `docs/README.md` or the README. No service needed: a plain `cargo test`
//! runs it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages checked, relative to the root: README.md, CONTRIBUTING.md and
/// every `*.md` under `docs/`.
fn pages(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(root.join(dir)).expect("docs/ is readable");
        for entry in entries {
            let entry = entry.expect("a docs/ entry");
            let path = dir.join(entry.file_name());
            let kind = entry.file_type().expect("a docs/ entry's type");
            if kind.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![PathBuf::from("README.md"), PathBuf::from("CONTRIBUTING.md")];
    walk(root, Path::new("docs"), &mut out);
    out.sort();
    out
}

/// GitHub's anchor for a heading whose text is `text`: lower case, every
/// character that is not a letter, a digit, a space, `-` or `_` dropped,
/// spaces turned into `-`.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// What a page holds: the targets of its links and images, in order, and
/// its headings' anchors (a repeated heading's with `-1`, `-2`, … as GitHub
/// gives them).
#[derive(Debug, Default)]
struct Page {
    links: Vec<String>,
    anchors: BTreeSet<String>,
}

fn parse(text: &str) -> Page {
    let mut page = Page::default();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, options()) {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push(dest_url.to_string());
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                let anchor = if *n == 0 { base.clone() } else { format!("{base}-{n}") };
                *n += 1;
                page.anchors.insert(anchor);
            }
            _ => {}
        }
    }
    page
}

/// Whether a link leaves the repository (and is not checked).
fn external(link: &str) -> bool {
    let lower = link.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("mailto:")
}

/// `base` joined with `rel`, `.` and `..` resolved without the file system.
fn resolve(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in base.join(rel).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
}

/// The files a check can look at besides the pages: whether a path
/// (relative to the root) exists, and a Markdown file's text.
trait Files {
    fn exists(&self, path: &Path) -> bool;
    fn markdown(&self, path: &Path) -> Option<String>;
}

/// The repository on disk.
struct Disk(PathBuf);

impl Files for Disk {
    fn exists(&self, path: &Path) -> bool {
        self.0.join(path).exists()
    }
    fn markdown(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(self.0.join(path)).ok()
    }
}

/// Every broken link of `pages` (path relative to the root → text) and every
/// page of `docs/` that neither `docs/README.md` nor `README.md` links to,
/// each as `file: link: why`.
fn check(pages: &BTreeMap<PathBuf, String>, files: &dyn Files) -> Vec<String> {
    let parsed: BTreeMap<&PathBuf, Page> = pages.iter().map(|(p, t)| (p, parse(t))).collect();
    let mut other_anchors: HashMap<PathBuf, Option<BTreeSet<String>>> = HashMap::new();
    let mut failures = Vec::new();
    let mut linked_from_maps: BTreeSet<PathBuf> = BTreeSet::new();
    for (path, page) in &parsed {
        let dir = path.parent().unwrap_or(Path::new(""));
        let is_map = path.as_path() == Path::new("README.md") || path.as_path() == Path::new("docs/README.md");
        for link in &page.links {
            if external(link) {
                continue;
            }
            let fail = |why: String| format!("{}: {link}: {why}", path.display());
            let (file, anchor) = match link.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.as_str(), None),
            };
            if file.is_empty() && anchor.is_none() {
                failures.push(fail("empty target".into()));
                continue;
            }
            let target = if file.is_empty() { (*path).clone() } else { resolve(dir, file) };
            if is_map {
                linked_from_maps.insert(target.clone());
            }
            if !pages.contains_key(&target) && !files.exists(&target) {
                failures.push(fail(format!("{} does not exist", target.display())));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if !is_markdown(&target) {
                continue;
            }
            let anchors = match parsed.get(&target) {
                Some(page) => Some(&page.anchors),
                None => other_anchors
                    .entry(target.clone())
                    .or_insert_with(|| files.markdown(&target).map(|t| parse(&t).anchors))
                    .as_ref(),
            };
            match anchors {
                None => failures.push(fail(format!("{} cannot be read", target.display()))),
                Some(anchors) if !anchors.contains(anchor) => {
                    failures.push(fail(format!("{} has no heading with the anchor #{anchor}", target.display())));
                }
                Some(_) => {}
            }
        }
    }
    for path in pages.keys() {
        let in_docs = path.starts_with("docs") && path.as_path() != Path::new("docs/README.md");
        if in_docs && !linked_from_maps.contains(path) {
            failures.push(format!("{}: (none): no link to it from docs/README.md or README.md", path.display()));
        }
    }
    failures
}

#[test]
fn every_link_of_the_documentation_resolves() {
    let root = root();
    let pages: BTreeMap<PathBuf, String> = pages(&root)
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(root.join(&p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect();
    assert!(pages.len() > 3, "found only {:?}", pages.keys().collect::<Vec<_>>());
    let failures = check(&pages, &Disk(root));
    assert!(failures.is_empty(), "broken documentation links:\n{}", failures.join("\n"));
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("The lag monitor: `kshard serve`"), "the-lag-monitor-kshard-serve");
    assert_eq!(slug("Restarts in seconds (--data-dir)"), "restarts-in-seconds---data-dir");
    assert_eq!(slug("Runtime metrics (each member's /metrics)"), "runtime-metrics-each-members-metrics");
    assert_eq!(slug("scrape_mode: admin_api"), "scrape_mode-admin_api");
    let page = parse("# The lag monitor: `kshard serve`\n\n## Notes\n\n## Notes\n\n## Notes\n");
    let anchors: Vec<&str> = page.anchors.iter().map(String::as_str).collect();
    assert_eq!(anchors, ["notes", "notes-1", "notes-2", "the-lag-monitor-kshard-serve"]);
}

/// Nothing on disk: only the pages given exist.
struct Nothing;

impl Files for Nothing {
    fn exists(&self, _: &Path) -> bool {
        false
    }
    fn markdown(&self, _: &Path) -> Option<String> {
        None
    }
}

#[test]
fn broken_links_bad_anchors_and_orphans_are_named() {
    let pages: BTreeMap<PathBuf, String> = [
        (
            "README.md",
            "# Top\n\n[a](docs/a.md), [a's heading](docs/a.md#the-lag-monitor-kshard-serve), [top](#top),\n\
             [web](https://example.com/x.md#y), [mail](mailto:a@example.com),\n\
             [gone](docs/missing.md), [bad anchor](docs/a.md#nope)\n\n\
             | page | what |\n| --- | --- |\n| [in a table](docs/b.md#nowhere) | x |\n",
        ),
        ("docs/README.md", "# Map\n\n[b](b.md) ![picture](img/missing.png)\n"),
        (
            "docs/a.md",
            "# The lag monitor: `kshard serve`\n\n[back](../README.md#top) [self](#the-lag-monitor-kshard-serve)\n",
        ),
        ("docs/b.md", "# B\n\n## Same\n\n## Same\n\n[second](#same-1) [third](#same-2)\n"),
        ("docs/orphan.md", "# Orphan\n\n[up](../README.md)\n"),
    ]
    .into_iter()
    .map(|(p, t)| (PathBuf::from(p), t.to_string()))
    .collect();
    let failures = check(&pages, &Nothing);
    assert_eq!(
        failures,
        [
            "README.md: docs/missing.md: docs/missing.md does not exist",
            "README.md: docs/a.md#nope: docs/a.md has no heading with the anchor #nope",
            "README.md: docs/b.md#nowhere: docs/b.md has no heading with the anchor #nowhere",
            "docs/README.md: img/missing.png: docs/img/missing.png does not exist",
            "docs/b.md: #same-2: docs/b.md has no heading with the anchor #same-2",
            "docs/orphan.md: (none): no link to it from docs/README.md or README.md",
        ]
    );
}

/// Every Rust block of docs/first-application.md is the example crate's
/// code (its lines, trimmed, in order in one of its files): the guide shows
/// what `scripts/test.sh` compiles and runs.
#[test]
fn the_guides_code_is_the_example_crates() {
    let root = root();
    let guide = std::fs::read_to_string(root.join("docs/first-application.md")).expect("the guide");
    let example = root.join("examples/first-app");
    let sources: Vec<String> = ["src/lib.rs", "src/main.rs", "tests/faults.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(example.join(f)).unwrap_or_else(|e| panic!("{f}: {e}")))
        .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n"))
        .collect();
    let blocks: Vec<String> = guide
        .split("```rust\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or_default())
        .map(|b| b.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n"))
        .collect();
    assert!(blocks.len() >= 3, "the guide's Rust blocks: {blocks:?}");
    for block in &blocks {
        assert!(sources.iter().any(|s| s.contains(block.as_str())), "not in examples/first-app:\n{block}");
    }
}
