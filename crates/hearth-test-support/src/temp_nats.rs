//! A throwaway NATS server with JetStream for tests: Debian's
//! `nats-server -js`, loopback on a free port, its store in a temporary
//! directory. Killed and deleted when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server -js` that goes away on drop.
pub struct TempNats {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl TempNats {
    pub fn start() -> Result<TempNats, String> {
        let dir = std::env::temp_dir().join(format!(
            "hearth-nats-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nats-server: {e} (apt-get install nats-server)"))?;
        let nats = TempNats { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("nats-server did not listen on {port} within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nats)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`, as `--broker-allow` names it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the server as a crash would: what it had stored stays in its
    /// directory for [`TempNats::restart`].
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TempNats {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
