//! A bundle's dependencies: what it asks for and what was resolved.
//!
//! A bundle *requires* packages the way its authors write them: lines of
//! `requirements.txt` (PEP 508: `jinja2`, `numpy>=1.26,<2`,
//! `requests[socks]==2.32.3 ; python_version >= "3.8"`, with pip-compile's
//! `--hash` options) and `package.json` `dependencies` (`"^3.2.1"`,
//! `"~1.0.0"`, `"1.2.3"`, `"latest"`). At deploy the process tier resolves
//! them with the package manager's own resolver and stores the result —
//! the **lock**, exact versions with their hashes — in the version's
//! artifact as `hearth.lock`, so every node installs the same thing and a
//! later release of a dependency never changes a deployed version.
//!
//! For npm, a lock entry also holds the dependency's whole installed tree
//! (`tree`: each `node_modules/…` path with its version, registry URL and
//! integrity, as npm records it), so another node installs exactly that
//! tree with `npm ci`, not whatever the dependency's own ranges resolve to
//! by then.
//!
//! Only registry names are taken: a requirement that is a path, a URL, a
//! VCS reference or a pip option (`-r`, `--index-url`) is refused, because
//! the installer would read it from somewhere other than the package index.

use std::collections::BTreeMap;

use hearth_core::Runtime;
use serde::{Deserialize, Serialize};

/// The file in a bundle that holds its lock.
pub const LOCK_FILE: &str = "hearth.lock";

/// The most packages one lock may hold (a hostile `hearth.lock` cannot
/// make the node install without end).
pub const MAX_LOCKED: usize = 1_000;

/// The largest lock file read.
pub const MAX_LOCK_BYTES: u64 = 32 << 20;

/// The most entries one npm dependency's tree may hold.
pub const MAX_TREE: usize = 10_000;

/// What of an npm lockfile entry a tree keeps: enough for `npm ci` to
/// install it exactly; nothing it would read as a place to fetch from
/// other than the registry.
const TREE_FIELDS: [&str; 11] = [
    "version",
    "resolved",
    "integrity",
    "dependencies",
    "optionalDependencies",
    "peerDependencies",
    "peerDependenciesMeta",
    "optional",
    "peer",
    "os",
    "cpu",
];

/// One npm dependency's installed tree: `node_modules/…` paths to their
/// lockfile entries (npm's `packages` map, kept fields only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct NpmTree(pub BTreeMap<String, serde_json::Value>);

impl NpmTree {
    /// The tree in npm's hidden lockfile (`node_modules/.package-lock.json`),
    /// with only the kept fields of each entry.
    pub fn from_npm(record: &serde_json::Value) -> NpmTree {
        let mut tree = BTreeMap::new();
        for (path, entry) in record["packages"].as_object().into_iter().flatten() {
            let kept: serde_json::Map<String, serde_json::Value> = entry
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| TREE_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            tree.insert(path.clone(), serde_json::Value::Object(kept));
        }
        NpmTree(tree)
    }

    /// Its canonical text (what names it in the install cache).
    pub fn canonical(&self) -> String {
        serde_json::to_string(&self.0).expect("a tree serialises")
    }

    /// Checks what a user's lock could put here: paths of registry names
    /// under `node_modules`, kept fields only, versions, registry URLs
    /// (http or https) and integrity strings.
    fn check(&self) -> Result<(), String> {
        if self.0.len() > MAX_TREE {
            return Err(format!("a tree of more than {MAX_TREE} packages"));
        }
        for (path, entry) in &self.0 {
            let names_ok = path
                .strip_prefix("node_modules/")
                .is_some_and(|rest| rest.split("/node_modules/").all(is_npm_name));
            let entry = entry
                .as_object()
                .ok_or_else(|| format!("tree entry {path:?} is not an object"))?;
            let fields_ok = entry.keys().all(|k| TREE_FIELDS.contains(&k.as_str()));
            let version_ok = entry["version"].as_str().is_some_and(is_version);
            let resolved_ok = entry.get("resolved").is_none_or(|r| {
                r.as_str().is_some_and(|r| {
                    (r.starts_with("https://") || r.starts_with("http://"))
                        && !r.contains(char::is_whitespace)
                })
            });
            let integrity_ok = entry.get("integrity").is_none_or(|i| {
                i.as_str()
                    .is_some_and(|i| is_hash(Runtime::Node, i.split(' ').next().unwrap_or("")))
            });
            if !(names_ok && fields_ok && version_ok && resolved_ok && integrity_ok) {
                return Err(format!(
                    "tree entry {path:?} is not a registry package's path, version, URL and integrity"
                ));
            }
        }
        Ok(())
    }
}

impl std::hash::Hash for NpmTree {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.canonical().hash(state);
    }
}

impl PartialOrd for NpmTree {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for NpmTree {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.canonical().cmp(&other.canonical())
    }
}

/// One exact package: a lock's entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Package {
    pub name: String,
    pub version: String,
    /// The installed file's digest: `sha256:<hex>` (pip) or an npm
    /// integrity string (`sha512-<base64>`). Absent in artifacts deployed
    /// before locks, whose requirements were exact pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// npm: the dependency's whole installed tree, which a node installs
    /// exactly (`npm ci`). Absent for Python, and in older locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub tree: Option<NpmTree>,
}

impl Package {
    /// `name==version` (Python) or `name@version` (Node.js).
    pub fn spec(&self, runtime: Runtime) -> String {
        match runtime {
            Runtime::Python => format!("{}=={}", self.name, self.version),
            _ => format!("{}@{}", self.name, self.version),
        }
    }

    /// A directory name for the install cache: one per name, version,
    /// file (and npm tree), so two installs that claim one version but
    /// differ never share a directory.
    pub fn dir_name(&self) -> String {
        let base = format!("{}-{}", self.name.replace('/', "+"), self.version);
        match (&self.hash, &self.tree) {
            (None, None) => base,
            (hash, tree) => {
                let mut identity = hash.clone().unwrap_or_default();
                if let Some(tree) = tree {
                    identity.push('\n');
                    identity.push_str(&tree.canonical());
                }
                let digest = hearth_store::sha256_hex(identity.as_bytes());
                format!("{base}-{}", &digest[..12])
            }
        }
    }
}

/// What a bundle asks for, one requirement per package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Normalised name (PEP 503 for Python; npm's as written).
    pub name: String,
    /// The line as the installer is given it (Python: name, extras,
    /// specifiers, marker and hashes, re-assembled from what was checked;
    /// Node.js: the range).
    pub spec: String,
    /// The version when the requirement names exactly one (`==1.2.3`,
    /// `"1.2.3"`).
    pub exact: Option<String>,
}

/// The lock stored in an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The format's version.
    pub hearth_lock: u32,
    pub packages: Vec<Package>,
}

impl Lock {
    pub fn new(mut packages: Vec<Package>) -> Lock {
        packages.sort();
        packages.dedup();
        Lock {
            hearth_lock: 1,
            packages,
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a lock serialises");
        out.push(b'\n');
        out
    }

    /// Reads and checks a lock (one Hearth wrote, or one a user's bundle
    /// carries: every name, version and hash is checked as strictly as a
    /// requirement would be).
    pub fn parse(runtime: Runtime, bytes: &[u8]) -> Result<Lock, String> {
        let bad = |why: String| format!("{LOCK_FILE}: {why}");
        if bytes.len() as u64 > MAX_LOCK_BYTES {
            return Err(bad(format!("larger than {} MiB", MAX_LOCK_BYTES >> 20)));
        }
        let lock: Lock = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        lock.check(runtime)?;
        Ok(lock)
    }

    /// Checks every name, version, hash and npm tree as strictly as a
    /// requirement would be: a lock a user's bundle carries, and what pip
    /// and npm report (their answers are parsed text too).
    pub fn check(&self, runtime: Runtime) -> Result<(), String> {
        let bad = |why: String| format!("{LOCK_FILE}: {why}");
        let lock = self;
        if lock.hearth_lock != 1 {
            return Err(bad(format!(
                "format {} is not one this node reads (1)",
                lock.hearth_lock
            )));
        }
        if lock.packages.len() > MAX_LOCKED {
            return Err(bad(format!("more than {MAX_LOCKED} packages")));
        }
        for p in &lock.packages {
            let name_ok = match runtime {
                Runtime::Python => {
                    is_python_name(&p.name) && normalize_python_name(&p.name) == p.name
                }
                _ => is_npm_name(&p.name),
            };
            let hash_ok = p.hash.as_deref().is_none_or(|h| is_hash(runtime, h));
            if !name_ok || !is_version(&p.version) || !hash_ok {
                return Err(bad(format!(
                    "{:?} {:?} {:?} is not a package name, exact version and hash",
                    p.name, p.version, p.hash
                )));
            }
            match (&p.tree, runtime) {
                (None, _) => {}
                (Some(_), Runtime::Python) => {
                    return Err(bad(format!("{}: a Python package has no tree", p.name)));
                }
                (Some(tree), _) => tree.check().map_err(|e| bad(format!("{}: {e}", p.name)))?,
            }
        }
        Ok(())
    }
}

/// A digest as a lock holds it: `sha256:<64 hex>` for pip, an npm
/// integrity (`sha512-<base64>`, or `sha1-` for old packages).
fn is_hash(runtime: Runtime, h: &str) -> bool {
    match runtime {
        Runtime::Python => h
            .strip_prefix("sha256:")
            .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
        _ => h.split_once('-').is_some_and(|(algo, b64)| {
            matches!(algo, "sha512" | "sha384" | "sha256" | "sha1")
                && !b64.is_empty()
                && b64
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        }),
    }
}

/// An exact version: what pip and npm print for an installed package.
fn is_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+!".contains(c))
}

/// PEP 503 normalised name: lower case, runs of `-_.` become `-`.
pub fn normalize_python_name(name: &str) -> String {
    let mut out = String::new();
    for ch in name.chars() {
        if matches!(ch, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(ch.to_ascii_lowercase());
        }
    }
    out
}

/// A PEP 508 name: letters, digits and `-_.`, starting and ending with a
/// letter or digit.
fn is_python_name(name: &str) -> bool {
    name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Parses `requirements.txt` as people write it. Each line is a name with
/// optional extras, version specifiers, environment marker and `--hash`
/// options (a `\` at the end of a line continues it); comments and blank
/// lines are skipped. Anything pip would read as a file, a URL or another
/// option is refused with the line that holds it.
pub fn parse_requirements(text: &str) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut first_line = 0;
    for (i, raw) in text.lines().enumerate() {
        // A comment starts at a `#` at the line's start or after a space.
        let line = match raw.find(" #").or_else(|| raw.starts_with('#').then_some(0)) {
            Some(at) => &raw[..at],
            None => raw,
        };
        if pending.is_empty() {
            first_line = i + 1;
        }
        let continued = line.trim_end().ends_with('\\');
        pending.push_str(line.trim_end().trim_end_matches('\\'));
        pending.push(' ');
        if continued {
            continue;
        }
        let line = std::mem::take(&mut pending);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        out.push(
            parse_requirement(line)
                .map_err(|why| format!("requirements.txt line {first_line}: {line:?}: {why}"))?,
        );
    }
    if out.len() > MAX_LOCKED {
        return Err(format!(
            "requirements.txt lists more than {MAX_LOCKED} packages"
        ));
    }
    Ok(out)
}

fn parse_requirement(line: &str) -> Result<Requirement, String> {
    const FIX: &str = "write a package name with optional version specifiers (jinja2, numpy>=1.26,<2, six==1.16.0)";
    if line.starts_with('-') {
        return Err(format!(
            "pip options are not taken here, only package names: {FIX}"
        ));
    }
    // The options after the requirement: only `--hash=sha256:<hex>`.
    let mut words = line.split_whitespace().peekable();
    let mut head = Vec::new();
    while let Some(w) = words.next_if(|w| !w.starts_with("--")) {
        head.push(w);
    }
    let mut hashes = Vec::new();
    for w in words {
        match w.strip_prefix("--hash=") {
            Some(h) if is_hash(Runtime::Python, h) => hashes.push(h.to_string()),
            _ => {
                return Err(format!(
                    "{w:?}: the only option taken is --hash=sha256:<hex>"
                ));
            }
        }
    }
    let head = head.join(" ");
    let (req, marker) = match head.split_once(';') {
        Some((r, m)) => (r.trim(), Some(m.trim())),
        None => (head.trim(), None),
    };
    let name_end = req
        .find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
        .unwrap_or(req.len());
    let (name, mut rest) = (&req[..name_end], req[name_end..].trim_start());
    if !is_python_name(name) || req.contains(['@', '/', '\\', ':']) {
        return Err(format!(
            "paths, URLs and direct references are not taken: {FIX}"
        ));
    }
    let mut extras = "";
    if let Some(after) = rest.strip_prefix('[') {
        let (inner, tail) = after
            .split_once(']')
            .ok_or_else(|| format!("an extras list is not closed: {FIX}"))?;
        if !inner.split(',').all(|e| is_python_name(e.trim())) {
            return Err(format!("extras must be names: {FIX}"));
        }
        extras = inner;
        rest = tail.trim_start();
    }
    let rest = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or(rest);
    let mut specifiers = Vec::new();
    let mut exact = None;
    if !rest.trim().is_empty() {
        for s in rest.split(',') {
            let s: String = s.split_whitespace().collect();
            let op_len = s.find(|c: char| !"<>=!~".contains(c)).unwrap_or(s.len());
            let (op, version) = s.split_at(op_len);
            let version_ok = !version.is_empty()
                && version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.+!*".contains(c));
            if !matches!(op, "==" | "!=" | "<=" | ">=" | "<" | ">" | "~=" | "===") || !version_ok {
                return Err(format!("{s:?} is not a version specifier: {FIX}"));
            }
            if matches!(op, "==" | "===") && !version.contains('*') {
                exact = Some(version.to_string());
            }
            specifiers.push(s);
        }
        if specifiers.len() > 1 {
            exact = None;
        }
    }
    if let Some(m) = marker
        && (m.is_empty()
            || !m
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || " _.<>=!~'\"()-".contains(c)))
    {
        return Err(format!("{m:?} is not an environment marker"));
    }
    let mut spec = name.to_string();
    if !extras.is_empty() {
        spec.push_str(&format!("[{}]", extras.replace(' ', "")));
    }
    spec.push_str(&specifiers.join(","));
    if let Some(m) = marker {
        spec.push_str(&format!(" ; {m}"));
    }
    for h in hashes {
        spec.push_str(&format!(" --hash={h}"));
    }
    Ok(Requirement {
        name: normalize_python_name(name),
        spec,
        exact,
    })
}

/// npm's rule for a registry package's name: `name` or `@scope/name`,
/// each part starting with a letter or digit. Anything else (`../x`,
/// `/abs`, `file:x`, `git+https://…`) npm would read as a path or URL.
pub fn is_npm_name(name: &str) -> bool {
    let part = |p: &str| {
        p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._~".contains(c))
    };
    name.len() <= 214
        && match name.strip_prefix('@') {
            Some(scoped) => scoped
                .split_once('/')
                .is_some_and(|(scope, n)| part(scope) && part(n)),
            None => part(name),
        }
}

/// Reads `package.json`'s `dependencies`: registry names with a version,
/// a semver range (`^3.2.1`, `~1.0`, `>=1 <2`, `1.x`, `*`) or a tag
/// (`latest`). Paths, URLs, git and `npm:` aliases are refused.
pub fn parse_package_json(pkg: &serde_json::Value) -> Result<Vec<Requirement>, String> {
    let Some(deps) = pkg.get("dependencies") else {
        return Ok(Vec::new());
    };
    let deps = deps
        .as_object()
        .ok_or("package.json: dependencies must be an object")?;
    if deps.len() > MAX_LOCKED {
        return Err(format!(
            "package.json lists more than {MAX_LOCKED} dependencies"
        ));
    }
    let mut out = Vec::new();
    for (name, range) in deps {
        let range = range.as_str().unwrap_or("").trim();
        let range_ok = !range.is_empty()
            && range.len() <= 256
            && range
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || " .*^~<>=|+-".contains(c));
        if !is_npm_name(name) || !range_ok {
            return Err(format!(
                "package.json: dependency {name:?}: {range:?} is not a registry package with a \
                 version or range (\"1.2.3\", \"^1.2.3\", \"~1.2\", \"latest\"); paths, URLs, \
                 git and npm: aliases are not taken"
            ));
        }
        let exact = is_version(range)
            && range.starts_with(|c: char| c.is_ascii_digit())
            && range.matches('.').count() == 2
            && !range.contains(['x', 'X', '*']);
        out.push(Requirement {
            name: name.clone(),
            spec: range.to_string(),
            exact: exact.then(|| range.to_string()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_as_people_write_them_are_read() {
        let reqs = parse_requirements(
            "# app\nJinja2\nnumpy >= 1.26, <2  # fast\nrequests[socks,security]==2.32.3 ; python_version >= \"3.8\"\n\
             six==1.16.0 \\\n    --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254\n\
             python_dateutil == 2.9.0.post0\n",
        )
        .unwrap();
        let got: Vec<(&str, &str, Option<&str>)> = reqs
            .iter()
            .map(|r| (r.name.as_str(), r.spec.as_str(), r.exact.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("jinja2", "Jinja2", None),
                ("numpy", "numpy>=1.26,<2", None),
                (
                    "requests",
                    "requests[socks,security]==2.32.3 ; python_version >= \"3.8\"",
                    Some("2.32.3")
                ),
                (
                    "six",
                    "six==1.16.0 --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254",
                    Some("1.16.0")
                ),
                (
                    "python-dateutil",
                    "python_dateutil==2.9.0.post0",
                    Some("2.9.0.post0")
                ),
            ]
        );
    }

    #[test]
    fn requirements_that_are_not_registry_names_are_refused() {
        for line in [
            "../evil==1.0",
            "./x",
            "-e .",
            "-r /etc/shadow",
            "--index-url https://evil",
            "--extra-index-url=https://evil",
            "https://x/y.whl",
            "pkg @ https://x/y.whl",
            "git+https://x/y",
            "pkg==1.0 --find-links /tmp",
            "pkg==1.0 --hash=md5:abc",
            "pkg>=1 ; a;b",
            "pkg[../x]",
            "pkg=>1",
        ] {
            let err = parse_requirements(line).unwrap_err();
            assert!(err.contains("line 1"), "{line}: {err}");
        }
    }

    #[test]
    fn dependencies_that_are_paths_or_urls_are_refused() {
        for name in ["left-pad", "@scope/pkg", "lodash.get", "a1"] {
            assert!(is_npm_name(name), "{name}");
        }
        for name in [
            "../evil",
            "/abs",
            "file:x",
            ".hidden",
            "@scope",
            "@/x",
            "Upper",
            "git+https://x",
            "a/b",
        ] {
            assert!(!is_npm_name(name), "{name}");
            let deps = serde_json::json!({"dependencies": {name: "1.0.0"}});
            assert!(parse_package_json(&deps).is_err(), "{name}");
        }
        for range in [
            "file:../x",
            "git+https://x/y",
            "npm:other@1",
            "github:a/b",
            "",
            "./x",
            "http://x/y.tgz",
        ] {
            let deps = serde_json::json!({"dependencies": {"x": range}});
            let err = parse_package_json(&deps).unwrap_err();
            assert!(err.contains("not a registry package"), "{range}: {err}");
        }
        let deps = serde_json::json!({"dependencies": {"a": "^3.2.1", "b": "1.2.3", "c": "latest", "d": ">=1 <2 || 3.x"}});
        let exact: Vec<Option<String>> = parse_package_json(&deps)
            .unwrap()
            .into_iter()
            .map(|r| r.exact)
            .collect();
        assert_eq!(exact, [None, Some("1.2.3".into()), None, None]);
    }

    #[test]
    fn a_lock_is_checked_like_the_requirements_it_replaces() {
        let good = Lock::new(vec![Package {
            name: "markupsafe".into(),
            version: "2.1.5".into(),
            hash: Some(format!("sha256:{}", "a".repeat(64))),
            tree: None,
        }]);
        assert_eq!(Lock::parse(Runtime::Python, &good.to_json()).unwrap(), good);
        for (name, version, hash) in [
            ("../x", "1.0", None),
            ("MarkupSafe", "1.0", None),
            ("x", "1.0 --index-url=h", None),
            ("x", "1.0", Some("sha256:zz")),
            ("x", "1.0", Some("md5:00")),
        ] {
            let lock = serde_json::json!({"hearth_lock": 1, "packages": [{"name": name, "version": version, "hash": hash}]});
            let err = Lock::parse(Runtime::Python, lock.to_string().as_bytes()).unwrap_err();
            assert!(err.starts_with(LOCK_FILE), "{err}");
        }
        let npm = serde_json::json!({"hearth_lock": 1, "packages": [{"name": "@a/b", "version": "1.0.0", "hash": "sha512-AbC+/==",
            "tree": {"node_modules/@a/b": {"version": "1.0.0", "resolved": "https://registry.npmjs.org/@a/b/-/b-1.0.0.tgz", "integrity": "sha512-AbC+/=="},
                     "node_modules/@a/b/node_modules/dep": {"version": "2.0.0", "dependencies": {"x": "^1"}}}}]});
        assert!(Lock::parse(Runtime::Node, npm.to_string().as_bytes()).is_ok());
        for (path, entry) in [
            (
                "node_modules/../../x",
                serde_json::json!({"version": "1.0.0"}),
            ),
            ("lib/x", serde_json::json!({"version": "1.0.0"})),
            (
                "node_modules/x",
                serde_json::json!({"version": "1.0.0", "resolved": "file:../../etc"}),
            ),
            (
                "node_modules/x",
                serde_json::json!({"version": "1.0.0", "resolved": "git+ssh://x/y"}),
            ),
            (
                "node_modules/x",
                serde_json::json!({"version": "1.0.0", "hasInstallScript": true}),
            ),
            (
                "node_modules/x",
                serde_json::json!({"version": "1.0.0", "integrity": "md5-x"}),
            ),
        ] {
            let lock = serde_json::json!({"hearth_lock": 1, "packages": [{"name": "x", "version": "1.0.0", "tree": {path: entry}}]});
            let err = Lock::parse(Runtime::Node, lock.to_string().as_bytes()).unwrap_err();
            assert!(err.contains("tree entry"), "{path} {entry}: {err}");
        }
        assert!(Lock::parse(Runtime::Node, b"{\"hearth_lock\": 2, \"packages\": []}").is_err());
    }

    #[test]
    fn a_hash_gives_its_own_install_directory() {
        let p = |hash: Option<&str>| Package {
            name: "@s/x".into(),
            version: "1.0".into(),
            hash: hash.map(str::to_string),
            tree: None,
        };
        assert_eq!(p(None).dir_name(), "@s+x-1.0");
        assert_ne!(
            p(Some("sha512-a")).dir_name(),
            p(Some("sha512-b")).dir_name()
        );
        let with_tree = |dep: &str| Package {
            tree: Some(NpmTree(BTreeMap::from([(
                "node_modules/dep".to_string(),
                serde_json::json!({"version": dep}),
            )]))),
            ..p(Some("sha512-a"))
        };
        assert_ne!(with_tree("1.0.0").dir_name(), with_tree("1.1.0").dir_name());
        assert_ne!(
            with_tree("1.0.0").dir_name(),
            p(Some("sha512-a")).dir_name()
        );
    }
}

/// Requirements and `package.json` are tenant input: no text or JSON
/// makes their readers panic.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn no_requirements_text_makes_the_reader_panic(
            text in "([a-zA-Z0-9_.=<>!~;,\\[\\] #@:/\\\\-]{0,40}\n){0,8}",
        ) {
            if let Ok(reqs) = parse_requirements(&text) {
                prop_assert!(reqs.iter().all(|r| !r.name.is_empty()));
            }
        }

        #[test]
        fn no_package_json_dependencies_make_the_reader_panic(
            deps in prop::collection::btree_map("[@a-z0-9/._-]{0,16}", "[ -~]{0,16}", 0..6),
            other in any::<bool>(),
        ) {
            let deps: serde_json::Map<String, serde_json::Value> = deps
                .into_iter()
                .map(|(k, v)| (k, if other { serde_json::json!([v]) } else { v.into() }))
                .collect();
            let pkg = serde_json::json!({ "dependencies": deps });
            let _ = parse_package_json(&pkg);
        }
    }
}
