//! TLS to PostgreSQL, configured as libpq is: `sslmode` and `sslrootcert`
//! (and `sslcert`/`sslkey` for a client certificate) in the store's URL.
//!
//! | `sslmode` | encrypted | server checked |
//! |---|---|---|
//! | `disable` | no | — |
//! | `require` | yes | no (as libpq: unless `sslrootcert` is given, then as `verify-ca`) |
//! | `verify-ca` | yes | its chain, against the roots |
//! | `verify-full` | yes | its chain, and that it is the host the URL names |
//!
//! Unlike libpq (whose default, `prefer`, falls back to plain text), a URL
//! that names no mode gets `verify-full` unless its host is this machine
//! (loopback or a Unix socket), where it gets `disable`: a store across a
//! network is the cluster's credentials and every tenant's code. The roots
//! are `sslrootcert`'s PEM file, or the system's (`sslrootcert=system`,
//! also the default). `prefer` and `allow` are refused: a mode that falls
//! back to plain text at a network attacker's word is no mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::StoreError;

/// How the store's connections are secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Require,
    VerifyCa,
    VerifyFull,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Disable => "disable",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        })
    }
}

/// A failed connection as the operator needs it: tokio-postgres says only
/// "error performing TLS handshake", and the why is in its sources.
pub fn connect_error(e: tokio_postgres::Error, mode: Mode) -> StoreError {
    if e.to_string() != "error performing TLS handshake" {
        return e.into();
    }
    let mut why = String::new();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        why.push_str(": ");
        why.push_str(&s.to_string());
        source = s.source();
    }
    StoreError::StoreTls(format!(
        "the TLS handshake with the store failed{why} (sslmode={mode}): name the CA that signed \
         its certificate with sslrootcert=PATH, and the server by a name its certificate holds"
    ))
}

impl Mode {
    fn parse(value: &str) -> Result<Mode, StoreError> {
        Ok(match value {
            "disable" => Mode::Disable,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            "prefer" | "allow" => {
                return Err(bad(format!(
                    "sslmode={value} falls back to plain text whenever the network says so; \
                     choose verify-full (with sslrootcert=CA.pem for a private CA), or disable \
                     for a server on a network you trust"
                )));
            }
            other => {
                return Err(bad(format!(
                    "sslmode={other:?} is not one of disable, require, verify-ca, verify-full"
                )));
            }
        })
    }
}

/// A store URL taken apart: what tokio-postgres connects with, and how.
pub struct Connect {
    pub config: tokio_postgres::Config,
    pub mode: Mode,
    pub tls: MakeRustlsConnect,
}

impl std::fmt::Debug for Connect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connect").field("mode", &self.mode).finish()
    }
}

/// The libpq TLS settings tokio-postgres does not read.
#[derive(Debug, Default)]
struct TlsParams {
    mode: Option<String>,
    root_cert: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// Parses `url` (`postgres://…?sslmode=…` or `host=… sslmode=…`).
pub fn parse(url: &str) -> Result<Connect, StoreError> {
    let (rest, params) = split_tls_params(url)?;
    let mut config: tokio_postgres::Config = rest.parse()?;
    let local = config.get_hosts().iter().all(is_local);
    let mode = match &params.mode {
        Some(m) => Mode::parse(m)?,
        None if local => Mode::Disable,
        None => Mode::VerifyFull,
    };
    // libpq: `require` with a root certificate named checks the chain.
    let mode = match (mode, &params.root_cert) {
        (Mode::Require, Some(_)) => Mode::VerifyCa,
        (m, _) => m,
    };
    config.ssl_mode(if mode == Mode::Disable {
        SslMode::Disable
    } else {
        SslMode::Require
    });
    let tls = MakeRustlsConnect::new(client_config(mode, &params)?);
    Ok(Connect { config, mode, tls })
}

fn is_local(host: &Host) -> bool {
    match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            let name = name.trim_start_matches('[').trim_end_matches(']');
            name == "localhost"
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    }
}

fn bad(why: String) -> StoreError {
    StoreError::StoreUrl(why)
}

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of `url`,
/// in either of libpq's forms; the rest is for tokio-postgres.
fn split_tls_params(url: &str) -> Result<(String, TlsParams), StoreError> {
    let mut params = TlsParams::default();
    let mut take = |key: &str, value: &str| -> bool {
        let value = value.to_string();
        match key {
            "sslmode" => params.mode = Some(value),
            "sslrootcert" => params.root_cert = Some(value),
            "sslcert" => params.cert = Some(value.into()),
            "sslkey" => params.key = Some(value.into()),
            _ => return false,
        }
        true
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v)?;
            if !take(k, &v) {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, params));
    }
    // key=value form; values with spaces are quoted in libpq, which
    // paths here are not expected to need.
    let mut kept = Vec::new();
    for token in url.split_whitespace() {
        match token.split_once('=') {
            Some((k, v)) if take(k, v.trim_matches('\'')) => {}
            _ => kept.push(token),
        }
    }
    Ok((kept.join(" "), params))
}

fn percent_decode(s: &str) -> Result<String, StoreError> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| bad(format!("the store URL's {s:?} is not UTF-8 once decoded")))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(mode: Mode, params: &TlsParams) -> Result<rustls::ClientConfig, StoreError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        // Disable: never used to connect (tokio-postgres sends no TLS
        // request), but a connector is built all the same.
        Mode::Disable | Mode::Require => Arc::new(Lenient {
            chain: None,
            provider: provider(),
        }),
        Mode::VerifyCa | Mode::VerifyFull => {
            let roots = Arc::new(roots(params.root_cert.as_deref())?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| bad(format!("TLS roots: {e}")))?;
            if mode == Mode::VerifyCa {
                Arc::new(Lenient {
                    chain: Some(webpki),
                    provider: provider(),
                })
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&params.cert, &params.key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| bad(format!("sslkey {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad(format!("sslcert/sslkey: {e}")))
        }
        _ => Err(bad(
            "sslcert and sslkey come together: a client certificate and its key".into(),
        )),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(bad(format!("{} holds no PEM certificate", path.display())));
    }
    Ok(certs)
}

/// `sslrootcert`'s certificates, or the system's (`system` or none named).
fn roots(root_cert: Option<&str>) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    match root_cert {
        None | Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(bad(
                    "this machine has no system CA certificates to check the store's server \
                     with: name its CA with sslrootcert=/path/to/ca.pem"
                        .into(),
                ));
            }
        }
        Some(path) => {
            for cert in certificates(Path::new(path))? {
                store
                    .add(cert)
                    .map_err(|e| bad(format!("sslrootcert {path}: {e}")))?;
            }
        }
    }
    Ok(store)
}

/// `verify-ca` and `require`: the server's name is not checked, and
/// under `require` (no `chain`) neither is its chain. The handshake's
/// signatures always are, so the key the certificate names is the one the
/// server holds.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with each of its sources, as the daemon logs it.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            out.push_str(": ");
            out.push_str(&s.to_string());
            source = s.source();
        }
        out
    }

    #[test]
    fn a_url_without_a_mode_is_verified_unless_its_server_is_this_machine() {
        for (url, mode) in [
            ("postgres://h@db.example.com/hearth", Mode::VerifyFull),
            ("postgres://h@10.0.0.5:5432/hearth", Mode::VerifyFull),
            ("postgres://h@127.0.0.1:5432/hearth", Mode::Disable),
            ("postgres://h@localhost/hearth", Mode::Disable),
            ("postgres://h@[::1]:5432/hearth", Mode::Disable),
            ("host=/run/postgresql user=h dbname=hearth", Mode::Disable),
            (
                "postgres://h@db.example.com/hearth?sslmode=disable",
                Mode::Disable,
            ),
            ("postgres://h@db/hearth?sslmode=verify-ca", Mode::VerifyCa),
            ("host=db user=h sslmode=require", Mode::Require),
        ] {
            assert_eq!(parse(url).unwrap().mode, mode, "{url}");
        }
    }

    #[test]
    fn the_tls_settings_are_taken_out_and_the_rest_kept() {
        let (rest, p) = split_tls_params(
            "postgres://u:p@db:5432/x?application_name=hearth&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/x?application_name=hearth");
        assert_eq!(p.mode.as_deref(), Some("verify-full"));
        assert_eq!(p.root_cert.as_deref(), Some("/etc/ca.pem"));
        let (rest, p) =
            split_tls_params("host=db user=u sslmode=require sslcert=/c sslkey=/k").unwrap();
        assert_eq!(rest, "host=db user=u");
        assert_eq!((p.cert, p.key), (Some("/c".into()), Some("/k".into())));
    }

    /// Against a real server that serves TLS only, its certificate for
    /// `localhost` from a CA of its own: each mode checks what it says.
    #[tokio::test]
    async fn each_mode_checks_the_server_as_it_says_against_a_tls_only_postgres() {
        hearth_test_support::require!(Postgres);
        let pg = hearth_test_support::TempPostgres::start_tls().unwrap();
        pg.create_database("tls").unwrap();
        let (port, ca) = (pg.port(), pg.ca().display().to_string());
        let url = |host: &str, query: &str| format!("postgres://hearth@{host}:{port}/tls{query}");
        let open = async |u: String| {
            crate::PgStore::open(&u)
                .await
                .map(|s| s.tls_mode)
                .map_err(|e| chain(&e))
        };

        let full = url(
            "localhost",
            &format!("?sslmode=verify-full&sslrootcert={ca}"),
        );
        let store = crate::PgStore::open(&full).await.unwrap();
        store.create_tenant("acme").await.unwrap();
        let ssl: bool = store
            .with(async |c| {
                let row = c
                    .query_one(
                        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                        &[],
                    )
                    .await?;
                Ok(row.get(0))
            })
            .await
            .unwrap();
        assert!(ssl, "the store's own connection is encrypted");

        // The certificate does not name 127.0.0.1: verify-full refuses,
        // verify-ca (the chain only) accepts.
        let e = open(url(
            "127.0.0.1",
            &format!("?sslmode=verify-full&sslrootcert={ca}"),
        ))
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("not valid for name"), "{e}");
        let ca_only = url("127.0.0.1", &format!("?sslmode=verify-ca&sslrootcert={ca}"));
        assert_eq!(open(ca_only).await.unwrap(), Mode::VerifyCa);
        // A CA this machine does not trust: refused.
        let e = open(url("localhost", "?sslmode=verify-full"))
            .await
            .unwrap_err();
        assert!(
            e.contains("UnknownIssuer") || e.contains("unknown issuer"),
            "{e}"
        );
        // require: encrypted, the server unchecked.
        assert_eq!(
            open(url("127.0.0.1", "?sslmode=require")).await.unwrap(),
            Mode::Require
        );
        // Plain text (loopback's default): the server refuses it.
        let e = open(url("127.0.0.1", "")).await.unwrap_err();
        assert!(e.contains("no encryption"), "{e}");
    }

    #[test]
    fn modes_that_fall_back_to_plain_text_and_broken_settings_are_refused_naming_the_fix() {
        let e = parse("postgres://h@db/x?sslmode=prefer")
            .unwrap_err()
            .to_string();
        assert!(e.contains("verify-full") && e.contains("plain text"), "{e}");
        let e = parse("postgres://h@db/x?sslmode=verify")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not one of"), "{e}");
        let e = parse("postgres://h@db/x?sslmode=verify-full&sslrootcert=/no/such.pem")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/no/such.pem"), "{e}");
        let e = parse("postgres://h@db/x?sslmode=require&sslcert=/c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sslkey"), "{e}");
    }
}
