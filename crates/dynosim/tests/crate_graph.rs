//! The workspace's crates depend on one another downwards only, and the libraries of the
//! command line (argument parsing, the progress display) stay in the fronts.
//!
//! Each member's `Cargo.toml` is read as text: the names declared under `[dependencies]` and
//! `[target.'…'.dependencies]` (dev- and build-dependencies are not part of what a crate links
//! into its users). [`LAYERS`] orders the members bottom up; a member may depend on members of
//! lower layers only, so a crate never reaches up into a front (the output step does not know
//! the command line, the sweep does not know the Python package). Cargo refuses circles by
//! itself; this holds the direction.
//!
//! Run it with `cargo test -p dynosim --test crate_graph`.

use std::collections::BTreeMap;

// Only the member list is used here (`source_files` is the other tests').
#[allow(dead_code)]
mod source_tree;

use source_tree::workspace_crates;

/// The member crates, bottom up: the pure core; the one I/O step of AIC timing; the jobs built
/// on them (one run and its files, a sweep, the HTTP server); fidelity (over the sweep); the
/// command line; the Python package.
const LAYERS: &[&[&str]] = &[
    &["dynosim"],
    &["dynosim-aic-tables"],
    &["dynosim-run", "dynosim-sweep", "dynosim-serve"],
    &["dynosim-validate"],
    &["dynosim-cli"],
    &["dynosim-py"],
];

/// Libraries of a command line, which only the `dynosim` binary's crate may link.
const COMMAND_LINE_LIBRARIES: &[&str] = &["clap", "indicatif"];

/// Crates that every front links: they must not bring the command line's libraries along.
const SHARED_BY_THE_FRONTS: &[&str] = &["dynosim", "dynosim-aic-tables", "dynosim-run"];

/// The dependencies a manifest declares for linking (its `[dependencies]` tables, including
/// target-specific ones), by name.
fn linked_dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]"
                || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if !in_dependencies || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            let name = key.trim();
            let name = name.strip_suffix(".workspace").unwrap_or(name);
            names.push(name.trim_matches('"').to_string());
        }
    }
    names
}

/// Every member crate's linked dependencies, by the crate's folder name.
fn members() -> BTreeMap<String, Vec<String>> {
    workspace_crates()
        .into_iter()
        .map(|folder| {
            let name = folder
                .file_name()
                .expect("a member folder")
                .to_string_lossy()
                .into_owned();
            let manifest = std::fs::read_to_string(folder.join("Cargo.toml"))
                .unwrap_or_else(|err| panic!("{}: {err}", folder.display()));
            (name, linked_dependencies(&manifest))
        })
        .collect()
}

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&name))
}

/// Every arrow between members that does not run down the layers, as `a -> b` lines.
fn arrows_not_running_down(members: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, dependencies) in members {
        let Some(from) = layer(name) else {
            wrong.push(format!(
                "{name}: not in LAYERS (give the new crate its layer)"
            ));
            continue;
        };
        for dependency in dependencies.iter().filter(|d| members.contains_key(*d)) {
            let runs_down = matches!(layer(dependency), Some(to) if to < from);
            if !runs_down {
                wrong.push(format!("{name} -> {dependency}"));
            }
        }
    }
    wrong
}

#[test]
fn member_crates_depend_downwards() {
    let members = members();
    assert!(
        members.len() >= LAYERS.iter().map(|layer| layer.len()).sum::<usize>(),
        "the workspace's members were not all found: {:?}",
        members.keys()
    );
    let wrong = arrows_not_running_down(&members);
    assert!(
        wrong.is_empty(),
        "crate dependencies that do not run down the layers of crate_graph.rs:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_crates_every_front_links_have_no_command_line_libraries() {
    let members = members();
    let mut wrong = Vec::new();
    for name in SHARED_BY_THE_FRONTS {
        let dependencies = members
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not a member"));
        for library in COMMAND_LINE_LIBRARIES {
            if dependencies.iter().any(|d| d == library) {
                wrong.push(format!("{name} -> {library}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The checks find what they look for: an upward arrow, a member without a layer, and the
/// dependency tables read (target-specific included, dev-dependencies left out).
#[test]
fn the_checks_find_wrong_arrows() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\ndynosim.workspace = true\n\
                    clap = { version = \"4\" }\n\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n\n\
                    [dev-dependencies]\ndynosim-cli.workspace = true\n";
    assert_eq!(
        linked_dependencies(manifest),
        ["dynosim", "clap", "libc"].map(String::from)
    );
    let members: BTreeMap<String, Vec<String>> = [
        ("dynosim", vec![]),
        ("dynosim-run", vec!["dynosim", "dynosim-cli"]),
        ("dynosim-cli", vec!["dynosim-run"]),
        ("dynosim-new", vec!["dynosim"]),
    ]
    .into_iter()
    .map(|(name, deps)| {
        (
            name.to_string(),
            deps.into_iter().map(String::from).collect(),
        )
    })
    .collect();
    assert_eq!(
        arrows_not_running_down(&members),
        [
            "dynosim-new: not in LAYERS (give the new crate its layer)",
            "dynosim-run -> dynosim-cli"
        ]
        .map(String::from)
    );
}
