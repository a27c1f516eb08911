//! TLS to PostgreSQL, when the URL asks for it (`sslmode=require`).
//!
//! The server's certificate is always verified (stricter than libpq's
//! `require`, which only encrypts): against the web PKI roots, plus the
//! certificates in the file `PGSSLROOTCERT` names — libpq's variable — for
//! a database with a private CA.

use std::sync::Arc;

use rustls::RootCertStore;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector, with its roots loaded once.
pub(super) fn connector() -> Result<MakeRustlsConnect, String> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = std::env::var_os("PGSSLROOTCERT").filter(|p| !p.is_empty()) {
        let shown = std::path::Path::new(&path).display().to_string();
        let file = std::fs::File::open(&path)
            .map_err(|err| format!("cannot read PGSSLROOTCERT {shown}: {err}"))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(file)) {
            let cert = cert.map_err(|err| format!("PGSSLROOTCERT {shown}: {err}"))?;
            roots
                .add(cert)
                .map_err(|err| format!("PGSSLROOTCERT {shown}: {err}"))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!(
                "PGSSLROOTCERT {shown} holds no PEM certificate; point it at the CA that signed \\
                 the database's certificate"
            ));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS setup failed: {err}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
