//! Function code for the js and process tiers: one source file or a bundle.
//!
//! Users upload a single file (`handler.py`, `index.mjs`), a tar (optionally
//! gzipped) or a zip. Whatever arrives is checked (relative paths only, no
//! links, bounded size) and stored as one canonical tar — sorted entries,
//! zeroed times and owners — so that the same files always hash the same.
//!
//! Dependencies are declared inside the bundle (`requirements.txt`,
//! `package.json`) and resolved at deploy into a lock the artifact carries
//! as `hearth.lock` (see `deps.rs`).

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::{Component, Path};

use displaydoc::Display;
use hearth_core::{HandlerName, Runtime};
use thiserror::Error;

use crate::deps::{LOCK_FILE, Lock, Package, Requirement};

/// Upper bounds on what a bundle may unpack to.
pub const MAX_FILES: usize = 10_000;
pub const MAX_UNPACKED_BYTES: u64 = 128 << 20;

/// Why an upload is not a bundle Hearth can run, or what in it is missing.
#[derive(Debug, Display, Error)]
pub enum BundleError {
    /// not a valid gzip archive: {0}
    NotGzip(std::io::Error),
    /// not a valid tar archive: {0}
    NotTar(std::io::Error),
    /// not a valid zip archive: {0}
    NotZip(zip::result::ZipError),
    /// {name} is neither source text nor a tar/zip archive
    NotSource { name: String },
    /// the bundle unpacks to more than {max_mib} MiB or {max_files} files
    TooBig { max_mib: u64, max_files: usize },
    /// the archive holds no files
    Empty,
    /// {path:?}: paths in a bundle must be relative and stay inside it
    Escapes { path: String },
    /// {path:?} is not a file name
    NotAFileName { path: String },
    /// {path:?}: a path in a bundle may not hold a NUL or other control character
    ControlCharacter { path: String },
    /// {path}: only regular files and directories may be in a bundle
    NotAFile { path: String },
    /// {path}: links may not be in a bundle
    Link { path: String },
    /// {path}: {source}
    Read {
        path: String,
        source: std::io::Error,
    },
    /// handler {handler}: the bundle has no {wanted} (files: {listing})
    NoHandlerModule {
        handler: String,
        wanted: String,
        listing: String,
    },
    /// package.json names main {main:?}, which is not in the bundle
    MissingMain { main: String },
    /// cannot tell which file to run: name it one of {candidates}
    NoEntry { candidates: String },
    /// {entry} never mentions {function} (the handler {handler}): export it, or name another with --handler module.function
    NotMentioned {
        entry: String,
        function: String,
        handler: String,
    },
    /// package.json: {0}
    PackageJson(serde_json::Error),
    /// {0}
    Packages(String),
    /// {name} {spec:?} has no lock: deploy it again to resolve it
    NotLocked { name: String, spec: String },
}

/// The files of a function version, by relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    files: BTreeMap<String, Vec<u8>>,
}

impl Bundle {
    /// Reads an upload: an archive (by its magic bytes) or a single source
    /// file, named `file_name` or the runtime's default entry.
    pub fn from_upload(
        runtime: Runtime,
        file_name: Option<&str>,
        bytes: &[u8],
    ) -> Result<Bundle, BundleError> {
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(bytes)
                .take(MAX_UNPACKED_BYTES + 1)
                .read_to_end(&mut raw)
                .map_err(BundleError::NotGzip)?;
            if raw.len() as u64 > MAX_UNPACKED_BYTES {
                return Err(too_big());
            }
            return Bundle::uploaded(read_tar(&raw)?);
        }
        if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
            return Bundle::uploaded(read_zip(bytes)?);
        }
        if is_tar(bytes) {
            return Bundle::uploaded(read_tar(bytes)?);
        }
        let name = file_name
            .map(|n| n.rsplit('/').next().unwrap_or(n).to_string())
            .unwrap_or_else(|| default_entry(runtime).to_string());
        let name = check_path(&name)?;
        if std::str::from_utf8(bytes).is_err() {
            return Err(BundleError::NotSource { name });
        }
        Ok(Bundle {
            files: BTreeMap::from([(name, bytes.to_vec())]),
        })
    }

    /// The files of `source`: an upload as [`from_upload`](Self::from_upload)
    /// reads it, an artifact exactly.
    pub fn from_source(runtime: Runtime, source: &crate::Source) -> Result<Bundle, BundleError> {
        if source.artifact {
            Bundle::from_tar(&source.code)
        } else {
            Bundle::from_upload(runtime, source.file_name.as_deref(), &source.code)
        }
    }

    /// Reads a canonical tar ([`to_tar`](Self::to_tar)) back exactly: no
    /// directory is stripped, as one was when the upload was read.
    pub fn from_tar(bytes: &[u8]) -> Result<Bundle, BundleError> {
        let files = read_tar(bytes)?;
        if files.is_empty() {
            return Err(BundleError::Empty);
        }
        Ok(Bundle { files })
    }

    /// An upload's files. A bundle packed from a directory often has one
    /// top directory (`myfn/handler.py`): it is stripped when everything
    /// is inside it.
    fn uploaded(files: BTreeMap<String, Vec<u8>>) -> Result<Bundle, BundleError> {
        let Some(first) = files.keys().next().cloned() else {
            return Err(BundleError::Empty);
        };
        if let Some((top, _)) = first.split_once('/') {
            let prefix = format!("{top}/");
            if files.keys().all(|k| k.starts_with(&prefix)) {
                let stripped = files
                    .into_iter()
                    .map(|(k, v)| (k[prefix.len()..].to_string(), v))
                    .collect();
                return Ok(Bundle { files: stripped });
            }
        }
        Ok(Bundle { files })
    }

    /// The canonical tar stored as the version's artifact.
    pub fn to_tar(&self) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        builder.mode(tar::HeaderMode::Deterministic);
        for (path, data) in &self.files {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(0);
            header.set_cksum();
            builder
                .append_data(&mut header, path, data.as_slice())
                .expect("writing a tar into memory cannot fail");
        }
        builder
            .into_inner()
            .expect("writing a tar into memory cannot fail")
    }

    pub fn file(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// Writes the files under `dir` (directories 0755, files 0644).
    pub fn unpack_to(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for (path, data) in &self.files {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
            }
            std::fs::write(&target, data)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
    }

    /// The file the runtime starts from: the handler's module when the
    /// function names one (`app.handler`: `app.py`, or `app/__init__.py`;
    /// `src/index.handler`: `src/index.mjs`, `.js` or `.cjs`), otherwise
    /// `package.json`'s `main` or the first of the usual names present.
    pub fn entry(
        &self,
        runtime: Runtime,
        handler: Option<&HandlerName>,
    ) -> Result<String, BundleError> {
        if let Some(handler) = handler {
            let module = handler.module_path();
            let files: Vec<String> = match runtime {
                Runtime::Python => vec![format!("{module}.py"), format!("{module}/__init__.py")],
                _ => [".mjs", ".js", ".cjs"]
                    .iter()
                    .map(|ext| format!("{module}{ext}"))
                    .collect(),
            };
            return files
                .iter()
                .find(|f| self.files.contains_key(*f))
                .cloned()
                .ok_or_else(|| BundleError::NoHandlerModule {
                    handler: handler.to_string(),
                    wanted: files.join(" or "),
                    listing: self.listing(),
                });
        }
        let candidates: &[&str] = match runtime {
            Runtime::Python => &["handler.py", "main.py", "__main__.py", "lambda_function.py"],
            _ => &[
                "index.mjs",
                "index.js",
                "index.cjs",
                "handler.mjs",
                "handler.js",
            ],
        };
        if runtime != Runtime::Python
            && let Some(main) = self
                .package_json()?
                .and_then(|p| p.get("main").and_then(|m| m.as_str()).map(str::to_string))
        {
            let main = main.trim_start_matches("./").to_string();
            return if self.files.contains_key(&main) {
                Ok(main)
            } else {
                Err(BundleError::MissingMain { main })
            };
        }
        if let Some(c) = candidates.iter().find(|c| self.files.contains_key(**c)) {
            return Ok(c.to_string());
        }
        let ext: &[&str] = match runtime {
            Runtime::Python => &[".py"],
            _ => &[".mjs", ".js", ".cjs"],
        };
        let top: Vec<&String> = self
            .files
            .keys()
            .filter(|k| !k.contains('/') && ext.iter().any(|e| k.ends_with(e)))
            .collect();
        match top.as_slice() {
            [one] => Ok(one.to_string()),
            _ => Err(BundleError::NoEntry {
                candidates: candidates.join(", "),
            }),
        }
    }

    /// A JavaScript entry's exports are known only once it runs; at deploy
    /// the entry must at least name the handler's function.
    pub fn check_mentions(&self, entry: &str, handler: &HandlerName) -> Result<(), BundleError> {
        let source = String::from_utf8_lossy(self.file(entry).unwrap_or_default());
        if mentions_identifier(&source, handler.function()) {
            return Ok(());
        }
        Err(BundleError::NotMentioned {
            entry: entry.to_string(),
            function: handler.function().to_string(),
            handler: handler.to_string(),
        })
    }

    /// The bundle's first few file names, for error messages.
    fn listing(&self) -> String {
        const SHOWN: usize = 8;
        let mut names: Vec<&str> = self.files.keys().take(SHOWN).map(String::as_str).collect();
        if self.files.len() > SHOWN {
            names.push("…");
        }
        names.join(", ")
    }

    fn package_json(&self) -> Result<Option<serde_json::Value>, BundleError> {
        self.files
            .get("package.json")
            .map(|b| serde_json::from_slice(b).map_err(BundleError::PackageJson))
            .transpose()
    }

    /// What the bundle asks for: `requirements.txt` (Python) or
    /// `package.json` `dependencies` (Node.js), checked.
    pub fn requirements(&self, runtime: Runtime) -> Result<Vec<Requirement>, BundleError> {
        match runtime {
            Runtime::Python => match self.files.get("requirements.txt") {
                Some(text) => crate::deps::parse_requirements(&String::from_utf8_lossy(text))
                    .map_err(BundleError::Packages),
                None => Ok(Vec::new()),
            },
            _ => match self.package_json()? {
                Some(pkg) => crate::deps::parse_package_json(&pkg).map_err(BundleError::Packages),
                None => Ok(Vec::new()),
            },
        }
    }

    /// The lock the bundle carries, if any (checked).
    pub fn lock(&self, runtime: Runtime) -> Result<Option<Lock>, BundleError> {
        self.files
            .get(LOCK_FILE)
            .map(|bytes| Lock::parse(runtime, bytes).map_err(BundleError::Packages))
            .transpose()
    }

    /// The lock in a stored artifact, read without reading the rest of it:
    /// the other entries' data is seeked past (None for an artifact without
    /// one, or that is not a bundle).
    pub fn lock_in_artifact(runtime: Runtime, artifact: impl Read + std::io::Seek) -> Option<Lock> {
        let mut archive = tar::Archive::new(artifact);
        let mut entry = archive
            .entries_with_seek()
            .ok()?
            .flatten()
            .find(|e| e.path().is_ok_and(|p| p.as_os_str() == LOCK_FILE))?;
        let mut bytes = Vec::new();
        (&mut entry)
            .take(crate::deps::MAX_LOCK_BYTES + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        Lock::parse(runtime, &bytes).ok()
    }

    /// The bundle with `path` holding `bytes` (added or replaced).
    pub fn with_file(mut self, path: &str, bytes: Vec<u8>) -> Bundle {
        self.files.insert(path.to_string(), bytes);
        self
    }

    /// The bundle with `lock` as its lock file.
    pub fn with_lock(mut self, lock: &Lock) -> Bundle {
        self.files.insert(LOCK_FILE.to_string(), lock.to_json());
        self
    }

    /// The exact packages to install: the lock's; for an artifact stored
    /// before locks existed, its requirements, which were exact pins then.
    pub fn packages(&self, runtime: Runtime) -> Result<Vec<Package>, BundleError> {
        if let Some(lock) = self.lock(runtime)? {
            return Ok(lock.packages);
        }
        self.requirements(runtime)?
            .into_iter()
            .map(|r| match r.exact {
                Some(version) => Ok(Package {
                    name: r.name,
                    version,
                    hash: None,
                    tree: None,
                }),
                None => Err(BundleError::NotLocked {
                    name: r.name,
                    spec: r.spec,
                }),
            })
            .collect()
    }
}

/// Whether `source` has `name` as a whole identifier (not inside a longer
/// one such as `my_handler` or `handlerX`).
fn mentions_identifier(source: &str, name: &str) -> bool {
    let part = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    source.match_indices(name).any(|(at, _)| {
        let before = source[..at].chars().next_back();
        let after = source[at + name.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

/// The files of a tar archive, checked: regular files (directories are
/// implied) under safe relative paths, within the bounds.
fn read_tar(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, BundleError> {
    let mut archive = tar::Archive::new(Cursor::new(bytes));
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for entry in archive.entries().map_err(BundleError::NotTar)? {
        let mut entry = entry.map_err(BundleError::NotTar)?;
        let kind = entry.header().entry_type();
        let path = entry
            .path()
            .map_err(BundleError::NotTar)?
            .to_string_lossy()
            .into_owned();
        if kind.is_dir() || kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        if !kind.is_file() {
            return Err(BundleError::NotAFile { path });
        }
        let path = check_path(&path)?;
        total += entry.size();
        if total > MAX_UNPACKED_BYTES || files.len() >= MAX_FILES {
            return Err(too_big());
        }
        let mut data = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut data)
            .map_err(|source| BundleError::Read {
                path: path.clone(),
                source,
            })?;
        files.insert(path, data);
    }
    Ok(files)
}

/// The files of a zip archive, checked as [`read_tar`] checks a tar's.
fn read_zip(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, BundleError> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(BundleError::NotZip)?;
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).map_err(BundleError::NotZip)?;
        if f.is_dir() {
            continue;
        }
        if f.is_symlink() {
            return Err(BundleError::Link {
                path: f.name().to_string(),
            });
        }
        let path = check_path(f.name())?;
        let mut data = Vec::new();
        // The declared size may lie (zip bombs): count what inflates.
        (&mut f)
            .take(MAX_UNPACKED_BYTES + 1 - total)
            .read_to_end(&mut data)
            .map_err(|source| BundleError::Read {
                path: path.clone(),
                source,
            })?;
        total += data.len() as u64;
        if total > MAX_UNPACKED_BYTES || files.len() >= MAX_FILES {
            return Err(too_big());
        }
        files.insert(path, data);
    }
    Ok(files)
}

fn too_big() -> BundleError {
    BundleError::TooBig {
        max_mib: MAX_UNPACKED_BYTES >> 20,
        max_files: MAX_FILES,
    }
}

fn default_entry(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Python => "handler.py",
        _ => "index.mjs",
    }
}

/// Whether `bytes` (a file's first 512 bytes at least) begin a tar
/// archive: `ustar` at byte 257. Bundles are tar files; modules are not.
pub fn is_tar(bytes: &[u8]) -> bool {
    bytes.len() >= 512 && &bytes[257..262] == b"ustar"
}

/// A relative path of normal components, as a `/`-separated string.
fn check_path(path: &str) -> Result<String, BundleError> {
    // No file system takes a NUL, and a tar header cannot hold one; a
    // control character in a name is a trap for whoever lists it.
    if path.chars().any(char::is_control) {
        return Err(BundleError::ControlCharacter {
            path: path.to_string(),
        });
    }
    let p = Path::new(path);
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => {
                return Err(BundleError::Escapes {
                    path: path.to_string(),
                });
            }
        }
    }
    if parts.is_empty() {
        return Err(BundleError::NotAFileName {
            path: path.to_string(),
        });
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_files_get_their_name_or_the_default() {
        let b = Bundle::from_upload(Runtime::Python, Some("dir/app.py"), b"x = 1\n").unwrap();
        assert_eq!(b.entry(Runtime::Python, None).unwrap(), "app.py");
        let b = Bundle::from_upload(Runtime::Python, None, b"x = 1\n").unwrap();
        assert_eq!(b.entry(Runtime::Python, None).unwrap(), "handler.py");
        assert!(Bundle::from_upload(Runtime::Python, None, &[0xff, 0xfe, 0]).is_err());
    }

    /// Found by the `bundle` fuzz target: a zip entry named with a NUL
    /// passed the path check, and writing the canonical tar then panicked.
    #[test]
    fn names_with_control_characters_are_refused() {
        for name in ["a\0b.js", "index\n.js", "dir/\x1b[2Jx.js"] {
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            zip.start_file(name, zip::write::SimpleFileOptions::default())
                .unwrap();
            std::io::Write::write_all(&mut zip, b"x").unwrap();
            let upload = zip.finish().unwrap().into_inner();
            let err = Bundle::from_upload(Runtime::Node, None, &upload).unwrap_err();
            assert!(
                matches!(err, BundleError::ControlCharacter { .. }),
                "{name:?}: {err}"
            );
        }
        let err = Bundle::from_upload(Runtime::Python, Some("a\tb.py"), b"x = 1\n").unwrap_err();
        assert!(matches!(err, BundleError::ControlCharacter { .. }), "{err}");
    }

    #[test]
    fn identifiers_are_whole_words() {
        assert!(mentions_identifier("exports.handler = h", "handler"));
        assert!(mentions_identifier(
            "export async function handler(e) {}",
            "handler"
        ));
        assert!(!mentions_identifier("function my_handler() {}", "handler"));
        assert!(!mentions_identifier(
            "const handlerX = 1; $handler()",
            "handler"
        ));
        assert!(!mentions_identifier("", "handler"));
    }

    #[test]
    fn a_handler_names_its_module_file() {
        let b = Bundle {
            files: BTreeMap::from([
                ("src/index.js".to_string(), b"x".to_vec()),
                ("pkg/__init__.py".to_string(), b"x".to_vec()),
                ("lambda_function.py".to_string(), b"x".to_vec()),
            ]),
        };
        let h = |s: &str| s.parse::<HandlerName>().unwrap();
        let entry = |rt, s: &str| b.entry(rt, Some(&h(s)));
        assert_eq!(
            entry(Runtime::Python, "lambda_function.lambda_handler").unwrap(),
            "lambda_function.py"
        );
        assert_eq!(
            entry(Runtime::Python, "pkg.main").unwrap(),
            "pkg/__init__.py"
        );
        assert_eq!(
            entry(Runtime::Node, "src/index.handler").unwrap(),
            "src/index.js"
        );
        assert_eq!(
            entry(Runtime::Js, "src.index.handler").unwrap(),
            "src/index.js"
        );
        let err = entry(Runtime::Python, "app.handler")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no app.py or app/__init__.py") && err.contains("lambda_function.py"),
            "{err}"
        );
    }

    #[test]
    fn archives_round_trip_canonically_and_strip_one_top_directory() {
        let mut b = tar::Builder::new(Vec::new());
        for (p, d) in [
            ("fn/handler.py", &b"def handler(e, c): return 1\n"[..]),
            ("fn/requirements.txt", b"Six==1.16.0\n"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(d.len() as u64);
            h.set_mode(0o600);
            h.set_mtime(12345);
            h.set_cksum();
            b.append_data(&mut h, p, d).unwrap();
        }
        let raw = b.into_inner().unwrap();
        let bundle = Bundle::from_upload(Runtime::Python, Some("x.tar"), &raw).unwrap();
        assert_eq!(
            bundle.paths().collect::<Vec<_>>(),
            ["handler.py", "requirements.txt"]
        );
        assert_eq!(
            bundle.packages(Runtime::Python).unwrap(),
            [Package {
                name: "six".into(),
                version: "1.16.0".into(),
                hash: None,
                tree: None,
            }]
        );
        let canonical = bundle.to_tar();
        assert_eq!(Bundle::from_tar(&canonical).unwrap(), bundle);
        assert_eq!(canonical, Bundle::from_tar(&canonical).unwrap().to_tar());
    }

    #[test]
    fn escaping_paths_are_refused() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_cksum();
        // `append_data` refuses "..", so write the name into the header directly.
        h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../evil.p");
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let err = Bundle::from_tar(&b.into_inner().unwrap()).unwrap_err();
        assert!(matches!(err, BundleError::Escapes { .. }), "{err}");
        assert!(err.to_string().contains("relative"), "{err}");
    }

    #[test]
    fn the_lock_decides_what_installs() {
        let with = |files: &[(&str, &str)]| Bundle {
            files: files
                .iter()
                .map(|(p, d)| (p.to_string(), d.as_bytes().to_vec()))
                .collect(),
        };
        let loose = with(&[("requirements.txt", "jinja2>=3\n")]);
        let err = loose.packages(Runtime::Python).unwrap_err();
        assert!(matches!(err, BundleError::NotLocked { .. }), "{err}");
        let lock = Lock::new(vec![Package {
            name: "jinja2".into(),
            version: "3.1.4".into(),
            hash: None,
            tree: None,
        }]);
        let locked = loose.with_lock(&lock);
        assert_eq!(locked.packages(Runtime::Python).unwrap(), lock.packages);
        let artifact = locked.to_tar();
        assert_eq!(
            Bundle::lock_in_artifact(Runtime::Python, Cursor::new(&artifact)),
            Some(lock)
        );
        assert_eq!(
            Bundle::lock_in_artifact(Runtime::Python, Cursor::new(b"\0asm")),
            None
        );
        let bad = with(&[(
            "hearth.lock",
            "{\"hearth_lock\": 1, \"packages\": [{\"name\": \"-r\", \"version\": \"1\"}]}",
        )]);
        assert!(bad.packages(Runtime::Python).is_err());
    }

    /// `hearth versions` reads each artifact's lock: the files before it
    /// in the tar (sorted: `data.bin` < `hearth.lock`) are seeked past,
    /// not read, however large.
    #[test]
    fn the_lock_is_read_without_reading_the_files_before_it() {
        struct Counting<R>(R, u64);
        impl<R: Read> Read for Counting<R> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1 += n as u64;
                Ok(n)
            }
        }
        impl<R: std::io::Seek> std::io::Seek for Counting<R> {
            fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
                self.0.seek(to)
            }
        }
        let lock = Lock::new(vec![Package {
            name: "six".into(),
            version: "1.16.0".into(),
            hash: None,
            tree: None,
        }]);
        let bundle = Bundle {
            files: BTreeMap::from([
                ("data.bin".to_string(), vec![7u8; 8 << 20]),
                ("handler.py".to_string(), b"x = 1\n".to_vec()),
            ]),
        }
        .with_lock(&lock);
        let mut reader = Counting(Cursor::new(bundle.to_tar()), 0);
        assert_eq!(
            Bundle::lock_in_artifact(Runtime::Python, &mut reader),
            Some(lock)
        );
        assert!(reader.1 < 64 << 10, "read {} bytes", reader.1);
    }

    #[test]
    fn zips_are_read() {
        use std::io::Write;
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default();
        w.start_file("index.mjs", opts).unwrap();
        w.write_all(b"export default {}").unwrap();
        let raw = w.finish().unwrap().into_inner();
        let b = Bundle::from_upload(Runtime::Node, None, &raw).unwrap();
        assert_eq!(b.entry(Runtime::Node, None).unwrap(), "index.mjs");
    }
}
