//! A container's security context, applied to a local process as a
//! container runtime applies it: the capabilities the manifest keeps
//! (`setpriv` sets the bounding set; root gains exactly those at exec) and
//! its Localhost seccomp profile, which `scripts/seccomp-exec.py` loads with
//! libseccomp as runc does. The Kubernetes test starts node pods this way
//! and the hostile group tries the escapes under it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;
use serde_yaml::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a container's `securityContext` grants.
#[derive(Debug, Clone)]
pub struct PodSecurity {
    /// Capabilities kept (`CAP_` dropped, lower case: `sys_admin`).
    pub capabilities: Vec<String>,
    /// The Localhost seccomp profile, as a file of this repository.
    pub seccomp: PathBuf,
    /// `allowPrivilegeEscalation: false` sets no_new_privs.
    pub no_new_privs: bool,
}

impl PodSecurity {
    /// The node DaemonSet's container, as `deploy/kubernetes/base/node.yaml`
    /// writes it.
    pub fn of_node() -> PodSecurity {
        let text =
            std::fs::read_to_string(repo().join("deploy/kubernetes/base/node.yaml")).unwrap();
        let doc = Value::deserialize(serde_yaml::Deserializer::from_str(&text)).unwrap();
        Self::of_container(&doc["spec"]["template"]["spec"]["containers"][0])
    }

    /// A rendered container's. It must drop every capability and add back
    /// what it keeps, and name a Localhost profile this repository ships
    /// (`profiles/…` under the kubelet's seccomp root is
    /// `deploy/kubernetes/profiles/…` here).
    pub fn of_container(c: &Value) -> PodSecurity {
        let sc = &c["securityContext"];
        let caps = &sc["capabilities"];
        assert_eq!(
            caps["drop"].as_sequence().unwrap()[0],
            "ALL",
            "the container drops every capability first"
        );
        let capabilities = caps["add"]
            .as_sequence()
            .map(|s| {
                s.iter()
                    .map(|c| c.as_str().unwrap().to_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        let profile = &sc["seccompProfile"];
        assert_eq!(profile["type"], "Localhost", "{profile:?}");
        let local = profile["localhostProfile"].as_str().unwrap();
        let seccomp = repo()
            .join("deploy/kubernetes/profiles")
            .join(Path::new(local).file_name().expect("a profile's file name"));
        assert!(seccomp.is_file(), "{} is not shipped", seccomp.display());
        PodSecurity {
            capabilities,
            seccomp,
            no_new_privs: sc["allowPrivilegeEscalation"] == false,
        }
    }

    /// A command that runs `program` confined so.
    pub fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut bounding = String::from("-all");
        for c in &self.capabilities {
            bounding.push_str(",+");
            bounding.push_str(c);
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--bounding-set", &bounding, "--inh-caps", "-all", "--"])
            .arg("/usr/bin/python3")
            .arg(repo().join("scripts/seccomp-exec.py"));
        if self.no_new_privs {
            cmd.arg("--no-new-privs");
        }
        cmd.arg(&self.seccomp).arg("--").arg(program.as_ref());
        cmd
    }
}
