//! One async boundary (docs/architecture.md): the registry-facing library
//! is async end to end, and a command enters it once, through
//! `commands::Context::block_on`, on the process's one runtime, which the
//! context owns. So no library code outside `src/commands/` waits on a
//! future (`block_on`, whoever's: tokio's `Runtime` or `Handle`, `futures`'
//! executor) or names a runtime (`tokio::runtime::…`: a `&Runtime`
//! parameter, a `Builder` making a second one).
//!
//! Read with `syn`, as the dependency rule is: calls, method calls, paths
//! and `use` trees in code, and the tokens of macro bodies; test code
//! (`#[cfg(test)]` items, files and folders, and `#[test]` functions) left
//! out, and `bin/` (other binaries, each with its own `main`).

use super::{in_test_code, sources, test_modules, test_only};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A place that waits on a future or names a runtime.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Crossing {
    path: String,
    line: usize,
    what: String,
}

/// Finds the crossings in one file's non-test code.
struct Find<'a> {
    path: &'a Path,
    found: Vec<Crossing>,
}

impl Find<'_> {
    fn push(&mut self, line: usize, what: impl Into<String>) {
        self.found.push(Crossing {
            path: self.path.display().to_string(),
            line,
            what: what.into(),
        });
    }

    /// A path that names `block_on` (a call of the function), or goes
    /// through `tokio::runtime`.
    fn path(&mut self, p: &syn::Path) {
        let names: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p.segments[0].ident.span().start().line;
        if names.last().is_some_and(|n| n == "block_on") {
            self.push(line, format!("calls {}", names.join("::")));
        } else if names.windows(2).any(|w| w == ["tokio", "runtime"]) {
            self.push(line, format!("names {}", names.join("::")));
        }
    }

    /// `use tokio::runtime…` (any item of it), and `use …::block_on`.
    fn use_tree(&mut self, tree: &syn::UseTree, before: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                before.push(p.ident.to_string());
                if before.ends_with(&["tokio".into(), "runtime".into()]) {
                    let line = p.ident.span().start().line;
                    self.push(line, format!("uses {}", before.join("::")));
                } else {
                    self.use_tree(&p.tree, before);
                }
                before.pop();
            }
            syn::UseTree::Name(n) if n.ident == "block_on" => {
                self.push(n.ident.span().start().line, "uses block_on")
            }
            syn::UseTree::Rename(r) if r.ident == "block_on" => {
                self.push(r.ident.span().start().line, "uses block_on")
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(t, before)),
            _ => {}
        }
    }
}

impl<'ast> Visit<'ast> for Find<'_> {
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
            self.use_tree(&u.tree, &mut Vec::new());
        }
    }
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        if m.method == "block_on" {
            self.push(m.method.span().start().line, "calls .block_on");
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.path(p);
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // A macro's body is tokens, not parsed (`join!(rt.block_on(…))`).
        let line = m.path.segments[0].ident.span().start().line;
        let text = m.tokens.to_string();
        if text
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|w| w == "block_on")
        {
            self.push(line, "calls block_on in a macro");
        }
        if text.contains("tokio :: runtime") {
            self.push(line, "names tokio::runtime in a macro");
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Whether `rel` (relative to `src`) is outside the boundary's rule: the
/// commands (where it is), and other binaries.
fn exempt(rel: &Path) -> bool {
    rel.starts_with("commands") || rel.starts_with("bin")
}

/// The crossings of the library's non-test code in the tree at `src`,
/// paths relative to `src`.
fn crossings(src: &Path) -> Vec<Crossing> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut found = Vec::new();
    let mut test_places: Vec<PathBuf> = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: not parsed: {e}", file.display()));
        test_places.extend(test_modules(rel, &ast));
        if exempt(rel) {
            continue;
        }
        let mut find = Find {
            path: rel,
            found: Vec::new(),
        };
        find.visit_file(&ast);
        found.extend(find.found);
    }
    found.retain(|c| !in_test_code(Path::new(&c.path), &test_places));
    found.sort();
    found
}

#[test]
fn the_library_enters_no_runtime_outside_the_commands() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found: Vec<String> = crossings(&src)
        .iter()
        .map(|c| format!("src/{}:{}: {}", c.path, c.line, c.what))
        .collect();
    assert!(
        found.is_empty(),
        "library code outside src/commands waits on a future or names a runtime; make it \
         async and let the command enter once (Context::block_on; docs/architecture.md, \
         \"One async boundary\"):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_every_way_in_and_leaves_commands_bins_and_tests_alone() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    for d in ["a", "commands", "bin", "checks"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    let write = |rel: &str, text: &str| std::fs::write(src.join(rel), text).unwrap();
    write(
        "lib.rs",
        "mod a;\nmod commands;\n#[cfg(test)]\nmod checks;\n\
         fn wait(rt: &tokio::runtime::Runtime) {\n    rt.block_on(async {});\n}\n",
    );
    write(
        "a/mod.rs",
        "use futures::executor::block_on;\nuse tokio::runtime::{Builder, Handle};\n\
         fn f() {\n    futures::join!(Handle::current().block_on(async {}));\n}\n\
         fn g() {\n    block_on(async {});\n}\n\
         #[cfg(test)]\nmod tests {\n    fn t(rt: tokio::runtime::Runtime) { rt.block_on(async {}); }\n}\n\
         #[test]\nfn a_test() {\n    futures::executor::block_on(async {});\n}\n",
    );
    let entry = "fn run(rt: &tokio::runtime::Runtime) {\n    rt.block_on(async {});\n}\n";
    write("commands/mod.rs", entry);
    write("bin/main.rs", entry);
    write("checks/mod.rs", entry);
    let found: Vec<(String, usize, String)> = crossings(&src)
        .into_iter()
        .map(|c| (c.path, c.line, c.what))
        .collect();
    let at = |path: &str, line, what: &str| (path.to_string(), line, what.to_string());
    assert_eq!(
        found,
        [
            at("a/mod.rs", 1, "uses block_on"),
            at("a/mod.rs", 2, "uses tokio::runtime"),
            at("a/mod.rs", 4, "calls block_on in a macro"),
            at("a/mod.rs", 7, "calls block_on"),
            at("lib.rs", 5, "names tokio::runtime::Runtime"),
            at("lib.rs", 6, "calls .block_on"),
        ]
    );
}
