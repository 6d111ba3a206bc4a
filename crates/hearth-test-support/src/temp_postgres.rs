//! A throwaway PostgreSQL server for tests: Debian's binaries, a fresh
//! cluster in a temporary directory, loopback on a free port, trust auth,
//! no fsync. Stopped and deleted when dropped. [`TempPostgres::start_tls`]
//! serves TLS only, with a certificate from a CA of its own.
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
    /// The server's options, for starting it again.
    options: String,
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
        TempPostgres::start_with(false)
    }

    /// A server that accepts TCP connections over TLS only (`hostssl` in
    /// its pg_hba.conf; plain text is refused), its certificate for
    /// `localhost` alone (not `127.0.0.1`), signed by the CA at
    /// [`TempPostgres::ca`]. Needs `openssl`.
    pub fn start_tls() -> Result<TempPostgres, String> {
        TempPostgres::start_with(true)
    }

    fn start_with(tls: bool) -> Result<TempPostgres, String> {
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
        let mut pg = TempPostgres {
            dir,
            bin,
            port,
            as_postgres,
            options: String::new(),
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
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            pg.port,
            pg.dir.display()
        );
        if tls {
            pg.make_certificates()?;
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
            )
            .map_err(|e| e.to_string())?;
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                pg.dir.display()
            ));
        }
        pg.options = options;
        pg.start_again()?;
        Ok(pg)
    }

    /// Stops the server as a crash would (`immediate`: every connection
    /// drops, nothing is flushed), as its clients see a failover begin.
    pub fn stop(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        self.run(self.tool("pg_ctl").args([
            "-D",
            &data.to_string_lossy(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ]))
    }

    /// Starts the server (again, after [`TempPostgres::stop`]) at the
    /// same address, on the same data.
    pub fn start_again(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        self.run(self.tool("pg_ctl").args([
            "-D",
            &data.to_string_lossy(),
            "-l",
            &self.dir.join("log").to_string_lossy(),
            "-o",
            &self.options,
            "-w",
            "start",
        ]))
    }

    /// A CA, and a certificate for `localhost` it signed with its key,
    /// readable by the server only.
    fn make_certificates(&self) -> Result<(), String> {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        self.run(
            Command::new("openssl")
                .args(["req", "-x509"])
                .args(ec)
                .args([
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=hearth test CA",
                ]),
        )?;
        self.run(Command::new("openssl").arg("req").args(ec).args([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ]))?;
        std::fs::write(self.dir.join("san.ext"), "subjectAltName=DNS:localhost\n")
            .map_err(|e| e.to_string())?;
        self.run(Command::new("openssl").args([
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]))?;
        if self.as_postgres {
            self.run(Command::new("chown").args(["postgres:", "server.key", "server.crt"]))?;
        }
        self.run(Command::new("chmod").args(["600", "server.key"]))
    }

    /// The CA that signed a [`TempPostgres::start_tls`] server's
    /// certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
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
            let mut client =
                postgres::Client::connect(&self.socket_url("postgres"), postgres::NoTls)
                    .map_err(|e| e.to_string())?;
            client
                .batch_execute(&format!("CREATE DATABASE \"{name}\""))
                .map_err(|e| e.to_string())
        })?;
        Ok(self.url(name))
    }

    /// Runs `sql` on `database` as `user` (the superuser `hearth`, or a
    /// role a test made): Err with the server's message if it refuses.
    pub fn execute_as(&self, database: &str, user: &str, sql: &str) -> Result<(), String> {
        off_runtime(|| {
            let url = self.socket_url_as(database, user);
            let mut client =
                postgres::Client::connect(&url, postgres::NoTls).map_err(|e| e.to_string())?;
            client
                .batch_execute(sql)
                .map_err(|e| match e.as_db_error() {
                    Some(db) => db.message().to_string(),
                    None => e.to_string(),
                })
        })
    }

    /// The number `sql` (one row, one integer column) gives on `database`:
    /// for tests to watch the cluster's shared state.
    pub fn count(&self, database: &str, sql: &str) -> Result<i64, String> {
        off_runtime(|| {
            let mut client = postgres::Client::connect(&self.socket_url(database), postgres::NoTls)
                .map_err(|e| e.to_string())?;
            let row = client.query_one(sql, &[]).map_err(|e| e.to_string())?;
            Ok(row.get::<_, i64>(0))
        })
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://hearth@127.0.0.1:{}/{database}", self.port)
    }

    /// `database` over the server's Unix socket (no TLS needed there), as
    /// the superuser.
    fn socket_url(&self, database: &str) -> String {
        self.socket_url_as(database, "hearth")
    }

    /// `database` over the server's Unix socket, as `user`.
    fn socket_url_as(&self, database: &str, user: &str) -> String {
        format!(
            "host={} port={} user={user} dbname={database}",
            self.dir.display(),
            self.port
        )
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
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
