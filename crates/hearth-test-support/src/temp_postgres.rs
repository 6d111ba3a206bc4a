//! A throwaway PostgreSQL server for tests: Debian's binaries, a fresh
//! cluster in a temporary directory, loopback on a free port, trust auth,
//! no fsync. Stopped and deleted when dropped.
//!
//! Run as root (as CI does), the server runs as the `postgres` user the
//! Debian package creates, since PostgreSQL refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running PostgreSQL that goes away on drop.
pub struct TempPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

pub(crate) fn find_bin() -> Result<PathBuf, String> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    found.pop().ok_or_else(|| {
        "PostgreSQL's server binaries are not in /usr/lib/postgresql/*/bin: \
         apt-get install postgresql (scripts/setup.sh does)"
            .to_string()
    })
}

impl TempPostgres {
    pub fn start() -> Result<TempPostgres, String> {
        let bin = find_bin()?;
        let as_postgres = effective_root();
        let dir = std::env::temp_dir().join(format!(
            "hearth-pg-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let pg = TempPostgres {
            dir,
            bin,
            port,
            as_postgres,
        };
        if as_postgres {
            pg.run(Command::new("chown").args(["postgres:", &pg.dir.to_string_lossy()]))?;
        }
        let data = pg.dir.join("data");
        pg.run(pg.tool("initdb").args([
            "-D",
            &data.to_string_lossy(),
            "-U",
            "hearth",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]))?;
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            pg.port,
            pg.dir.display()
        );
        pg.run(pg.tool("pg_ctl").args([
            "-D",
            &data.to_string_lossy(),
            "-l",
            &pg.dir.join("log").to_string_lossy(),
            "-o",
            &options,
            "-w",
            "start",
        ]))?;
        Ok(pg)
    }

    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, cmd: &mut Command) -> Result<(), String> {
        let out = cmd
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("{cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cmd:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> Result<String, String> {
        off_runtime(|| {
            let mut client = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
                .map_err(|e| e.to_string())?;
            client
                .batch_execute(&format!("CREATE DATABASE \"{name}\""))
                .map_err(|e| e.to_string())
        })?;
        Ok(self.url(name))
    }

    /// The number `sql` (one row, one integer column) gives on `database`:
    /// for tests to watch the cluster's shared state.
    pub fn count(&self, database: &str, sql: &str) -> Result<i64, String> {
        off_runtime(|| {
            let mut client = postgres::Client::connect(&self.url(database), postgres::NoTls)
                .map_err(|e| e.to_string())?;
            let row = client.query_one(sql, &[]).map_err(|e| e.to_string())?;
            Ok(row.get::<_, i64>(0))
        })
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://hearth@127.0.0.1:{}/{database}", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Runs `f` on a thread of its own: the `postgres` client blocks on a
/// runtime of its own, which must not start on an async test's thread.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("the PostgreSQL client panicked"))
}

fn effective_root() -> bool {
    // The effective uid, read without libc: /proc/self/status's Uid line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self.run(self.tool("pg_ctl").args([
            "-D",
            &data.to_string_lossy(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ]));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
