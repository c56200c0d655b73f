//! No function of the library is longer than [`MAX_LINES`] lines: a longer one
//! does several things, and each should have its name (docs/architecture.md).
//! Checked on the source as the dependency rule is: every file under `src/`
//! is parsed (`syn`, with line numbers), and each `fn` with a body is measured
//! from its `fn` line to its closing brace, signature and comments included.
//! Test code is exempt: `#[test]` functions, and everything inside a
//! `#[cfg(test)]` item, file or folder (`#[cfg(test)] mod tests;`).

use super::{in_test_code, sources, test_modules, test_only};
use std::path::Path;
use syn::visit::Visit;

/// The most lines a function may span.
const MAX_LINES: usize = 120;

/// Functions still over the limit, each to be split (path, name): none now.
/// The list only shrinks: an entry that is no longer over the limit fails
/// the test.
const NOT_YET_SPLIT: &[(&str, &str)] = &[];

/// A function over the limit: where it is and how long.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Long {
    path: String,
    line: usize,
    name: String,
    lines: usize,
}

/// Measures the non-test functions of one file.
struct Measure<'a> {
    path: &'a Path,
    long: Vec<Long>,
}

impl Measure<'_> {
    fn measure(&mut self, name: &syn::Ident, fn_token: &syn::token::Fn, block: &syn::Block) {
        let first = fn_token.span.start().line;
        let last = block.brace_token.span.close().end().line;
        let lines = last + 1 - first;
        if lines > MAX_LINES {
            self.long.push(Long {
                path: self.path.display().to_string(),
                line: first,
                name: name.to_string(),
                lines,
            });
        }
    }
}

impl<'ast> Visit<'ast> for Measure<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if test_only(&m.attrs) {
            return;
        }
        syn::visit::visit_item_mod(self, m);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !test_only(&f.attrs) {
            self.measure(&f.sig.ident, &f.sig.fn_token, &f.block);
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !test_only(&f.attrs) {
            self.measure(&f.sig.ident, &f.sig.fn_token, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let (false, Some(block)) = (test_only(&f.attrs), &f.default) {
            self.measure(&f.sig.ident, &f.sig.fn_token, block);
            syn::visit::visit_trait_item_fn(self, f);
        }
    }
}

/// The non-test functions over [`MAX_LINES`] in the tree at `src`, paths
/// relative to `src`'s parent.
fn long_functions(src: &Path) -> Vec<Long> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let base = src.parent().unwrap();
    let mut long = Vec::new();
    let mut test_places = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: not parsed: {e}", file.display()));
        let rel = file.strip_prefix(base).unwrap();
        test_places.extend(test_modules(rel, &ast));
        let mut measure = Measure {
            path: rel,
            long: Vec::new(),
        };
        measure.visit_file(&ast);
        long.extend(measure.long);
    }
    long.retain(|l| !in_test_code(Path::new(&l.path), &test_places));
    long.sort();
    long
}

#[test]
fn no_library_function_is_over_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = long_functions(&src);
    let long: Vec<String> = found
        .iter()
        .filter(|l| !NOT_YET_SPLIT.contains(&(l.path.as_str(), l.name.as_str())))
        .map(|l| format!("{}:{}: fn {} is {} lines", l.path, l.line, l.name, l.lines))
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines (split each into steps with names):\n{}",
        long.join("\n")
    );
    let split: Vec<String> = NOT_YET_SPLIT
        .iter()
        .filter(|(path, name)| {
            !found
                .iter()
                .any(|l| (l.path.as_str(), l.name.as_str()) == (*path, *name))
        })
        .map(|(path, name)| format!("{path}: fn {name}"))
        .collect();
    assert!(
        split.is_empty(),
        "within the limit now, so off NOT_YET_SPLIT:\n{}",
        split.join("\n")
    );
}

#[test]
fn the_check_measures_library_code_and_leaves_tests_alone() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let body = |lines: usize| "    let _ = 1;\n".repeat(lines - 2);
    // 121 lines from `fn` to `}`: over; 120: not.
    std::fs::write(
        src.join("lib.rs"),
        format!(
            "mod a;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod checks;\n\n/// Doc lines do not count.\npub fn long() {{\n{}}}\n\
             fn fits() {{\n{}}}\n",
            body(121),
            body(120)
        ),
    )
    .unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        format!(
            "struct S;\nimpl S {{\n    fn method(&self) {{\n{}    }}\n}}\n\
             #[cfg(test)]\nmod inline {{\n    fn helper() {{\n{}    }}\n}}\n\
             #[test]\nfn a_test() {{\n{}}}\n",
            body(130),
            body(200),
            body(200)
        ),
    )
    .unwrap();
    std::fs::create_dir_all(src.join("checks")).unwrap();
    std::fs::write(src.join("checks/mod.rs"), "mod deep;\n").unwrap();
    std::fs::write(
        src.join("checks/deep.rs"),
        format!("fn helper() {{\n{}}}\n", body(300)),
    )
    .unwrap();
    std::fs::write(
        src.join("tests.rs"),
        format!("fn helper() {{\n{}}}\n", body(300)),
    )
    .unwrap();
    let found = long_functions(&src);
    assert_eq!(
        found,
        [
            Long {
                path: "src/a/mod.rs".into(),
                line: 3,
                name: "method".into(),
                lines: 130,
            },
            Long {
                path: "src/lib.rs".into(),
                line: 8,
                name: "long".into(),
                lines: 121,
            },
        ]
    );
}
