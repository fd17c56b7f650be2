//! TLS with rustls (the `ring` provider), the way libpq's `sslmode` says.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PostgresError;

/// How the connection uses TLS: libpq's `sslmode`, given as the URL's
/// `sslmode` parameter or with
/// [`with_ssl_mode`](crate::PostgresStoreBuilder::with_ssl_mode).
///
/// | mode | TLS | the server's certificate |
/// | --- | --- | --- |
/// | `disable` | never | - |
/// | `prefer` (the default, as in libpq) | when the server offers it | not checked |
/// | `require` | always | not checked: any certificate, self-signed included (the handshake's signatures are still checked, so the session is encrypted to the key the certificate names) |
/// | `verify-ca` | always | must chain to a trusted root |
/// | `verify-full` | always | must chain to a trusted root and name the host |
///
/// The trusted roots are the Mozilla roots of `webpki-roots`, or the PEM
/// file of the URL's `sslrootcert` parameter, or the store given to
/// [`with_root_certificates`](crate::PostgresStoreBuilder::with_root_certificates).
/// As with libpq, `prefer` and `require` protect against eavesdroppers, not
/// against a server that impersonates yours: use `verify-full` for that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, without checking its certificate.
    #[default]
    Prefer,
    /// TLS always, without checking the server's certificate.
    Require,
    /// TLS always; the certificate must chain to a trusted root.
    VerifyCa,
    /// TLS always; the certificate must chain to a trusted root and name
    /// the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The mode as libpq spells it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: it knows only whether TLS is wanted;
    /// the checks of the certificate are rustls's, configured here.
    pub(crate) fn driver_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = PostgresError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // `allow` would try without TLS first: nothing here needs it.
            other => {
                return Err(PostgresError::InvalidUrl {
                    reason: format!(
                        "sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                    ),
                });
            }
        })
    }
}

/// The rustls configuration for `mode`, or `None` for [`SslMode::Disable`].
/// `roots` is used by the verifying modes; `None` means the Mozilla roots.
pub(crate) fn client_config(
    mode: SslMode,
    roots: Option<RootCertStore>,
) -> Result<Option<ClientConfig>, PostgresError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(PostgresError::Tls)?;
    let roots = || {
        roots.unwrap_or_else(|| RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
    };
    let mut config = match mode {
        SslMode::Disable => return Ok(None),
        SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate { provider }))
            .with_no_client_auth(),
        SslMode::VerifyFull => builder
            .with_root_certificates(roots())
            .with_no_client_auth(),
        SslMode::VerifyCa => {
            let roots = roots();
            if roots.is_empty() {
                // Nothing can chain to no root: refuse every certificate the
                // way verify-full does (the webpki builder refuses to build
                // a verifier without roots).
                builder.with_root_certificates(roots).with_no_client_auth()
            } else {
                let inner = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| PostgresError::Tls(rustls::Error::General(e.to_string())))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName { inner }))
                    .with_no_client_auth()
            }
        }
    };
    // What PostgreSQL 17's direct TLS negotiation asks for; ignored by
    // earlier servers.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Some(config))
}

/// Accepts any certificate (`sslmode=require`), but still checks that the
/// server signed the handshake with the key of the certificate it sent.
#[derive(Debug)]
struct AnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain must reach a trusted root; the name in the
/// certificate is not compared with the host. webpki checks the chain
/// before the name, so a name mismatch is only ever reported for a chain
/// that verified.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
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

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Reads the PEM certificates of `sslrootcert`.
pub(crate) fn read_root_certificates(
    path: &std::path::Path,
) -> Result<RootCertStore, PostgresError> {
    use rustls::pki_types::pem::PemObject;

    let failed = |source| PostgresError::RootCertificates {
        path: path.to_owned(),
        source,
    };
    let pem = std::fs::read(path).map_err(failed)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| failed(std::io::Error::other(e.to_string())))?;
        roots
            .add(cert)
            .map_err(|e| failed(std::io::Error::other(e.to_string())))?;
    }
    if roots.is_empty() {
        return Err(failed(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no certificate in the file",
        )));
    }
    Ok(roots)
}

/// The TLS of a cancel request: the same as the connection's.
#[derive(Clone)]
pub(crate) enum CancelTls {
    Plain,
    Rustls(MakeRustlsConnect),
    /// A pool given by the application: its TLS is unknown, so no cancel
    /// request is sent (the connection is closed instead).
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_libpq_spells_them() {
        for mode in [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert_eq!(mode.as_str().parse::<SslMode>().unwrap(), mode);
        }
        assert!("allow".parse::<SslMode>().is_err());
        assert!("VERIFY-FULL".parse::<SslMode>().is_err());
    }

    #[test]
    fn every_mode_builds() {
        assert!(client_config(SslMode::Disable, None).unwrap().is_none());
        for mode in [
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert!(client_config(mode, None).unwrap().is_some());
            assert!(
                client_config(mode, Some(RootCertStore::empty()))
                    .unwrap()
                    .is_some()
            );
        }
    }
}
