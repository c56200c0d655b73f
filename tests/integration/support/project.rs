//! The one project builder: a temp directory of the test's own holding an
//! image family's inputs, and the strict [`Cli`] run in it.
//!
//! ```ignore
//! let family = Family::new("root")
//!     .tool("alpha")
//!     .fragment("root", &["alpha"])
//!     .variant(Variant::new("root").fragments(&["root"]));
//! let p = Project::fixture(&family)
//!     .fragment("root", &fake_tool("alpha", "alpha 1.0.0"))
//!     .file("image_pins.json", EMPTY_PINS)
//!     .render();
//! p.cli().args(["build"]).stdout_free("the summary").run();
//! ```
//!
//! A project is either a copy of the shipped family ([`Project::shipped`],
//! [`Project::shipped_publishing_to`]), a fixture family of the test's own
//! ([`Project::fixture`], its images.toml written by [`Family`]), or
//! empty ([`Project::empty`]) for a test that writes everything itself.
//! A fixture expensive to make and only read is made once per test process
//! behind a `OnceLock`, in [`Project::scratch`].
//!
//! Builds of a fixture project are cold: its fragment scripts carry its
//! directory (or the [`Project::salt`] a test gives), so no test builds on
//! another's cache.

use super::{Cli, FAKE_SMOKE, copy_tree, repo_root, write_fake_smoke_projects};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// A pins file with no pins.
pub const EMPTY_PINS: &str = "{\"schema\": 1, \"images\": {}}\n";

/// A temp project, removed when dropped; see the module docs.
pub struct Project {
    root: PathBuf,
    /// Removes `root` on drop; `None` for a [`Project::scratch`].
    _temp: Option<tempfile::TempDir>,
    /// Set on every [`Project::cli`].
    env: Vec<(String, OsString)>,
    /// Written into every fragment script, so its layers are its own: no
    /// cache hits from other tests or earlier runs.
    salt: String,
}

impl Project {
    /// An empty directory.
    pub fn empty() -> Project {
        let temp = tempfile::tempdir().expect("tempdir");
        Project::at(temp.path().to_path_buf(), Some(temp))
    }

    /// An empty directory `name` in this test process's scratch directory
    /// under the target dir, for a fixture built once per process behind a
    /// `OnceLock` (a static is never dropped, so a temp dir would leak): the
    /// next test process removes it.
    pub fn scratch(name: &str) -> Project {
        let root = super::distribution::scratch().join(name);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Project::at(root, None)
    }

    fn at(root: PathBuf, temp: Option<tempfile::TempDir>) -> Project {
        Project {
            salt: root.display().to_string(),
            root,
            _temp: temp,
            env: Vec::new(),
        }
    }

    /// A copy of the shipped family's inputs (images.toml, image_pins.json,
    /// templates/, docker/, the smoke projects), to mutate freely.
    pub fn shipped() -> Project {
        Project::empty().copy_of_shipped()
    }

    /// This project with the shipped family's inputs copied in.
    pub fn copy_of_shipped(self) -> Project {
        let p = self;
        for item in [
            "images.toml",
            "image_pins.json",
            "templates",
            "docker",
            "tests/smoke",
        ] {
            copy_tree(&repo_root().join(item), &p.join(item));
        }
        p
    }

    /// A copy of the shipped family whose `local` profile publishes to
    /// `repository`, with an empty pins file; fragment scripts the checkout
    /// lacks are stubbed (only building reads them, but the manifest must
    /// name existing files).
    pub fn shipped_publishing_to(repository: &str) -> Project {
        let p = Project::shipped();
        let text = p.read("images.toml");
        let marker = "[profiles.local]\n";
        let at = text.find(marker).expect("images.toml has [profiles.local]") + marker.len();
        let end = text[at..].find("\n[").map_or(text.len(), |i| at + i + 1);
        let profile: String = text[at..end]
            .lines()
            .filter(|l| !l.starts_with("repository ="))
            .map(|l| format!("{l}\n"))
            .collect();
        let text = format!(
            "{}repository = \"{repository}\"\n{profile}{}",
            &text[..at],
            &text[end..]
        );
        p.images_toml(text)
            .stub_missing_fragments()
            .file("image_pins.json", EMPTY_PINS)
    }

    /// Stubs the fragment scripts images.toml names that the checkout
    /// lacks (only building reads them; the manifest must name files).
    pub fn stub_missing_fragments(self) -> Self {
        let doc: toml::Table = self.read("images.toml").parse().unwrap();
        for frag in doc["fragments"].as_table().unwrap().values() {
            let script = frag["script"].as_str().unwrap();
            if !self.join(script).exists() {
                self.write(script, "#!/bin/sh\n");
            }
        }
        self
    }

    /// A fixture family of the test's own: the repository's templates,
    /// `family`'s images.toml and the `[smoke.fake]` projects. Its fragment
    /// scripts are the test's to write ([`Project::fragment`]), then
    /// [`Project::render`].
    pub fn fixture(family: &Family) -> Project {
        let p = Project::empty();
        copy_tree(&repo_root().join("templates"), &p.join("templates"));
        write_fake_smoke_projects(p.path());
        p.images_toml(family.text())
    }

    /// Fragment scripts carry `salt` (default: the project's directory).
    pub fn salt(mut self, salt: impl Into<String>) -> Self {
        self.salt = salt.into();
        self
    }

    /// `rel` holds `contents` (directories created).
    pub fn file(self, rel: &str, contents: impl AsRef<[u8]>) -> Self {
        self.write(rel, contents);
        self
    }

    /// The project's images.toml.
    pub fn images_toml(self, text: impl AsRef<str>) -> Self {
        self.file("images.toml", text.as_ref())
    }

    /// `docker/install-<name>.sh`, executable: `#!/bin/sh`, `set -eu`, the
    /// salt, then `body`.
    pub fn fragment(self, name: &str, body: &str) -> Self {
        self.write_fragment(name, body);
        self
    }

    /// An environment variable of every [`Project::cli`].
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// Runs `render`, which must write the Dockerfiles and nothing else.
    pub fn render(self) -> Self {
        self.cli()
            .args(["render"])
            .stdout_may("created   docker/.*")
            .stdout_like(r"render: \d+ file\(s\) written, 0 removed, 0 unchanged")
            .run();
        self
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root.join(rel)
    }

    /// The text of `rel`.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.join(rel))
            .unwrap_or_else(|e| panic!("{}: {e}", self.join(rel).display()))
    }

    /// Writes `rel` (during a test; [`Project::file`] while building).
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let path = self.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
    }

    /// Rewrites `rel` by `f` of its text.
    pub fn edit(&self, rel: &str, f: impl FnOnce(String) -> String) {
        let text = f(self.read(rel));
        self.write(rel, text);
    }

    /// Writes `docker/install-<name>.sh` (see [`Project::fragment`]).
    pub fn write_fragment(&self, name: &str, body: &str) {
        let rel = format!("docker/install-{name}.sh");
        self.write(&rel, format!("#!/bin/sh\nset -eu\n# {}\n{body}", self.salt));
        std::fs::set_permissions(self.join(&rel), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The strict CLI builder, run in this project with its environment.
    pub fn cli(&self) -> Cli {
        self.env
            .iter()
            .fold(Cli::new(self.path()), |cli, (k, v)| cli.env(k, v))
    }
}

/// A shell snippet installing `/usr/local/bin/<name>` that prints `output`.
pub fn fake_tool(name: &str, output: &str) -> String {
    format!(
        "cat > /usr/local/bin/{name} <<'EOF'\n#!/bin/sh\necho \"{output}\"\nEOF\n\
         chmod +x /usr/local/bin/{name}\n"
    )
}

/// The fixture families' images.toml, one text for every test with a
/// family of its own: fake tools (`NAME --version` says `NAME X.Y.Z`), the
/// language `fake` served by `beta` and checked by `[smoke.fake]`
/// ([`FAKE_SMOKE`]); the tests choose the tools, fragments, variants and
/// the `local` profile.
#[derive(Clone)]
pub struct Family {
    repository: String,
    upstream: String,
    platforms: Vec<String>,
    default: String,
    tools: Vec<String>,
    fragments: Vec<String>,
    variants: Vec<String>,
    profile: Vec<(String, String)>,
}

impl Family {
    /// A family whose default variant is `default`, with nothing in it yet.
    pub fn new(default: &str) -> Family {
        Family {
            repository: "example.invalid/sunaba-fixture".into(),
            upstream: format!("debian:trixie-slim@sha256:{}", "0".repeat(64)),
            platforms: Vec::new(),
            default: default.into(),
            tools: Vec::new(),
            fragments: Vec::new(),
            variants: Vec::new(),
            profile: Vec::new(),
        }
    }

    pub fn repository(mut self, repository: &str) -> Self {
        self.repository = repository.into();
        self
    }

    /// The pinned upstream, `name:tag@sha256:…`.
    pub fn upstream(mut self, upstream: &str) -> Self {
        self.upstream = upstream.into();
        self
    }

    pub fn platforms(mut self, platforms: &[&str]) -> Self {
        self.platforms = platforms.iter().map(|p| p.to_string()).collect();
        self
    }

    /// A tool probed by `NAME --version`, its version the `NAME X.Y.Z` it
    /// prints.
    pub fn tool(self, name: &str) -> Self {
        self.tool_with(name, "")
    }

    /// [`Family::tool`], owed at `min` at least.
    pub fn tool_min(self, name: &str, min: &str) -> Self {
        self.tool_with(name, &format!("min = \"{min}\"\n"))
    }

    fn tool_with(mut self, name: &str, extra: &str) -> Self {
        self.tools.push(format!(
            "[tools.{name}]\nprobe = [\"{name}\", \"--version\"]\n\
             version = '{name} ([0-9]+\\.[0-9]+\\.[0-9]+)'\n{extra}"
        ));
        self
    }

    /// A tool whose probe `NAME` passes by exiting 0 (no version).
    pub fn presence_tool(mut self, name: &str) -> Self {
        self.tools.push(format!(
            "[tools.{name}]\nprobe = [\"{name}\"]\npresence_only = true\n"
        ));
        self
    }

    /// Fragment `name`, the script `docker/install-<name>.sh`.
    pub fn fragment(mut self, name: &str, provides: &[&str]) -> Self {
        self.fragments.push(format!(
            "[fragments.{name}]\nscript = \"docker/install-{name}.sh\"\nprovides = {}\n",
            list(provides)
        ));
        self
    }

    pub fn variant(mut self, variant: Variant) -> Self {
        self.variants.push(variant.text());
        self
    }

    /// `key = "value"` in `[profiles.local]`.
    pub fn profile(mut self, key: &str, value: &str) -> Self {
        self.profile.push((key.into(), value.into()));
        self
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "schema = 1\nrepository = \"{}\"\nupstream = \"{}\"\n",
            self.repository, self.upstream
        );
        if !self.platforms.is_empty() {
            let platforms: Vec<&str> = self.platforms.iter().map(String::as_str).collect();
            out.push_str(&format!("platforms = {}\n", list(&platforms)));
        }
        out.push_str(&format!(
            "default = \"{}\"\nsource = \"https://example.invalid/sunaba-fixture\"\n\n\
             [languages]\nfake = [\"beta\"]\n",
            self.default
        ));
        for section in self.tools.iter().chain(&self.fragments) {
            out.push('\n');
            out.push_str(section);
        }
        out.push('\n');
        out.push_str(FAKE_SMOKE);
        for section in &self.variants {
            out.push('\n');
            out.push_str(section);
        }
        if !self.profile.is_empty() {
            out.push_str("\n[profiles.local]\n");
            for (k, v) in &self.profile {
                out.push_str(&format!("{k} = \"{v}\"\n"));
            }
        }
        out
    }
}

/// One `[variants.NAME]` of a [`Family`]: a size budget of 500 MiB unless
/// said otherwise.
pub struct Variant {
    name: String,
    parent: Option<String>,
    fragments: Vec<String>,
    aliases: Vec<String>,
    serves: Vec<String>,
    size_budget: String,
}

impl Variant {
    pub fn new(name: &str) -> Variant {
        Variant {
            name: name.into(),
            parent: None,
            fragments: Vec::new(),
            aliases: Vec::new(),
            serves: Vec::new(),
            size_budget: "500MiB".into(),
        }
    }

    pub fn parent(mut self, parent: &str) -> Self {
        self.parent = Some(parent.into());
        self
    }

    pub fn fragments(mut self, fragments: &[&str]) -> Self {
        self.fragments = fragments.iter().map(|f| f.to_string()).collect();
        self
    }

    /// Aliased as its own name.
    pub fn aliased(self) -> Self {
        let name = self.name.clone();
        self.aliases(&[&name])
    }

    pub fn aliases(mut self, aliases: &[&str]) -> Self {
        self.aliases = aliases.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Serves the language `fake` (so `[smoke.fake]` runs on it).
    pub fn serves_fake(mut self) -> Self {
        self.serves = vec!["fake".into()];
        self
    }

    pub fn size_budget(mut self, budget: &str) -> Self {
        self.size_budget = budget.into();
        self
    }

    fn text(&self) -> String {
        let strs = |v: &[String]| list(&v.iter().map(String::as_str).collect::<Vec<_>>());
        let mut out = format!("[variants.{}]\n", self.name);
        if let Some(parent) = &self.parent {
            out.push_str(&format!("parent = \"{parent}\"\n"));
        }
        out.push_str(&format!("fragments = {}\n", strs(&self.fragments)));
        if !self.aliases.is_empty() {
            out.push_str(&format!("aliases = {}\n", strs(&self.aliases)));
        }
        if !self.serves.is_empty() {
            out.push_str(&format!("serves = {}\n", strs(&self.serves)));
        }
        out.push_str(&format!("size_budget = \"{}\"\n", self.size_budget));
        out
    }
}

/// `["a", "b"]`.
fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

#[test]
fn the_fixture_family_text_is_a_valid_manifest_as_written() {
    let family = Family::new("kid")
        .platforms(&["linux/amd64"])
        .tool_min("alpha", "1.0.0")
        .presence_tool("netcheck")
        .tool("beta")
        .fragment("root", &["alpha", "netcheck"])
        .fragment("kid", &["beta"])
        .variant(Variant::new("root").fragments(&["root"]).aliased())
        .variant(
            Variant::new("kid")
                .parent("root")
                .fragments(&["kid"])
                .serves_fake()
                .size_budget("1KiB"),
        )
        .profile("repository", "example.invalid/x");
    let doc: toml::Table = family.text().parse().unwrap();
    assert_eq!(doc["default"].as_str(), Some("kid"));
    assert_eq!(doc["tools"]["alpha"]["min"].as_str(), Some("1.0.0"));
    assert_eq!(
        doc["tools"]["netcheck"]["presence_only"].as_bool(),
        Some(true)
    );
    assert_eq!(doc["variants"]["kid"]["parent"].as_str(), Some("root"));
    assert_eq!(doc["variants"]["kid"]["size_budget"].as_str(), Some("1KiB"));
    assert_eq!(
        doc["profiles"]["local"]["repository"].as_str(),
        Some("example.invalid/x")
    );
    Project::fixture(&family)
        .fragment("root", &fake_tool("alpha", "alpha 1.0.0"))
        .fragment("kid", &fake_tool("beta", "beta 1.0.0"))
        .render();
}
