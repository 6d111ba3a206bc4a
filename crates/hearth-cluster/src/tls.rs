//! TLS between a cluster's members: gateways forward to nodes over HTTPS,
//! each side proving it belongs to the cluster with a certificate signed
//! by the cluster's CA (mutual TLS).
//!
//! Every member holds the same three files (in Kubernetes, one Secret):
//! the CA's certificate, and a certificate and key it signed whose subject
//! alternative name is the members' name (`--tls-name`, default
//! `hearth-member`). A node's address is its pod's, which no certificate
//! can know in advance, so a gateway checks a node's certificate against
//! the CA and that name rather than the address it dialled; a node accepts
//! only clients whose certificate the CA signed.

use std::path::Path;
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;

/// The name members' certificates carry when the operator names none.
pub const DEFAULT_NAME: &str = "hearth-member";

/// Where a member's certificate, key and the cluster's CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    /// The name every member's certificate carries.
    pub name: String,
}

/// A member's TLS: how a node serves and how a gateway connects.
pub struct MemberTls {
    /// For a node's listener: client certificates required.
    pub server: Arc<rustls::ServerConfig>,
    /// For a gateway's connections to nodes.
    pub client: rustls::ClientConfig,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

impl MemberTls {
    pub fn load(files: &TlsFiles) -> Result<MemberTls, String> {
        let chain = certs(&files.cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .map_err(|e| format!("reading the private key {}: {e}", files.key.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in certs(&files.ca)? {
            roots
                .add(ca)
                .map_err(|e| format!("the CA in {}: {e}", files.ca.display()))?;
        }
        let roots = Arc::new(roots);
        let name = ServerName::try_from(files.name.clone())
            .map_err(|e| format!("--tls-name {:?}: {e}", files.name))?;

        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| e.to_string())?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(clients)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("{}: {e}", files.cert.display()))?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];

        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| e.to_string())?;
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(MembersName { inner, name }))
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("{}: {e}", files.cert.display()))?;
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(MemberTls {
            server: Arc::new(server),
            client,
        })
    }
}

/// Checks a node's certificate as webpki does, against the members' name
/// instead of the address dialled.
#[derive(Debug)]
struct MembersName {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for MembersName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
