//! The coverage gate: every tool verify can dispatch to (images.toml
//! `[languages]`) must be owed by the default image, a variant reachable by
//! alias must owe at least one tool of each language it claims to serve, and
//! every language has a smoke suite that runs each of its tools. A missing
//! tool (or an untested one) is then a `render --check` failure, not a
//! user's first verify.

use crate::manifest::Manifest;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CoverageProblem {
    /// The default variant does not owe a tool that a language needs.
    DefaultLacksTool {
        variant: String,
        language: String,
        tool: String,
    },
    /// A variant with aliases claims to serve a language but owes none of
    /// its tools.
    ServesWithoutTools {
        variant: String,
        aliases: Vec<String>,
        language: String,
        tools: Vec<String>,
    },
    /// No smoke suite covers a language.
    NoSmoke { language: String },
    /// A language's smoke suite runs none of its commands with one of its tools.
    ToolNotSmoked {
        language: String,
        suite: String,
        tool: String,
    },
}

impl CoverageProblem {
    /// The variant the problem is about (none for a smoke gap).
    pub fn variant(&self) -> Option<&str> {
        match self {
            CoverageProblem::DefaultLacksTool { variant, .. }
            | CoverageProblem::ServesWithoutTools { variant, .. } => Some(variant),
            CoverageProblem::NoSmoke { .. } | CoverageProblem::ToolNotSmoked { .. } => None,
        }
    }

    pub fn language(&self) -> &str {
        match self {
            CoverageProblem::DefaultLacksTool { language, .. }
            | CoverageProblem::ServesWithoutTools { language, .. }
            | CoverageProblem::NoSmoke { language }
            | CoverageProblem::ToolNotSmoked { language, .. } => language,
        }
    }

    /// The tools the problem is about.
    pub fn tools(&self) -> Vec<&str> {
        match self {
            CoverageProblem::DefaultLacksTool { tool, .. }
            | CoverageProblem::ToolNotSmoked { tool, .. } => vec![tool.as_str()],
            CoverageProblem::ServesWithoutTools { tools, .. } => {
                tools.iter().map(String::as_str).collect()
            }
            CoverageProblem::NoSmoke { .. } => Vec::new(),
        }
    }
}

impl fmt::Display for CoverageProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoverageProblem::DefaultLacksTool {
                variant,
                language,
                tool,
            } => write!(
                f,
                "default variant `{variant}` does not owe tool `{tool}`, which language \
                 `{language}` needs: add `{tool}` to the `provides` of a fragment of \
                 `{variant}` (or remove it from languages.{language}.tools)"
            ),
            CoverageProblem::ServesWithoutTools {
                variant,
                aliases,
                language,
                tools,
            } => write!(
                f,
                "variant `{variant}` (alias {}) serves language `{language}` but owes none of \
                 its tools ({}): give it a fragment providing one, or drop `{language}` from \
                 its `serves`",
                aliases
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                tools.join(", ")
            ),
            CoverageProblem::NoSmoke { language } => write!(
                f,
                "language `{language}` has no smoke suite: add [smoke.{language}] with a passing \
                 and a seeded-defect project under tests/smoke/{language}/ (docs/smoke.md)"
            ),
            CoverageProblem::ToolNotSmoked {
                language,
                suite,
                tool,
            } => write!(
                f,
                "tool `{tool}` of language `{language}` is run by no command of the smoke suite \
                 `{suite}`: add a [[smoke.{suite}.commands]] entry that runs it"
            ),
        }
    }
}

/// What the gate needs to know about one variant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VariantView {
    pub aliases: Vec<String>,
    pub serves: Vec<String>,
    /// Every tool the variant owes, inherited ones included.
    pub owed: Vec<String>,
}

/// The manifest as the gate sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoverageView {
    pub languages: BTreeMap<String, Vec<String>>,
    pub default: String,
    pub variants: BTreeMap<String, VariantView>,
    /// Language -> (its smoke suite, the tools that suite's commands run).
    pub smoke: BTreeMap<String, (String, Vec<String>)>,
}

impl CoverageView {
    pub fn of(manifest: &Manifest) -> Self {
        CoverageView {
            languages: manifest
                .languages
                .iter()
                .map(|(name, l)| (name.clone(), l.tools.clone()))
                .collect(),
            default: manifest.default.clone(),
            variants: manifest
                .variants
                .iter()
                .map(|(name, v)| {
                    let view = VariantView {
                        aliases: v.aliases.clone(),
                        serves: v.serves.clone(),
                        owed: manifest.owed_tools(name),
                    };
                    (name.clone(), view)
                })
                .collect(),
            smoke: manifest
                .smoke
                .values()
                .flat_map(|suite| {
                    let tools: Vec<String> = suite
                        .commands
                        .iter()
                        .flat_map(|c| c.tools.iter().cloned())
                        .collect();
                    suite
                        .languages
                        .iter()
                        .map(move |l| (l.clone(), (suite.name.clone(), tools.clone())))
                })
                .collect(),
        }
    }
}

/// Coverage problems of a manifest, in a stable order (default first, then
/// variants by name, languages by name, tools in `[languages]` order).
pub fn coverage_problems(manifest: &Manifest) -> Vec<CoverageProblem> {
    view_problems(&CoverageView::of(manifest))
}

pub fn view_problems(view: &CoverageView) -> Vec<CoverageProblem> {
    let mut problems = Vec::new();
    // An undefined default is manifest validation's error, not coverage's.
    if let Some(default) = view.variants.get(&view.default) {
        for (language, tools) in &view.languages {
            for tool in tools {
                if !default.owed.contains(tool) {
                    problems.push(CoverageProblem::DefaultLacksTool {
                        variant: view.default.clone(),
                        language: language.clone(),
                        tool: tool.clone(),
                    });
                }
            }
        }
    }
    for (name, variant) in &view.variants {
        let mut serves: Vec<&String> = variant.serves.iter().collect();
        serves.sort();
        serves.dedup();
        for language in serves {
            // An undefined language is manifest validation's error.
            let Some(tools) = view.languages.get(language) else {
                continue;
            };
            let reachable = !variant.aliases.is_empty();
            if reachable && !tools.is_empty() && !tools.iter().any(|t| variant.owed.contains(t)) {
                problems.push(CoverageProblem::ServesWithoutTools {
                    variant: name.clone(),
                    aliases: variant.aliases.clone(),
                    language: language.clone(),
                    tools: tools.clone(),
                });
            }
        }
    }
    for (language, tools) in &view.languages {
        match view.smoke.get(language) {
            None => problems.push(CoverageProblem::NoSmoke {
                language: language.clone(),
            }),
            Some((suite, smoked)) => {
                for tool in tools.iter().filter(|t| !smoked.contains(t)) {
                    problems.push(CoverageProblem::ToolNotSmoked {
                        language: language.clone(),
                        suite: suite.clone(),
                        tool: tool.clone(),
                    });
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn view() -> CoverageView {
        let mut languages = BTreeMap::new();
        languages.insert("go".into(), strings(&["go", "gofmt"]));
        languages.insert("js".into(), strings(&["eslint", "jest"]));
        let mut variants = BTreeMap::new();
        variants.insert(
            "full".into(),
            VariantView {
                aliases: strings(&["full"]),
                serves: strings(&["go", "js"]),
                owed: strings(&["git", "go", "gofmt", "eslint", "jest"]),
            },
        );
        variants.insert(
            "js".into(),
            VariantView {
                aliases: strings(&["js"]),
                serves: strings(&["js"]),
                owed: strings(&["git", "eslint", "jest"]),
            },
        );
        let smoke = BTreeMap::from([
            ("go".into(), ("go".into(), strings(&["go", "gofmt"]))),
            ("js".into(), ("js".into(), strings(&["eslint", "jest"]))),
        ]);
        CoverageView {
            languages,
            default: "full".into(),
            variants,
            smoke,
        }
    }

    #[test]
    fn a_covering_family_has_no_problems() {
        assert_eq!(view_problems(&view()), vec![]);
    }

    #[test]
    fn default_lacking_a_tool_names_language_tool_and_variant() {
        let mut v = view();
        v.variants
            .get_mut("full")
            .unwrap()
            .owed
            .retain(|t| t != "jest");
        let problems = view_problems(&v);
        assert_eq!(
            problems,
            vec![CoverageProblem::DefaultLacksTool {
                variant: "full".into(),
                language: "js".into(),
                tool: "jest".into(),
            }]
        );
        let line = problems[0].to_string();
        assert!(!line.contains('\n'));
        for word in ["`full`", "`jest`", "`js`"] {
            assert!(line.contains(word), "{line}");
        }
    }

    #[test]
    fn aliased_variant_owing_none_of_a_served_language_tools_is_a_problem() {
        let mut v = view();
        v.variants.get_mut("js").unwrap().owed = strings(&["git"]);
        let problems = view_problems(&v);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].variant(), Some("js"));
        assert_eq!(problems[0].language(), "js");
        assert_eq!(problems[0].tools(), vec!["eslint", "jest"]);
        assert!(problems[0].to_string().contains("alias `js`"));
    }

    #[test]
    fn owing_some_of_a_served_language_tools_is_enough() {
        let mut v = view();
        v.variants.get_mut("js").unwrap().owed = strings(&["jest"]);
        assert_eq!(view_problems(&v), vec![]);
    }

    #[test]
    fn a_variant_without_aliases_is_not_held_to_its_serves() {
        let mut v = view();
        let js = v.variants.get_mut("js").unwrap();
        js.aliases.clear();
        js.owed.clear();
        assert_eq!(view_problems(&v), vec![]);
    }

    #[test]
    fn every_language_needs_a_smoke_suite_running_each_of_its_tools() {
        let mut v = view();
        v.smoke.remove("go");
        v.smoke.get_mut("js").unwrap().1 = strings(&["eslint"]);
        let problems = view_problems(&v);
        assert_eq!(
            problems,
            vec![
                CoverageProblem::NoSmoke {
                    language: "go".into()
                },
                CoverageProblem::ToolNotSmoked {
                    language: "js".into(),
                    suite: "js".into(),
                    tool: "jest".into()
                },
            ]
        );
        assert_eq!(problems[0].variant(), None);
        assert!(problems[0].to_string().contains("[smoke.go]"));
        assert!(problems[1].to_string().contains("[[smoke.js.commands]]"));
    }

    /// The shipped images.toml, edited, read as if at the repository root
    /// (where its fragment scripts and smoke projects are).
    fn shipped(edit: impl Fn(String) -> String) -> Manifest {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let text = edit(std::fs::read_to_string(repo.join("images.toml")).unwrap());
        Manifest::from_str_at(&text, &repo.join("images.toml")).unwrap()
    }

    #[test]
    fn the_shipped_family_is_covered() {
        assert_eq!(coverage_problems(&shipped(|t| t)), vec![]);
    }

    #[test]
    fn removing_jest_from_the_js_fragment_uncovers_js_and_ts_in_full() {
        let manifest = shipped(|text| {
            let before = "provides = [\"eslint\", \"tsc\", \"jest\"]";
            assert!(
                text.contains(before),
                "the js fragment changed; update this test"
            );
            text.replace(before, "provides = [\"eslint\", \"tsc\"]")
        });
        let lacks = |language: &str| CoverageProblem::DefaultLacksTool {
            variant: "full".into(),
            language: language.into(),
            tool: "jest".into(),
        };
        assert_eq!(coverage_problems(&manifest), vec![lacks("js"), lacks("ts")]);
    }

    #[test]
    fn an_aliased_variant_losing_every_tool_of_a_served_language_is_named() {
        // minimal serves python with pytest only; without it, none is owed.
        let manifest = shipped(|text| {
            let before = "provides = [\"git\", \"python3\", \"pytest\"]";
            assert!(
                text.contains(before),
                "the minimal fragment changed; update this test"
            );
            text.replace(before, "provides = [\"git\", \"python3\"]")
        });
        assert_eq!(
            coverage_problems(&manifest),
            vec![CoverageProblem::ServesWithoutTools {
                variant: "minimal".into(),
                aliases: vec!["minimal".into()],
                language: "python".into(),
                tools: vec!["ruff".into(), "pyright".into(), "pytest".into()],
            }]
        );
    }
}
