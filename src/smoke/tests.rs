use super::*;
use crate::manifest::SmokeExpect;

/// A case to build others from (`..case()`).
pub(crate) fn case() -> Case {
    Case {
        id: "python-pass-01".into(),
        suite: "python".into(),
        command: "ruff check .".into(),
        project: "pass".into(),
        source: PathBuf::from("/nonexistent"),
        git: false,
        argv: vec!["ruff".into(), "check".into(), ".".into()],
        resolution: None,
        expect: SmokeExpect {
            exit: 0,
            output: Some("All checks passed".into()),
            no_output: false,
        },
        writes: false,
    }
}

fn shipped() -> Manifest {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Manifest::load(&root.join("images.toml")).unwrap()
}

fn ran(exit: i32, output: &str) -> driver::Ran {
    driver::Ran {
        exit: Some(exit),
        output: output.into(),
        seconds: Some(0.1),
        cpu: None,
        truncated: false,
    }
}

#[test]
fn a_variant_runs_neutral_and_its_languages_suites_where_it_owes_the_tools() {
    let m = shipped();
    // The default serves every language: neutral first, then every suite.
    let full = plan(&m, &m.default);
    let mut every: Vec<&str> = vec!["neutral"];
    every.extend(
        m.smoke
            .keys()
            .map(String::as_str)
            .filter(|s| *s != "neutral"),
    );
    assert_eq!(full.suites(), every);
    assert!(full.skipped.is_empty(), "{:?}", full.skipped);
    let go = plan(&m, "go");
    assert_eq!(go.suites(), ["neutral", "go"]);
    // minimal owes git, python3 and pytest only.
    let minimal = plan(&m, "minimal");
    assert_eq!(minimal.suites(), ["neutral", "python"]);
    let ran: Vec<&str> = minimal.cases.iter().map(|c| c.command.as_str()).collect();
    for command in ["git status --short", "pytest", "zoneinfo", "tzdata"] {
        assert!(ran.contains(&command), "{ran:?}");
    }
    let skipped: Vec<(&str, Vec<String>)> = minimal
        .skipped
        .iter()
        .map(|s| (s.command.as_str(), s.missing.clone()))
        .collect();
    assert!(
        skipped.contains(&("ruff check .", vec!["ruff".to_string()])),
        "{skipped:?}"
    );
    assert!(skipped.iter().any(|(c, _)| *c == "sg run"), "{skipped:?}");
    // Every case id is unique: each is a directory of the workspace.
    let mut ids: Vec<&str> = full.cases.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), full.cases.len());
}

#[test]
fn node_tools_resolve_local_first_like_verify() {
    let js = plan(&shipped(), "js");
    let eslint: Vec<(&str, &str, Option<&str>)> = js
        .cases
        .iter()
        .filter(|c| c.command == "eslint .")
        .map(|c| (c.project.as_str(), c.argv[0].as_str(), c.resolution))
        .collect();
    assert_eq!(
        eslint,
        [
            ("defect", "eslint", Some("global")),
            ("local", "./node_modules/.bin/eslint", Some("local")),
            ("pass", "eslint", Some("global")),
        ]
    );
    let python = plan(&shipped(), "python");
    assert!(python.cases.iter().all(|c| c.resolution.is_none()));
}

#[test]
fn the_digest_covers_the_cases_and_the_projects_bytes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pass")).unwrap();
    std::fs::write(dir.path().join("pass/a.py"), "x = 1\n").unwrap();
    let mut p = Plan {
        cases: vec![Case {
            source: dir.path().join("pass"),
            ..case()
        }],
        skipped: vec![],
    };
    let first = p.digest().unwrap();
    assert!(first.starts_with("sha256:"));
    assert_eq!(p.digest().unwrap(), first);
    std::fs::write(dir.path().join("pass/a.py"), "x = 2\n").unwrap();
    let second = p.digest().unwrap();
    assert_ne!(second, first);
    p.cases[0].expect.exit = 1;
    assert_ne!(p.digest().unwrap(), second);
}

#[test]
fn judging_exit_output_and_the_workspace() {
    let c = case();
    let pass = judge(&c, Some(&ran(0, "All checks passed!\n")), vec![]);
    assert!(pass.passed(), "{pass:?}");
    assert_eq!(pass.label(), "python/ruff check . [pass]");

    let wrong = judge(
        &c,
        Some(&ran(
            2,
            "error: Failed to initialize cache at /.cache/ruff\n",
        )),
        vec![],
    );
    assert_eq!(
        wrong.problems,
        [
            "exit status 2, expected 0",
            "output does not match /All checks passed/"
        ]
    );
    assert!(wrong.output_tail.contains("Failed to initialize cache"));

    let missing = judge(&c, Some(&ran(127, "sh: ruff: not found\n")), vec![]);
    assert!(
        missing.problems[0].contains("could not be run"),
        "{missing:?}"
    );

    let wrote = judge(
        &c,
        Some(&ran(0, "All checks passed!\n")),
        vec!["added .ruff_cache".into()],
    );
    assert_eq!(
        wrote.problems,
        [
            "changed the workspace, which this command must only read: added .ruff_cache; \
             hint: `.ruff_cache` is ruff's cache: set RUFF_CACHE_DIR = \"${XDG_CACHE_HOME}/ruff\" \
             (environment variables go in the fragment's [fragments.NAME.env] in images.toml: \
             HOME is writable at run time, the workspace is not)"
        ]
    );
    let fixer = Case {
        writes: true,
        ..case()
    };
    let fixed = judge(
        &fixer,
        Some(&ran(0, "All checks passed!\n")),
        vec!["modified a.py".into()],
    );
    assert!(
        fixed.passed() && fixed.changed == ["modified a.py"],
        "{fixed:?}"
    );

    let quiet = Case {
        expect: SmokeExpect {
            exit: 0,
            output: None,
            no_output: true,
        },
        ..case()
    };
    assert!(judge(&quiet, Some(&ran(0, "")), vec![]).passed());
    assert_eq!(
        judge(&quiet, Some(&ran(0, "calc/x.go\n")), vec![]).problems,
        ["printed output where nothing was expected"]
    );
    let lost = judge(&c, None, vec![]);
    assert!(!lost.passed() && lost.exit.is_none());
}

#[test]
fn the_listed_suites_are_the_plans() {
    let m = shipped();
    for variant in m.build_order() {
        assert_eq!(
            suites(&m, &variant),
            plan(&m, &variant).suites(),
            "{variant}"
        );
    }
}
