//! The dependency rule: the library is layers, and no module imports a
//! module of a higher layer; and a command never imports another (what
//! several share is in `commands/context.rs` or `commands/mod.rs`).
//! docs/architecture.md draws [`LAYERS`] as a Mermaid graph, and a test
//! here holds the picture to the list.
//!
//! Imports are read with `syn`: every `crate::name` path in code and in
//! macro bodies, test code (`#[cfg(test)]` items, files and folders, and
//! `#[test]` functions) left out.

use super::{in_test_code, sources, test_modules, test_only};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The layers, highest first: each name, and the top-level modules in it.
/// A module may import its own layer's modules and lower layers' ones.
const LAYERS: &[(&str, &[&str])] = &[
    ("entry", &["cli"]),
    ("verbs", &["commands"]),
    ("workflows", &["rebuild", "release"]),
    ("publishing", &["attest", "pins"]),
    (
        "building",
        &[
            "build",
            "check",
            "compose",
            "family",
            "locks",
            "normalize",
            "outdated",
            "scaffold",
            "smoke",
        ],
    ),
    ("deriving", &["base_update", "detect", "render"]),
    ("model", &["image", "manifest"]),
    (
        "services",
        &[
            "clap_gen",
            "engine",
            "fsutil",
            "package_indexes",
            "registry",
            "run_contract",
            "semver_rules",
        ],
    ),
    (
        "foundations",
        &[
            "duration",
            "error_chain",
            "exit",
            "failpoint",
            "github",
            "labels",
            "name",
            "process",
            "scratch",
            "table",
            "timestamp",
            "versions",
        ],
    ),
];

/// The layer of top-level module `module` (0 the highest), if listed.
fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

/// Every `crate::name` a file's non-test code names, with its line.
struct Imports {
    found: Vec<(usize, String)>,
}

impl Imports {
    fn path(&mut self, path: &syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next())
            && first.ident == "crate"
        {
            self.found
                .push((first.ident.span().start().line, second.ident.to_string()));
        }
    }

    fn use_tree(&mut self, tree: &syn::UseTree, at_crate: bool) {
        match tree {
            syn::UseTree::Path(p) if p.ident == "crate" => self.use_tree(&p.tree, true),
            syn::UseTree::Path(p) if at_crate => self
                .found
                .push((p.ident.span().start().line, p.ident.to_string())),
            syn::UseTree::Name(n) if at_crate => self
                .found
                .push((n.ident.span().start().line, n.ident.to_string())),
            syn::UseTree::Rename(r) if at_crate => self
                .found
                .push((r.ident.span().start().line, r.ident.to_string())),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(t, at_crate)),
            _ => {}
        }
    }
}

impl<'ast> Visit<'ast> for Imports {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !test_only(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !test_only(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !test_only(&u.attrs) {
            self.use_tree(&u.tree, false);
        }
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.path(p);
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // A macro's body is tokens, not parsed: `crate :: name` in them.
        let text = m.tokens.to_string();
        let line = m.path.segments[0].ident.span().start().line;
        for (i, _) in text.match_indices("crate :: ") {
            let name: String = text[i + "crate :: ".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let dollar = text[..i].ends_with("$ ");
            if !dollar {
                self.found.push((line, name));
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

/// The library's top-level module a file under `src` belongs to (`build`
/// for `build/variant.rs`); `None` for the crate roots and for `bin/` (other
/// binaries: crates of their own, where `crate::` is not the library).
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!["lib", "main", "bin"].contains(&name)).then(|| name.to_string())
}

/// The library's files under `src`, parsed: each path relative to `src`
/// and its syntax tree.
fn parsed(src: &Path) -> Vec<(PathBuf, syn::File)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().to_path_buf();
            let text = std::fs::read_to_string(f).unwrap();
            let ast = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{}: not parsed: {e}", f.display()));
            (rel, ast)
        })
        .collect()
}

/// One import of a top-level module by a file of another's non-test code.
struct Import {
    /// `src/build/variant.rs`.
    file: String,
    line: usize,
    imported: String,
}

/// Each library file's non-test code: the file (relative to `src`), its
/// top-level module, and its imports of other top-level modules.
fn library_imports(parsed: &[(PathBuf, syn::File)]) -> Vec<(&Path, String, Vec<Import>)> {
    let test_places: Vec<PathBuf> = parsed
        .iter()
        .flat_map(|(rel, ast)| test_modules(rel, ast))
        .collect();
    let modules: BTreeSet<String> = parsed
        .iter()
        .filter_map(|(rel, _)| module_of(rel))
        .collect();
    parsed
        .iter()
        .filter(|(rel, _)| !in_test_code(rel, &test_places))
        .filter_map(|(rel, ast)| {
            let module = module_of(rel)?;
            let mut found = Imports { found: Vec::new() };
            found.visit_file(ast);
            let imports = found
                .found
                .into_iter()
                .filter(|(_, name)| *name != module && modules.contains(name))
                .map(|(line, imported)| Import {
                    file: format!("src/{}", rel.display()),
                    line,
                    imported,
                })
                .collect();
            Some((rel.as_path(), module, imports))
        })
        .collect()
}

/// Where the rule is broken in the tree at `src`: `path:line: why`.
fn violations(src: &Path, layers: &[(&str, &[&str])]) -> Vec<String> {
    let layer_of = |m: &str| layers.iter().position(|(_, mods)| mods.contains(&m));
    let parsed = parsed(src);
    let commands: Vec<String> = parsed
        .iter()
        .filter(|(rel, _)| rel.parent() == Some(Path::new("commands")))
        .filter_map(|(rel, _)| rel.file_stem()?.to_str().map(str::to_string))
        .filter(|n| n != "mod" && n != "context")
        .collect();
    let mut found = Vec::new();
    for (rel, module, imports) in library_imports(&parsed) {
        let shown = format!("src/{}", rel.display());
        let Some(own) = layer_of(&module) else {
            found.push(format!("{shown}: module {module} is in no layer"));
            continue;
        };
        for Import { line, imported, .. } in imports {
            if let Some(theirs) = layer_of(&imported)
                && theirs < own
            {
                found.push(format!(
                    "{shown}:{line}: {module} ({}) imports {imported} ({}), a higher layer",
                    layers[own].0, layers[theirs].0
                ));
            }
        }
        // A command never imports another command.
        if module == "commands" && !rel.ends_with("mod.rs") {
            let own_command = rel.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let text = std::fs::read_to_string(src.join(rel)).unwrap();
            for (n, l) in text.lines().enumerate() {
                if l.trim_start().starts_with("//") {
                    continue;
                }
                if let Some(c) = commands
                    .iter()
                    .filter(|c| c.as_str() != own_command)
                    .find(|c| {
                        l.contains(&format!("super::{c}::"))
                            || l.contains(&format!("commands::{c}::"))
                            || l.contains(&format!("use super::{c};"))
                    })
                {
                    found.push(format!(
                        "{shown}:{}: command {own_command} imports command {c}",
                        n + 1
                    ));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The circles in the graph of top-level modules that the non-test code
/// under `src` draws by its imports: one per knot of modules that reach
/// each other (a strongly connected component), the shortest circle from
/// its first module by name, each step with the import that makes it:
/// `build -> check (src/build/variant.rs:9) -> build (src/check/pipeline.rs:7)`.
fn circles(src: &Path) -> Vec<String> {
    let parsed = parsed(src);
    // module -> imported module -> the first import that makes the edge.
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (_, module, imports) in library_imports(&parsed) {
        let edges = graph.entry(module).or_default();
        for i in imports {
            let at = format!("{}:{}", i.file, i.line);
            match edges.get(&i.imported) {
                Some(first) if *first <= at => {}
                _ => {
                    edges.insert(i.imported.clone(), at);
                }
            }
        }
    }
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for next in graph.get(&m).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let mut shown = BTreeSet::new();
    let mut found = Vec::new();
    for start in graph.keys() {
        if shown.contains(start) || !reach(start).contains(start) {
            continue;
        }
        // The knot: what `start` reaches that reaches `start` back.
        let knot: BTreeSet<String> = reach(start)
            .into_iter()
            .filter(|m| reach(m).contains(start))
            .collect();
        // Breadth first from `start` back to it: the shortest circle.
        let mut came_from: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut last = None;
        'search: while let Some(m) = queue.pop_front() {
            for next in graph[&m].keys() {
                if next == start {
                    last = Some(m.clone());
                    break 'search;
                }
                if knot.contains(next) && !came_from.contains_key(next) {
                    came_from.insert(next.clone(), m.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        // Walked back from the last module before `start`, then turned.
        let mut path = vec![start.clone()];
        let mut at = last.expect("a module of a knot reaches itself");
        while at != *start {
            path.push(at.clone());
            at = came_from[&at].clone();
        }
        path.push(start.clone());
        path.reverse();
        let mut line = start.clone();
        for pair in path.windows(2) {
            line.push_str(&format!(" -> {} ({})", pair[1], graph[&pair[0]][&pair[1]]));
        }
        found.push(line);
        shown.extend(knot);
    }
    found
}

#[test]
fn the_modules_import_each_other_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = circles(&src);
    assert!(
        found.is_empty(),
        "modules import each other in a circle (move what both need below both):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_names_a_circle_with_its_imports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    for d in ["a", "b", "c", "d"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    let w = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    w("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n");
    // a -> b -> c -> a, and a -> c: the shortest circle is a -> c -> a;
    // d imports a, and only a's test code imports d back: no circle.
    w(
        "a/mod.rs",
        "use crate::b::B;\nuse crate::c::C;\n#[cfg(test)]\nmod tests {\n    \
         use crate::d::D;\n}\n",
    );
    w("b/mod.rs", "use crate::c::C;\n");
    w("c/mod.rs", "mod inner;\n");
    w("c/inner.rs", "fn f() {\n    crate::a::g();\n}\n");
    w("d/mod.rs", "use crate::a::A;\n");
    assert_eq!(
        circles(src),
        ["a -> c (src/a/mod.rs:2) -> a (src/c/inner.rs:2)"]
    );
    w("c/inner.rs", "fn f() {}\n");
    assert_eq!(circles(src), Vec::<String>::new());
}

#[test]
fn no_module_imports_a_higher_layer_and_commands_never_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src, LAYERS);
    assert!(
        found.is_empty(),
        "the dependency rule is broken (layers in src/structure_tests/dependency_rule.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_is_in_one_layer() {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (layer, mods) in LAYERS {
        for m in *mods {
            assert!(seen.insert(m, layer).is_none(), "{m} is in two layers");
            assert!(layer_of(m).is_some());
        }
    }
}

/// The layers as docs/architecture.md's Mermaid graph draws them: one
/// `subgraph` per layer, highest first, its modules in order.
fn drawn_layers(page: &str) -> Vec<(String, Vec<String>)> {
    let graph = page
        .split("```mermaid\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/architecture.md has a ```mermaid block");
    let mut layers: Vec<(String, Vec<String>)> = Vec::new();
    for line in graph.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("subgraph ") {
            let name = rest.split(['[', ' ']).next().unwrap_or(rest);
            layers.push((name.to_string(), Vec::new()));
        } else if let Some((_, mods)) = layers.last_mut()
            && !line.is_empty()
            && line != "end"
            && !line.contains("-->")
            && !line.starts_with("direction")
        {
            mods.extend(line.split_whitespace().map(str::to_string));
        }
    }
    layers
}

#[test]
fn the_architecture_page_draws_the_same_layers() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let want: Vec<(String, Vec<String>)> = LAYERS
        .iter()
        .map(|(name, mods)| {
            (
                name.to_string(),
                mods.iter().map(|m| m.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(drawn_layers(&page), want);
}

#[test]
fn the_check_sees_an_upward_import_and_a_command_importing_another() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    for d in ["commands", "low", "high"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    let w = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    w("lib.rs", "mod commands;\nmod high;\nmod low;\n");
    w("commands/mod.rs", "mod build;\nmod check;\n");
    w("commands/build.rs", "use super::check::Args;\n");
    w("commands/check.rs", "// super::build:: in a comment\n");
    w("high/mod.rs", "use crate::low::Thing;\n");
    w(
        "low/mod.rs",
        "// crate::high in a comment\nfn f() {\n    let _ = crate::high::x();\n    \
         println!(\"{}\", crate::commands::y());\n}\n#[cfg(test)]\nmod tests {\n    \
         use crate::high::Z;\n}\n",
    );
    let layers: &[(&str, &[&str])] = &[
        ("top", &["commands"]),
        ("mid", &["high"]),
        ("bottom", &["low"]),
    ];
    assert_eq!(
        violations(src, layers),
        [
            "src/commands/build.rs:1: command build imports command check",
            "src/low/mod.rs:3: low (bottom) imports high (mid), a higher layer",
            "src/low/mod.rs:4: low (bottom) imports commands (top), a higher layer",
        ]
    );
}
