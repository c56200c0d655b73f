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
use std::collections::BTreeMap;
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
            "locks",
            "normalize",
            "outdated",
            "scaffold",
            "smoke",
        ],
    ),
    ("deriving", &["base_update", "detect", "render"]),
    ("model", &["manifest"]),
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
            "image",
            "labels",
            "name",
            "process",
            "scratch",
            "table",
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

/// Where the rule is broken in the tree at `src`: `path:line: why`.
fn violations(src: &Path, layers: &[(&str, &[&str])]) -> Vec<String> {
    let layer_of = |m: &str| layers.iter().position(|(_, mods)| mods.contains(&m));
    let mut files = Vec::new();
    sources(src, &mut files);
    let parsed: Vec<(PathBuf, syn::File)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().to_path_buf();
            let text = std::fs::read_to_string(f).unwrap();
            let ast = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{}: not parsed: {e}", f.display()));
            (rel, ast)
        })
        .collect();
    let test_places: Vec<PathBuf> = parsed
        .iter()
        .flat_map(|(rel, ast)| test_modules(rel, ast))
        .collect();
    let commands: Vec<String> = parsed
        .iter()
        .filter(|(rel, _)| rel.parent() == Some(Path::new("commands")))
        .filter_map(|(rel, _)| rel.file_stem()?.to_str().map(str::to_string))
        .filter(|n| n != "mod" && n != "context")
        .collect();
    let mut found = Vec::new();
    for (rel, ast) in &parsed {
        let Some(module) = module_of(rel) else {
            continue;
        };
        if in_test_code(rel, &test_places) {
            continue;
        }
        let shown = format!("src/{}", rel.display());
        let Some(own) = layer_of(&module) else {
            found.push(format!("{shown}: module {module} is in no layer"));
            continue;
        };
        let mut imports = Imports { found: Vec::new() };
        imports.visit_file(ast);
        for (line, name) in imports.found {
            if let Some(theirs) = layer_of(&name)
                && theirs < own
            {
                found.push(format!(
                    "{shown}:{line}: {module} ({}) imports {name} ({}), a higher layer",
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
