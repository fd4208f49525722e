//! No source file of the crate holds more than [`PRODUCTION_LINE_LIMIT`] lines of production
//! code: past that size a file has usually gathered more than one concern, and it is split
//! along them (as `router/kv/` is: a folder whose `mod.rs` says what each part offers).
//!
//! Production lines are a file's lines less its test code: an item under `#[cfg(test)]` (with
//! the doc comment above it) and whole files that are test modules (`#[cfg(test)] mod tests;`
//! and the like). Sources are rustfmt-formatted, so an item under `#[cfg(test)]` ends at the
//! first line that closes a brace at the attribute's indent, or is one line ending in `;`.
//! Run it with `cargo test -p dynosim --test file_size`; a failure names each file and its count.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod source_tree;

use source_tree::source_files;

const PRODUCTION_LINE_LIMIT: usize = 1_200;

/// Files known to be over the limit while their split is under way elsewhere. A listed file
/// that is gone or back under the limit fails the test, so the list only shrinks.
const SPLIT_PENDING: &[&str] = &[];

/// The folder a file's child modules live in: its own folder for `lib.rs` and `mod.rs`, else a
/// folder named after it.
fn child_folder(file: &Path) -> PathBuf {
    let parent = file.parent().expect("a file in a folder");
    match file.file_stem().and_then(|stem| stem.to_str()) {
        Some("lib" | "mod") => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
        None => parent.to_path_buf(),
    }
}

struct Counted {
    production: usize,
    /// Files of child modules declared under `#[cfg(test)]` (`mod tests;`).
    test_children: Vec<PathBuf>,
}

fn count(file: &Path, text: &str) -> Counted {
    let lines: Vec<&str> = text.lines().collect();
    let mut test_lines = vec![false; lines.len()];
    let mut test_children = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        if lines[at].trim() != "#[cfg(test)]" {
            at += 1;
            continue;
        }
        let indent = &lines[at][..lines[at].len() - lines[at].trim_start().len()];
        let mut start = at;
        while start > 0 && lines[start - 1].trim_start().starts_with("///") {
            start -= 1;
        }
        let mut item = at + 1;
        while item < lines.len() && lines[item].trim_start().starts_with("#[") {
            item += 1;
        }
        let end = if lines.get(item).is_some_and(|line| line.ends_with(';')) {
            let declared = lines[item].trim();
            if let Some(name) = declared
                .rsplit_once("mod ")
                .and_then(|(_, rest)| rest.strip_suffix(';'))
            {
                let folder = child_folder(file);
                test_children.push(folder.join(format!("{name}.rs")));
                test_children.push(folder.join(name).join("mod.rs"));
            }
            item
        } else {
            let closing = format!("{indent}}}");
            (item..lines.len())
                .find(|&line| lines[line].trim_end() == closing)
                .unwrap_or_else(|| {
                    panic!(
                        "{}:{}: no closing brace for the #[cfg(test)] item",
                        file.display(),
                        at + 1
                    )
                })
        };
        for flag in &mut test_lines[start..=end] {
            *flag = true;
        }
        at = end + 1;
    }
    Counted {
        production: test_lines.iter().filter(|&&test| !test).count(),
        test_children,
    }
}

/// Every non-test source file under `src` with its production line count, from the crate
/// root down, so that a test module's declaration is seen before its file.
fn production_lines(src: &Path) -> Vec<(String, usize)> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    let mut test_files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut counted = Vec::new();
    // Parents first: a folder's files are listed after the file that declares the folder.
    files.sort_by_key(|file| file.components().count());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let in_test_folder = file
            .ancestors()
            .skip(1)
            .take_while(|folder| *folder != src)
            .any(|folder| test_files.contains(&folder.join("mod.rs")));
        let result = count(&file, &text);
        if test_files.contains(&file) || in_test_folder {
            test_files.extend(result.test_children);
            continue;
        }
        test_files.extend(result.test_children);
        let relative = file.strip_prefix(src).expect("a file under src");
        counted.push((relative.display().to_string(), result.production));
    }
    counted.sort();
    counted
}

#[test]
fn no_file_is_over_the_production_line_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let counted = production_lines(&src);
    let mut problems = Vec::new();
    for (file, lines) in &counted {
        let pending = SPLIT_PENDING.contains(&file.as_str());
        if *lines > PRODUCTION_LINE_LIMIT && !pending {
            problems.push(format!(
                "{file}: {lines} production lines (limit {PRODUCTION_LINE_LIMIT}): split it along its concerns"
            ));
        }
        if *lines <= PRODUCTION_LINE_LIMIT && pending {
            problems.push(format!(
                "{file}: {lines} production lines, within the limit: take it off SPLIT_PENDING"
            ));
        }
    }
    for pending in SPLIT_PENDING {
        if !counted.iter().any(|(file, _)| file == pending) {
            problems.push(format!("{pending}: gone: take it off SPLIT_PENDING"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The count leaves test code out and keeps the rest: a known test-module file is not
/// counted, and a file with an inline test module counts its lines before it.
#[test]
fn the_count_leaves_out_test_code_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let counted = production_lines(&src);
    let lines_of = |name: &str| {
        counted
            .iter()
            .find(|(file, _)| file == name)
            .map(|(_, lines)| *lines)
    };
    // `config/options/tests.rs` is declared `#[cfg(test)] mod tests;`.
    assert_eq!(lines_of("config/options/tests.rs"), None);
    assert!(lines_of("config/options/mod.rs").is_some());

    let text = "fn kept() {}\n\n/// Doc.\n#[cfg(test)]\nmod tests {\n    fn gone() {}\n}\n\
                impl A {\n    #[cfg(test)]\n    fn gone(&self) {\n    }\n    fn kept(&self) {}\n}\n\
                #[cfg(test)]\nmod more;\n";
    let result = count(Path::new("src/a.rs"), text);
    // Kept: `fn kept`, the blank line, `impl A {`, `fn kept(&self)`, `}`.
    assert_eq!(result.production, 5);
    assert!(result
        .test_children
        .contains(&PathBuf::from("src/a/more.rs")));
}
