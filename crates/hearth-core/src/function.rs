//! Functions, their immutable versions, and the limits they run under.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ValidationError;

/// What the user wrote. Chosen at deploy time (inferred from the file name
/// unless given), fixed for the life of a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Wasm,
    Js,
    Python,
    Node,
}

impl Runtime {
    /// Whether its functions may install packages (a lock of pip or npm
    /// packages in their bundle).
    pub fn has_packages(self) -> bool {
        !matches!(self, Runtime::Wasm)
    }

    /// The runtime a file most likely holds, judged by its name.
    pub fn infer_from_file_name(name: &str) -> Option<Runtime> {
        let lower = name.to_ascii_lowercase();
        let ext = lower.rsplit_once('.').map(|(_, e)| e)?;
        match ext {
            "wasm" | "wat" => Some(Runtime::Wasm),
            "js" | "mjs" | "cjs" => Some(Runtime::Js),
            "py" => Some(Runtime::Python),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Wasm => "wasm",
            Runtime::Js => "js",
            Runtime::Python => "python",
            Runtime::Node => "node",
        }
    }

    /// The tiers that can run this runtime, in order of preference: a
    /// function starts in the first one its node has, and JavaScript falls
    /// back from the isolate to the process tier.
    pub fn tiers(self) -> &'static [Tier] {
        match self {
            Runtime::Wasm => &[Tier::Wasm],
            Runtime::Js => &[Tier::Js, Tier::Process],
            Runtime::Python | Runtime::Node => &[Tier::Process],
        }
    }

    /// The tier a fresh function of this runtime starts in.
    pub fn first_tier(self) -> Tier {
        self.tiers()[0]
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Runtime {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "wasm" => Ok(Runtime::Wasm),
            "js" => Ok(Runtime::Js),
            "python" => Ok(Runtime::Python),
            "node" => Ok(Runtime::Node),
            other => Err(ValidationError::UnknownRuntime(other.to_string())),
        }
    }
}

/// How the platform isolates a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Wasm,
    Js,
    Process,
    /// JavaScript compiled from its traces to a wasm module
    /// (`hearth-jit`), run by the wasm tier; never a runtime's own tier,
    /// only what the node serves a hot js function with.
    Compiled,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Wasm => "wasm",
            Tier::Js => "js",
            Tier::Process => "process",
            Tier::Compiled => "compiled",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Invocations a node ran, by the mode that ran them: the mode a console
/// shows for a function. `isolate` is the js tier (QuickJS), `compiled`
/// is js compiled to wasm from its traces, `process` is a sandboxed
/// process (Python, Node.js, and js that fell back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ByMode {
    pub wasm: u64,
    pub isolate: u64,
    pub compiled: u64,
    pub process: u64,
}

impl ByMode {
    /// The count of `tier`'s mode.
    pub fn of(&mut self, tier: Tier) -> &mut u64 {
        match tier {
            Tier::Wasm => &mut self.wasm,
            Tier::Js => &mut self.isolate,
            Tier::Compiled => &mut self.compiled,
            Tier::Process => &mut self.process,
        }
    }
}

/// Resource limits of one sandbox, fixed per version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Linear memory (wasm) or cgroup memory (process) one sandbox may use.
    pub memory_mib: u32,
    /// Wall-clock time one invocation may take, host calls included.
    pub timeout_ms: u64,
}

impl Limits {
    pub const DEFAULT_MEMORY_MIB: u32 = 64;
    pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize) << 20
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mib: Self::DEFAULT_MEMORY_MIB,
            timeout_ms: Self::DEFAULT_TIMEOUT_MS,
        }
    }
}

/// Everything about a function that a deploy fixes besides its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub runtime: Runtime,
    pub limits: Limits,
    /// Hosts outbound HTTP may reach, as `host` (any port) or `host:port`.
    /// Empty means no outbound network at all.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Environment the function sees (wasm: WASI env, next to the CGI vars).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Secrets of the tenant the function sees as environment variables:
    /// variable name → secret name. Only the names are kept here; the
    /// values are read (decrypted) when the version is prepared, so a
    /// rotated secret reaches the function without a new version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// Whether invocation works without a token.
    #[serde(default)]
    pub public: bool,
    /// How this function's invocations are recorded.
    #[serde(default)]
    pub record: RecordPolicy,
    /// Python: let pip build a package that has no wheel from its source
    /// distribution (the build runs the package's own code, in the
    /// install sandbox). Off, installs take wheels only.
    #[serde(default)]
    pub source_builds: bool,
    /// Python, Node.js and JavaScript: the function to call, as Lambda's
    /// handler setting writes it (`module.function`). `None`: the entry
    /// file's `handler`, `main` or `lambda_handler` (Python) or its
    /// `default`/`handler`/`main` export (JavaScript).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "app.handler"))]
    pub handler: Option<HandlerName>,
    /// A wasm module's request body streams to its stdin as the caller
    /// sends it, and its stdout to the caller as the module writes it,
    /// instead of both being whole (components always stream). Off, a
    /// response has its length and a failure is a clean error status.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

/// A function's handler setting, `module.function` as Lambda writes it:
/// `lambda_function.lambda_handler`, `app.handler`, `src/index.handler`,
/// `pkg.mod.main`. The module is a file of the bundle named without its
/// extension (`/` or `.` between directories); the function is what the
/// module defines or exports under that name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HandlerName {
    module: Vec<String>,
    function: String,
}

impl HandlerName {
    /// The module's path in the bundle, without an extension
    /// (`src/index` for `src/index.handler` and for `src.index.handler`).
    pub fn module_path(&self) -> String {
        self.module.join("/")
    }

    /// The function's name within its module.
    pub fn function(&self) -> &str {
        &self.function
    }
}

impl FromStr for HandlerName {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ValidationError::BadHandler(s.to_string());
        let (module, function) = s.rsplit_once('.').ok_or_else(bad)?;
        let ident = |w: &str, extra: &[u8]| {
            !w.is_empty()
                && !w.as_bytes()[0].is_ascii_digit()
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || extra.contains(&b))
        };
        // Module segments are file and directory names (`my-lib` is a
        // fine file name); the function is an identifier in both languages.
        let module: Vec<String> = module.split(['/', '.']).map(str::to_string).collect();
        let segment_ok = |m: &String| {
            !m.is_empty()
                && m.len() <= 128
                && m.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if s.len() > 256 || !module.iter().all(segment_ok) || !ident(function, b"$") {
            return Err(bad());
        }
        Ok(HandlerName {
            module,
            function: function.to_string(),
        })
    }
}

impl TryFrom<String> for HandlerName {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HandlerName> for String {
    fn from(h: HandlerName) -> String {
        h.to_string()
    }
}

impl fmt::Display for HandlerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.module.join("/"), self.function)
    }
}

/// A function's recording settings: how many invocations get a tape and
/// how long tapes are kept (`None`: the node's default retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RecordPolicy {
    /// Invocations recorded per million (1_000_000 = every one, 0 = none).
    pub sample_ppm: u32,
    /// Seconds to keep tapes of invocations that succeeded.
    #[serde(default)]
    pub keep_ok_s: Option<u64>,
    /// Seconds to keep tapes of invocations that failed.
    #[serde(default)]
    pub keep_errors_s: Option<u64>,
    /// Bytes one invocation's tape may hold (`None`: the node's budget,
    /// which is also the most a function may ask for).
    #[serde(default)]
    pub max_tape_bytes: Option<usize>,
}

impl RecordPolicy {
    pub const ALL: u32 = 1_000_000;
}

impl Default for RecordPolicy {
    fn default() -> Self {
        RecordPolicy {
            sample_ppm: Self::ALL,
            keep_ok_s: None,
            keep_errors_s: None,
            max_tape_bytes: None,
        }
    }
}

impl FunctionSpec {
    pub fn new(runtime: Runtime) -> Self {
        FunctionSpec {
            runtime,
            limits: Limits::default(),
            allowed_hosts: Vec::new(),
            env: BTreeMap::new(),
            secrets: BTreeMap::new(),
            public: false,
            record: RecordPolicy::default(),
            source_builds: false,
            handler: None,
            stream: false,
        }
    }

    /// Whether outbound HTTP to `host` on `port` is allowed by this spec.
    pub fn allows_host(&self, host: &str, port: u16) -> bool {
        host_allowed(&self.allowed_hosts, host, port)
    }
}

/// Whether an allow-list of `host` (any port) and `host:port` entries
/// names `host` on `port` (names compared without case).
pub fn host_allowed(allowed: &[String], host: &str, port: u16) -> bool {
    allowed
        .iter()
        .any(|allowed| match allowed.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => {
                h.eq_ignore_ascii_case(host) && p.parse::<u16>().ok() == Some(port)
            }
            _ => allowed.eq_ignore_ascii_case(host),
        })
}

/// One immutable deploy of a function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunctionVersion {
    pub tenant: String,
    pub name: String,
    /// 1, 2, 3… per function, never reused while the function exists.
    pub version: u32,
    /// Content hash (sha256, hex) of the code artifact.
    pub artifact: String,
    pub spec: FunctionSpec,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
}

fn validate_name(kind: &'static str, name: &str) -> Result<(), ValidationError> {
    let ok_len = !name.is_empty() && name.len() <= 64;
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    let ok_start = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric());
    if ok_len && ok_chars && ok_start {
        Ok(())
    } else {
        Err(ValidationError::BadName {
            kind,
            name: name.to_string(),
        })
    }
}

/// Function names: 1–64 of `a-z 0-9 - _`, starting with a letter or digit.
pub fn validate_function_name(name: &str) -> Result<(), ValidationError> {
    validate_name("function", name)
}

/// Alias names (`live`, `canary`): 1–32 of `a-z 0-9 - _`, starting with a
/// letter, so that `name@3` is always a version and `name@canary` an alias.
pub fn validate_alias_name(alias: &str) -> Result<(), ValidationError> {
    let ok = alias.len() <= 32
        && alias.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && alias
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ValidationError::BadAlias(alias.to_string()))
    }
}

/// Secret names, and the variables they are bound to: an environment
/// variable's name as every tier can read it: 1–128 of `A-Z a-z 0-9 _`,
/// not starting with a digit.
pub fn validate_env_name(kind: &'static str, name: &str) -> Result<(), ValidationError> {
    let ok = (1..=128).contains(&name.len())
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ValidationError::BadEnvName {
            kind,
            name: name.to_string(),
        })
    }
}

/// Tenant names follow the same rule as function names.
pub fn validate_tenant_name(name: &str) -> Result<(), ValidationError> {
    validate_name("tenant", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_names_start_with_a_letter() {
        for ok in ["live", "canary", "blue-2", "a", "stage_1"] {
            assert!(validate_alias_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "3",
            "2fast",
            "Live",
            "-x",
            "a.b",
            "a/b",
            &"a".repeat(33),
        ] {
            assert!(validate_alias_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runtime_is_inferred_from_extension() {
        assert_eq!(
            Runtime::infer_from_file_name("a/hello.WASM"),
            Some(Runtime::Wasm)
        );
        assert_eq!(Runtime::infer_from_file_name("x.wat"), Some(Runtime::Wasm));
        assert_eq!(Runtime::infer_from_file_name("h.py"), Some(Runtime::Python));
        assert_eq!(Runtime::infer_from_file_name("noext"), None);
    }

    #[test]
    fn allowed_hosts_match_host_or_host_and_port() {
        let mut spec = FunctionSpec::new(Runtime::Wasm);
        spec.allowed_hosts = vec!["api.example.com".into(), "127.0.0.1:8080".into()];
        assert!(spec.allows_host("api.example.com", 443));
        assert!(spec.allows_host("API.example.com", 80));
        assert!(spec.allows_host("127.0.0.1", 8080));
        assert!(!spec.allows_host("127.0.0.1", 8081));
        assert!(!spec.allows_host("evil.example.com", 443));
    }

    #[test]
    fn handlers_are_module_dot_function() {
        let h: HandlerName = "lambda_function.lambda_handler".parse().unwrap();
        assert_eq!(h.module_path(), "lambda_function");
        assert_eq!(h.function(), "lambda_handler");
        let h: HandlerName = "src/my-lib.index.handler".parse().unwrap();
        assert_eq!(h.module_path(), "src/my-lib/index");
        assert_eq!(h.to_string(), "src/my-lib/index.handler");
        for bad in [
            "handler",
            ".handler",
            "app.",
            "app.1st",
            "app.han-dler",
            "../app.handler",
            "/app.handler",
            "a//b.handler",
            "app.handler()",
        ] {
            assert!(bad.parse::<HandlerName>().is_err(), "{bad}");
        }
        // Stored in a spec as the string the user wrote.
        let mut spec = FunctionSpec::new(Runtime::Python);
        spec.handler = Some("app.main".parse().unwrap());
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["handler"], "app.main");
        assert_eq!(serde_json::from_value::<FunctionSpec>(json).unwrap(), spec);
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_function_name("hello-2").is_ok());
        assert!(validate_function_name("").is_err());
        assert!(validate_function_name("Hello").is_err());
        assert!(validate_function_name("-x").is_err());
        assert!(validate_function_name("a/b").is_err());
        assert!(validate_function_name(&"a".repeat(65)).is_err());
    }
}
