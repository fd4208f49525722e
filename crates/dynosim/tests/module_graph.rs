//! The workspace's crates import their own modules without circles: read every source file
//! of each member crate's `src/`, find which module each path in its production code (test
//! modules left out) names, and look for strongly connected components in that graph.
//!
//! A path names the module that defines its item: `use crate::config::EngineArgs` names
//! `config::engine_args`, the file that defines it, because `config` only re-exports it. A
//! folder's `mod.rs` using the modules it declares (re-exporting or calling them) is not an
//! import: the folder is its parts; a part naming an item its folder's `mod.rs` defines is an
//! import of that file, and parts importing each other in a ring are the circles this finds.
//! Method calls and names reached through them are not paths, so they are not seen. A binary
//! crate root (`src/main.rs`, `src/bin/`) is a crate of its own over the library and is left
//! out; paths into other crates are not edges (Cargo already refuses circles between crates).
//!
//! The core crate's graph must also run down its layers ([`LAYERS`]): `sim` over `router`,
//! `report` and `planner`, those over `engine` and `workload`, those over `config`, that over
//! the foundation (`error`, `tokens`, `aic`). A module may import its own layer or any below it.
//!
//! The core's production code must also stay pure ([`IMPURE_PATHS`]): no process started, no
//! environment read, no file written (`dynosim-aic-tables` does that for AIC timing).
//!
//! Run it with `cargo test -p dynosim --test module_graph`; a failure lists each circle and the
//! names that tie it, or each arrow that runs up a layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

mod source_tree;

use source_tree::{source_files, workspace_crates};

/// A module, by its path from the crate root (`["sim", "pool"]`; the root is empty).
type ModulePath = Vec<String>;

struct Module {
    file: PathBuf,
    /// Every path the production code names, absolute, with the name that led to it.
    paths: Vec<Vec<String>>,
    /// Names this module re-exports (`pub use a::b::Name`), to the absolute path behind each.
    reexports: BTreeMap<String, Vec<String>>,
}

fn module_path(src: &Path, file: &Path) -> ModulePath {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

/// Expands a `use` tree into its full paths (a glob keeps `*` as its last segment; a rename
/// keeps the original name), each with the name it binds.
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let ident = name.ident.to_string();
            let mut path = prefix.clone();
            if ident != "self" {
                path.push(ident.clone());
            }
            let bound = path.last().cloned().unwrap_or_default();
            out.push((path, bound));
        }
        syn::UseTree::Rename(rename) => {
            let mut path = prefix.clone();
            if rename.ident != "self" {
                path.push(rename.ident.to_string());
            }
            out.push((path, rename.rename.to_string()));
        }
        syn::UseTree::Glob(_) => {
            let mut path = prefix.clone();
            path.push("*".into());
            out.push((path, "*".into()));
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_paths(tree, prefix, out);
            }
        }
    }
}

/// Collects the paths of one file's production code.
struct PathCollector {
    /// Relative paths as written (`crate::`, `super::`, `self::`, or a child module's name).
    written: Vec<Vec<String>>,
    /// `use` declarations: (path as written, bound name, whether it is a `pub` re-export).
    uses: Vec<(Vec<String>, String, bool)>,
}

impl PathCollector {
    /// Every `a::b::c` run of identifiers in a macro's tokens (macros are not parsed).
    fn token_paths(&mut self, tokens: proc_macro2::TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        let flush = |run: &mut Vec<String>, written: &mut Vec<Vec<String>>| {
            if run.len() > 1 {
                written.push(std::mem::take(run));
            }
            run.clear();
        };
        for token in tokens {
            match token {
                proc_macro2::TokenTree::Ident(ident) => {
                    if colons != 2 {
                        flush(&mut run, &mut self.written);
                    }
                    run.push(ident.to_string());
                    colons = 0;
                }
                proc_macro2::TokenTree::Punct(punct) if punct.as_char() == ':' => colons += 1,
                proc_macro2::TokenTree::Group(group) => {
                    flush(&mut run, &mut self.written);
                    colons = 0;
                    self.token_paths(group.stream());
                }
                _ => {
                    flush(&mut run, &mut self.written);
                    colons = 0;
                }
            }
        }
        flush(&mut run, &mut self.written);
    }
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(item) => &item.attrs,
            syn::Item::Fn(item) => &item.attrs,
            syn::Item::Impl(item) => &item.attrs,
            syn::Item::Use(item) => &item.attrs,
            syn::Item::Struct(item) => &item.attrs,
            syn::Item::Enum(item) => &item.attrs,
            syn::Item::Const(item) => &item.attrs,
            syn::Item::Static(item) => &item.attrs,
            syn::Item::Trait(item) => &item.attrs,
            syn::Item::Type(item) => &item.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            return;
        }
        if let syn::Item::Use(item) = item {
            let public = !matches!(item.vis, syn::Visibility::Inherited);
            let mut found = Vec::new();
            use_paths(&item.tree, &mut Vec::new(), &mut found);
            for (path, bound) in found {
                self.uses.push((path, bound, public));
            }
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            self.written.push(
                path.segments
                    .iter()
                    .map(|segment| segment.ident.to_string())
                    .collect(),
            );
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.token_paths(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// `written`, as the module `here` sees it, from the crate root; `None` for other crates'
/// paths, enum variants and the like (whatever does not start at a module of this crate).
fn absolute(
    here: &ModulePath,
    written: &[String],
    modules: &BTreeSet<ModulePath>,
) -> Option<Vec<String>> {
    let mut base = here.clone();
    let mut rest = written;
    match written.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &written[1..];
        }
        Some("self") => rest = &written[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = here.clone();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module that defines what `path` (absolute) names: the longest module prefix, followed
/// through re-exports.
fn defining_module(
    path: &[String],
    modules: &BTreeMap<ModulePath, Module>,
    depth: usize,
) -> Option<ModulePath> {
    let known: BTreeSet<ModulePath> = modules.keys().cloned().collect();
    let mut prefix = path.len();
    while prefix > 0 && !known.contains(&path[..prefix]) {
        prefix -= 1;
    }
    let target = path[..prefix].to_vec();
    if depth < 8 {
        if let Some(name) = path.get(prefix) {
            if let Some(source) = modules[&target].reexports.get(name) {
                let mut through = source.clone();
                through.extend(path[prefix + 1..].iter().cloned());
                return defining_module(&through, modules, depth + 1);
            }
        }
    }
    Some(target)
}

/// A binary's crate root (`main.rs` beside `lib.rs`, or anything under `src/bin/`): a crate of
/// its own, whose `crate::` is not the library's.
fn is_binary_root(src: &Path, file: &Path) -> bool {
    file == src.join("main.rs") || file.starts_with(src.join("bin"))
}

/// The library's production files under `src` (a binary's root and test-only `tests` files
/// left out), each with its module path and the paths its production code names.
fn production_files(src: &Path) -> Vec<(PathBuf, ModulePath, PathCollector)> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    files.retain(|file| !is_binary_root(src, file));
    let mut read = Vec::new();
    for file in files {
        let here = module_path(src, &file);
        // Test-only files (`#[cfg(test)] mod tests;`) are left out with the modules they are.
        if here.last().is_some_and(|name| name == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let mut collector = PathCollector {
            written: Vec::new(),
            uses: Vec::new(),
        };
        collector.visit_file(&parsed);
        read.push((file, here, collector));
    }
    read
}

fn read_modules(src: &Path) -> BTreeMap<ModulePath, Module> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    files.retain(|file| !is_binary_root(src, file));
    let names: BTreeSet<ModulePath> = files.iter().map(|file| module_path(src, file)).collect();
    let mut modules = BTreeMap::new();
    for (file, here, collector) in production_files(src) {
        let is_facade = matches!(
            file.file_stem().and_then(|stem| stem.to_str()),
            Some("mod" | "lib")
        );
        let mut paths = Vec::new();
        let mut reexports = BTreeMap::new();
        for (written, bound, public) in &collector.uses {
            let Some(path) = absolute(&here, written, &names) else {
                continue;
            };
            if *public && bound != "*" {
                reexports.insert(bound.clone(), path.clone());
                if is_facade {
                    continue;
                }
            }
            paths.push(path);
        }
        paths.extend(
            collector
                .written
                .iter()
                .filter_map(|written| absolute(&here, written, &names)),
        );
        modules.insert(
            here,
            Module {
                file,
                paths,
                reexports,
            },
        );
    }
    modules
}

/// Edges between modules, each with the paths that make it.
fn import_graph(
    modules: &BTreeMap<ModulePath, Module>,
) -> BTreeMap<ModulePath, BTreeMap<ModulePath, BTreeSet<String>>> {
    let mut graph: BTreeMap<ModulePath, BTreeMap<ModulePath, BTreeSet<String>>> = BTreeMap::new();
    for (here, module) in modules {
        let edges = graph.entry(here.clone()).or_default();
        for path in &module.paths {
            let Some(target) = defining_module(path, modules, 0) else {
                continue;
            };
            // Its own items; and a folder's entry (`mod.rs`) using the parts it declares, which
            // is what a folder is for: the circles that matter are between those parts.
            if &target == here || target.starts_with(here) {
                continue;
            }
            edges.entry(target).or_default().insert(path.join("::"));
        }
    }
    graph
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn circles(
    graph: &BTreeMap<ModulePath, BTreeMap<ModulePath, BTreeSet<String>>>,
) -> Vec<Vec<ModulePath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModulePath, BTreeMap<ModulePath, BTreeSet<String>>>,
        index: BTreeMap<&'g ModulePath, usize>,
        low: BTreeMap<&'g ModulePath, usize>,
        stack: Vec<&'g ModulePath>,
        on_stack: BTreeSet<&'g ModulePath>,
        found: Vec<Vec<ModulePath>>,
    }
    fn connect<'g>(state: &mut State<'g>, node: &'g ModulePath) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        state.on_stack.insert(node);
        for target in state.graph[node].keys() {
            if !state.graph.contains_key(target) {
                continue;
            }
            if !state.index.contains_key(target) {
                connect(state, target);
                let low = state.low[node].min(state.low[target]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.low[node].min(state.index[target]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.clone());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            connect(&mut state, node);
        }
    }
    state.found
}

/// The circles of one crate's modules, described file by file ("" when there are none).
fn describe_circles(src: &Path) -> String {
    let modules = read_modules(src);
    let graph = import_graph(&modules);
    let mut message = String::new();
    for component in &circles(&graph) {
        message.push_str("circle:\n");
        for from in component {
            for (to, why) in &graph[from] {
                if component.contains(to) {
                    message.push_str(&format!(
                        "  {} -> {}: {}\n",
                        modules[from].file.display(),
                        modules[to].file.display(),
                        why.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    message
}

#[test]
fn every_crate_imports_without_circles() {
    let crates = workspace_crates();
    assert!(
        crates.len() > 1,
        "the workspace's members were not found: {crates:?}"
    );
    let mut message = String::new();
    for folder in &crates {
        message.push_str(&describe_circles(&folder.join("src")));
    }
    assert!(
        message.is_empty(),
        "import circles in the workspace's crates:\n{message}"
    );
}

/// The crate's top-level modules from the bottom layer up; the crate root (`lib.rs`, the entry
/// points) stands above them all.
const LAYERS: &[&[&str]] = &[
    &["error", "tokens", "aic"],
    &["config"],
    &["engine", "workload"],
    &["router", "report", "planner"],
    &["sim"],
];

/// The layer of a module, by its top-level module; the crate root is above every layer.
fn layer(module: &ModulePath) -> Option<usize> {
    let Some(top) = module.first() else {
        return Some(LAYERS.len());
    };
    LAYERS
        .iter()
        .position(|layer| layer.contains(&top.as_str()))
}

#[test]
fn imports_run_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = read_modules(&src);
    let graph = import_graph(&modules);
    let mut problems = Vec::new();
    for (from, edges) in &graph {
        let Some(from_layer) = layer(from) else {
            problems.push(format!(
                "{}: its module `{}` has no layer: add it to LAYERS",
                modules[from].file.display(),
                from[0]
            ));
            continue;
        };
        for (to, why) in edges {
            if layer(to).is_some_and(|to_layer| to_layer > from_layer) {
                problems.push(format!(
                    "{} -> {}: {}",
                    modules[from].file.display(),
                    modules[to].file.display(),
                    why.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports that run up the layers of crates/dynosim:\n{}",
        problems.join("\n")
    );
}

/// The check sees the imports it is meant to: a known one-way import is an edge, and a façade
/// re-export is followed to the file that defines the item.
#[test]
fn the_graph_sees_imports_through_reexports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = read_modules(&src);
    let graph = import_graph(&modules);
    let path = |text: &str| -> ModulePath { text.split("::").map(str::to_string).collect() };
    let imports = |from: &str, to: &str| graph[&path(from)].contains_key(&path(to));
    // `sim::aggregated` imports `Pool` from its sibling, and `EngineArgs` through `config`'s
    // re-export from `config::engine_args`.
    assert!(imports("sim::aggregated", "sim::pool"));
    assert!(imports("sim::aggregated", "config::engine_args"));
    // `config` re-exports `ReplayOptions` from its child without importing it.
    assert!(!imports("config", "config::options"));
    // Layers: `sim` is above `config`, and the root above `sim`.
    let layer_of = |text: &str| layer(&path(text)).expect("a module with a layer");
    assert!(layer_of("sim::aggregated") > layer_of("config::engine_args"));
    assert!(layer(&Vec::new()) > Some(layer_of("sim")));
}

/// Every member crate is read, not only the core: the sweep crate's report page imports its
/// table, and its rows are imported by the objectives.
#[test]
fn every_member_crate_is_read() {
    let crates = workspace_crates();
    let names: Vec<String> = crates
        .iter()
        .filter_map(|folder| folder.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    for expected in ["dynosim", "dynosim-cli", "dynosim-py", "dynosim-sweep"] {
        assert!(names.iter().any(|name| name == expected), "{names:?}");
    }
    let sweep = crates
        .iter()
        .find(|folder| folder.ends_with("dynosim-sweep"))
        .expect("the sweep crate");
    let graph = import_graph(&read_modules(&sweep.join("src")));
    let path = |text: &str| -> ModulePath { text.split("::").map(str::to_string).collect() };
    assert!(graph[&path("html")].contains_key(&path("table")));
    assert!(graph[&path("objectives")].contains_key(&path("row")));
}

/// A ring is found wherever it stands: two sibling files naming each other's items, in a
/// crate laid out like any member's `src/` (a binary root beside it left out).
#[test]
fn a_ring_between_siblings_is_found() {
    let src = std::env::temp_dir().join(format!("dynosim-module-graph-{}", std::process::id()));
    std::fs::create_dir_all(&src).expect("a temporary folder");
    let write = |name: &str, text: &str| {
        std::fs::write(src.join(name), text).expect("a temporary source file");
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("main.rs", "use crate::a::A;\nfn main() {}\n");
    write("a.rs", "use crate::b::B;\npub struct A(B);\n");
    write("b.rs", "pub struct B(pub crate::a::A);\n");
    write("c.rs", "use crate::a::A;\npub struct C(A);\n");
    let found = describe_circles(&src);
    std::fs::remove_dir_all(&src).expect("the temporary folder removed");
    assert!(found.contains("a.rs -> "), "{found}");
    assert!(found.contains("b.rs -> "), "{found}");
    assert!(!found.contains("c.rs"), "{found}");
    assert!(!found.contains("main.rs"), "{found}");
}

/// What the pure core's production code must not name: starting a process, reading the
/// environment, and the `std::fs` calls that write, create or remove files. (Reading the files
/// a spec names is the core's job; everything else of that kind belongs to the crates above
/// it, such as `dynosim-aic-tables`.)
const IMPURE_PATHS: &[&[&str]] = &[
    &["std", "process"],
    &["std", "env"],
    &["std", "fs", "write"],
    &["std", "fs", "create_dir"],
    &["std", "fs", "create_dir_all"],
    &["std", "fs", "rename"],
    &["std", "fs", "copy"],
    &["std", "fs", "hard_link"],
    &["std", "fs", "remove_file"],
    &["std", "fs", "remove_dir"],
    &["std", "fs", "remove_dir_all"],
    &["std", "fs", "OpenOptions"],
    &["std", "fs", "File", "create"],
    &["std", "fs", "File", "create_new"],
];

/// Each production path of the files under `src` that starts with one of [`IMPURE_PATHS`],
/// as `file: a::b::c`. A path is read as written, with a name a `use` brought in replaced by
/// what it names (`use std::fs; fs::write(..)` is `std::fs::write`).
fn impure_paths(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (file, _, collector) in production_files(src) {
        let bound: BTreeMap<&str, &Vec<String>> = collector
            .uses
            .iter()
            .map(|(path, name, _)| (name.as_str(), path))
            .collect();
        let expanded =
            collector
                .written
                .iter()
                .map(|written| match bound.get(written[0].as_str()) {
                    Some(path) => path.iter().chain(&written[1..]).cloned().collect(),
                    None => written.clone(),
                });
        let paths: BTreeSet<Vec<String>> = collector
            .uses
            .iter()
            .map(|(path, _, _)| path.clone())
            .chain(expanded)
            .collect();
        for path in paths {
            let impure = |prefix: &&[&str]| {
                path.len() >= prefix.len() && prefix.iter().zip(&path).all(|(a, b)| a == b)
            };
            if IMPURE_PATHS.iter().any(impure) {
                found.push(format!("{}: {}", file.display(), path.join("::")));
            }
        }
    }
    found
}

#[test]
fn the_core_starts_no_process_reads_no_environment_and_writes_no_file() {
    let found = impure_paths(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        found.is_empty(),
        "the pure core's production code names process, environment or file-writing calls \
         (they belong above it, e.g. in dynosim-aic-tables):\n{}",
        found.join("\n")
    );
}

/// The purity check sees each way of writing such a call, and leaves test code and reading
/// alone.
#[test]
fn the_purity_check_finds_impure_calls() {
    let src = std::env::temp_dir().join(format!("dynosim-purity-{}", std::process::id()));
    std::fs::create_dir_all(&src).expect("a temporary folder");
    let write = |name: &str, text: &str| {
        std::fs::write(src.join(name), text).expect("a temporary source file");
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n");
    write(
        "a.rs",
        "use std::process::{Command, Stdio};\npub fn a() { let _ = Command::new(\"x\"); }\n",
    );
    write(
        "b.rs",
        "use std::fs;\npub fn b() { fs::write(\"x\", \"y\").ok(); let _ = std::env::var(\"X\"); }\n",
    );
    write(
        "c.rs",
        "pub fn c() -> String { std::fs::read_to_string(\"x\").unwrap_or_default() }\n",
    );
    write(
        "d.rs",
        "#[cfg(test)]\nmod tests {\n    fn t() { std::fs::write(\"x\", \"y\").unwrap(); }\n}\n",
    );
    let found = impure_paths(&src);
    std::fs::remove_dir_all(&src).expect("the temporary folder removed");
    let text = found.join("\n");
    assert!(text.contains("a.rs: std::process::Command"), "{text}");
    assert!(text.contains("a.rs: std::process::Stdio"), "{text}");
    assert!(text.contains("b.rs: std::fs::write"), "{text}");
    assert!(text.contains("b.rs: std::env::var"), "{text}");
    assert!(!text.contains("c.rs"), "{text}");
    assert!(!text.contains("d.rs"), "{text}");
}
