//! What the source-structure tests (`file_size`, `module_graph`) share: the Rust files of a
//! source folder, and the workspace's crates.
//!
//! INTERFACE
//! - [`source_files`]: every `.rs` file under a folder, in path order.
//! - [`workspace_crates`]: the folders of the workspace's member crates, from the root
//!   `Cargo.toml`'s `members` list.

use std::path::{Path, PathBuf};

pub fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a readable source folder")
        .map(|entry| entry.expect("a readable entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The member crates' folders, as the workspace's `Cargo.toml` lists them (read as text: the
/// list is one line of quoted paths, `members = ["crates/dynosim", ...]`).
#[allow(dead_code)] // `file_size` checks the core crate only.
pub fn workspace_crates() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root");
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("members = ["))
        .and_then(|rest| rest.strip_suffix(']'))
        .expect("a one-line `members = [...]` in the workspace's Cargo.toml");
    members
        .split(',')
        .map(|member| member.trim().trim_matches('"'))
        .filter(|member| !member.is_empty())
        .map(|member| root.join(member))
        .collect()
}
