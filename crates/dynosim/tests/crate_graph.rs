//! The workspace's crates depend on one another downwards only, and the libraries of the
//! command line (argument parsing, the progress display) stay in the fronts.
//!
//! Each member's `Cargo.toml` is read as text: the names declared under `[dependencies]` and
//! `[target.'…'.dependencies]` (dev- and build-dependencies are not part of what a crate links
//! into its users). [`LAYERS`] orders the members bottom up; a member may depend on members of
//! lower layers only, so a crate never reaches up into a front (the output step does not know
//! the command line, the sweep does not know the Python package). Cargo refuses circles by
//! itself; this holds the direction. The two fronts share a layer, so neither links the other:
//! the Python extension reaches the command line by running the `dynosim` binary (the
//! `dynosim-bin` wheel), and nothing it links, directly or through other members, may bring
//! the command line or its libraries along. The Python package pins that wheel to the
//! workspace's version.
//!
//! Run it with `cargo test -p dynosim --test crate_graph`.

use std::collections::BTreeMap;

// Only the member list is used here (`source_files` is the other tests').
#[allow(dead_code)]
mod source_tree;

use source_tree::workspace_crates;

/// The member crates, bottom up: the pure core; the one I/O step of AIC timing; the jobs built
/// on them (one run and its files, a sweep, the HTTP server); fidelity (over the sweep); the
/// fronts (the command line, the Python package).
const LAYERS: &[&[&str]] = &[
    &["dynosim"],
    &["dynosim-aic-tables"],
    &["dynosim-run", "dynosim-sweep", "dynosim-serve"],
    &["dynosim-validate"],
    &["dynosim-cli", "dynosim-py"],
];

/// The crate of the Python extension module.
const PYTHON_EXTENSION: &str = "dynosim-py";
/// The crate of the `dynosim` binary.
const COMMAND_LINE: &str = "dynosim-cli";

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

/// Every crate `start` links, directly or through members (external crates are named, not
/// followed: the command-line libraries are declared by name where they are used), with the
/// path that reaches it, `a -> b -> c`.
fn linked_closure(
    members: &BTreeMap<String, Vec<String>>,
    start: &str,
) -> BTreeMap<String, String> {
    let mut reached: BTreeMap<String, String> = BTreeMap::new();
    let mut frontier = vec![(start.to_string(), start.to_string())];
    while let Some((name, path)) = frontier.pop() {
        for dependency in members.get(&name).into_iter().flatten() {
            if reached.contains_key(dependency) {
                continue;
            }
            let reaching = format!("{path} -> {dependency}");
            reached.insert(dependency.clone(), reaching.clone());
            if members.contains_key(dependency) {
                frontier.push((dependency.clone(), reaching));
            }
        }
    }
    reached
}

/// What in `start`'s closure is the command line or one of its libraries, as paths.
fn command_line_reached(members: &BTreeMap<String, Vec<String>>, start: &str) -> Vec<String> {
    let reached = linked_closure(members, start);
    std::iter::once(COMMAND_LINE)
        .chain(COMMAND_LINE_LIBRARIES.iter().copied())
        .filter_map(|name| reached.get(name).cloned())
        .collect()
}

#[test]
fn the_python_extension_links_no_command_line() {
    let members = members();
    assert!(
        members.contains_key(PYTHON_EXTENSION),
        "{PYTHON_EXTENSION} is not a member"
    );
    let wrong = command_line_reached(&members, PYTHON_EXTENSION);
    assert!(
        wrong.is_empty(),
        "the Python extension links the command line or its libraries (it runs the `dynosim` \
         binary instead):\n{}",
        wrong.join("\n")
    );
}

/// The `version = "..."` of a TOML table's text (the first one).
fn version_in(manifest: &str) -> Option<&str> {
    manifest.lines().find_map(|line| {
        let value = line
            .trim()
            .strip_prefix("version")?
            .trim()
            .strip_prefix('=')?;
        Some(value.trim().trim_matches('"'))
    })
}

#[test]
fn the_python_package_requires_the_binary_wheel_of_its_own_version() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
    };
    let workspace = read("Cargo.toml");
    let version = version_in(&workspace).expect("the workspace's package version");
    let python_package = read("pyproject.toml");
    let wanted = format!("dependencies = [\"dynosim-bin=={version}\"]");
    assert!(
        python_package.lines().any(|line| line.trim() == wanted),
        "pyproject.toml must require the binary wheel of the same version: {wanted}"
    );
    let binary_package = read("crates/dynosim-cli/pyproject.toml");
    assert!(binary_package.contains("name = \"dynosim-bin\""));
    assert!(binary_package.contains("bindings = \"bin\""));
}

/// A made-up workspace: each member's linked dependencies.
fn members_of(members: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    members
        .iter()
        .map(|(name, dependencies)| {
            let dependencies = dependencies.iter().map(|d| d.to_string()).collect();
            (name.to_string(), dependencies)
        })
        .collect()
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
    let members = members_of(&[
        ("dynosim", &[]),
        ("dynosim-run", &["dynosim", "dynosim-cli"]),
        ("dynosim-cli", &["dynosim-run"]),
        ("dynosim-new", &["dynosim"]),
    ]);
    assert_eq!(
        arrows_not_running_down(&members),
        [
            "dynosim-new: not in LAYERS (give the new crate its layer)",
            "dynosim-run -> dynosim-cli"
        ]
        .map(String::from)
    );
}

/// The extension's check sees the command line and its libraries however deep they come in,
/// and an arrow from one front to the other.
#[test]
fn the_extension_check_finds_the_command_line_through_members() {
    let members = members_of(&[
        ("dynosim", &["serde"]),
        ("dynosim-sweep", &["dynosim", "indicatif"]),
        ("dynosim-py", &["dynosim-sweep", "pyo3"]),
        ("dynosim-cli", &["dynosim", "clap"]),
    ]);
    assert_eq!(
        command_line_reached(&members, "dynosim-py"),
        ["dynosim-py -> dynosim-sweep -> indicatif"].map(String::from)
    );
    let mut linking_the_cli = members.clone();
    linking_the_cli
        .get_mut("dynosim-py")
        .expect("dynosim-py")
        .push("dynosim-cli".into());
    assert_eq!(
        command_line_reached(&linking_the_cli, "dynosim-py"),
        [
            "dynosim-py -> dynosim-cli",
            "dynosim-py -> dynosim-cli -> clap",
            "dynosim-py -> dynosim-sweep -> indicatif"
        ]
        .map(String::from)
    );
    assert_eq!(
        arrows_not_running_down(&linking_the_cli),
        ["dynosim-py -> dynosim-cli"].map(String::from)
    );
    assert_eq!(
        version_in("[workspace.package]\nversion = \"0.1.0\"\n"),
        Some("0.1.0")
    );
}
