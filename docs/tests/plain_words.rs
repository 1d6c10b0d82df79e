//! The docs a reader meets speak for themselves: no issue numbers, no
//! references to the specification the project was built from, and
//! `docs/benchmarks.md` opens with the current figures, naming the
//! machine, the commit and the command.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md, docs/*.md and every crate's README.
fn reader_docs() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in [root.join("docs")].into_iter().chain(
        std::fs::read_dir(root.join("crates"))
            .unwrap()
            .map(|e| e.unwrap().path()),
    ) {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 10, "found {files:?}");
    files
}

#[test]
fn no_doc_refers_to_issue_numbers_or_the_specification() {
    for file in reader_docs() {
        let text = std::fs::read_to_string(&file).unwrap().to_lowercase();
        for (n, line) in text.lines().enumerate() {
            let words: Vec<&str> = line.split_whitespace().collect();
            for pair in words.windows(2) {
                let number = pair[1].trim_start_matches('#');
                assert!(
                    !(pair[0].trim_start_matches('(') == "issue"
                        && number.starts_with(|c: char| c.is_ascii_digit())),
                    "{}:{}: an issue number: {line}",
                    file.display(),
                    n + 1
                );
            }
            for phrase in ["the brief", "brief.md", "in the seeds", "the seeds'"] {
                assert!(
                    !line.contains(phrase),
                    "{}:{}: \"{phrase}\": {line}",
                    file.display(),
                    n + 1
                );
            }
        }
    }
}

#[test]
fn benchmarks_open_with_the_current_figures_their_machine_commit_and_command() {
    let text = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap();
    let first_section = text
        .split("\n## ")
        .nth(1)
        .expect("a section after the introduction");
    assert!(
        first_section.starts_with("Current figures"),
        "the first section is {:?}",
        first_section.lines().next()
    );
    for needed in ["Commit `", "Machine:", "Command: `pool bench --markdown`"] {
        assert!(first_section.contains(needed), "{needed}");
    }
    let history = text.find("\n## History").expect("a history section");
    let current = text.find("\n## Current figures").unwrap();
    assert!(current < history, "history comes after the current figures");
}
