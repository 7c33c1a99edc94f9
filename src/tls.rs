//! TLS for both listeners (HTTP and raw TCP line protocol): the server's certificate chain and
//! key in PEM files, the lowest protocol version, and optionally the CAs whose client
//! certificates every connection must present (mutual TLS).
//!
//! The files are read again when they change ([`Tls::watch`] compares their bytes every
//! reload interval): new handshakes use what was read last, connections already open keep the
//! configuration they began with, so a renewed certificate needs no restart and drops nothing.
//! A change that does not load (a key that does not match the certificate, a file half
//! written) is logged and counted, and the configuration before it stays in use.
//!
//! A handshake runs on the connection's own task, within a timeout, so a client that is slow
//! or silent, speaks plain text, or presents a certificate nobody trusts holds only its own
//! connection slot until the timeout and never the accept loop.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::metrics::{TLS_HANDSHAKES, TLS_RELOADS};

/// The lowest TLS version a client may speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MinVersion {
    #[value(name = "1.2")]
    Tls12,
    #[value(name = "1.3")]
    Tls13,
}

/// What the TLS flags name.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// The certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The private key of the leaf certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM); when set, every client must present a certificate one of them
    /// issued.
    pub client_ca: Option<PathBuf>,
    pub min_version: MinVersion,
    /// From a connection accepted to its handshake done.
    pub handshake_timeout: Duration,
    /// How often the files are compared with what was loaded.
    pub reload_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS {what} {}: {source}", path.display())]
    Read { what: &'static str, path: PathBuf, source: io::Error },
    #[error("the TLS {what} file {} holds no {what} in PEM", path.display())]
    Empty { what: &'static str, path: PathBuf },
    #[error("the TLS {what} file {} is not valid PEM: {detail}", path.display())]
    Pem { what: &'static str, path: PathBuf, detail: String },
    #[error("the TLS certificate and key cannot serve: {0}")]
    Config(#[from] rustls::Error),
    #[error("the client CA file {} cannot verify clients: {detail}", path.display())]
    ClientCa { path: PathBuf, detail: String },
}

/// Which listener a connection came to, for the handshake metric and logs.
#[derive(Clone, Copy, Debug)]
pub enum Listener {
    Http,
    Tcp,
}

impl Listener {
    fn label(self) -> &'static str {
        match self {
            Listener::Http => "http",
            Listener::Tcp => "tcp",
        }
    }
}

/// The files' bytes as last loaded: what a change is told by.
#[derive(Clone, PartialEq, Eq)]
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

/// The configurations in use, one per listener (HTTP offers HTTP/2 and HTTP/1.1 by ALPN).
struct Loaded {
    http: Arc<ServerConfig>,
    tcp: Arc<ServerConfig>,
}

/// The listeners' TLS: the configuration in use, and what it was loaded from.
pub struct Tls {
    settings: TlsSettings,
    loaded: RwLock<Arc<Loaded>>,
    files: Mutex<Files>,
}

impl Tls {
    /// Loads the files named by `settings`; at start-up, so that a bad file stops the server.
    pub fn load(settings: TlsSettings) -> Result<Arc<Tls>, TlsError> {
        let files = read_files(&settings)?;
        let loaded = configure(&settings, &files)?;
        Ok(Arc::new(Tls {
            settings,
            loaded: RwLock::new(Arc::new(loaded)),
            files: Mutex::new(files),
        }))
    }

    /// Reads the files again and, when their bytes changed, makes what they hold the
    /// configuration of new handshakes. `Ok(true)`: a new configuration is in use.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let files = read_files(&self.settings)?;
        if *self.files.lock().unwrap_or_else(|p| p.into_inner()) == files {
            return Ok(false);
        }
        let loaded = configure(&self.settings, &files)?;
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
        *self.files.lock().unwrap_or_else(|p| p.into_inner()) = files;
        Ok(true)
    }

    /// Looks for changed files every reload interval until `shutdown`.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.settings.reload_interval) => {}
            }
            let tls = self.clone();
            // Reading files blocks; a slow disk must not hold a runtime thread.
            let reloaded = tokio::task::spawn_blocking(move || tls.reload_if_changed()).await;
            match reloaded {
                Ok(Ok(false)) => {}
                Ok(Ok(true)) => {
                    metrics::counter!(TLS_RELOADS, "result" => "loaded").increment(1);
                    tracing::info!(cert = %self.settings.cert.display(), "TLS files changed: new connections use them");
                }
                Ok(Err(e)) => {
                    metrics::counter!(TLS_RELOADS, "result" => "failed").increment(1);
                    tracing::warn!(error = %e, "TLS files changed but do not load: the configuration before stays in use");
                }
                Err(e) => tracing::error!(error = %e, "TLS reload task failed"),
            }
        }
    }

    /// The handshake of a connection accepted on `listener`, within the handshake timeout.
    /// `None` when it fails or times out (counted and logged at debug level, as the client,
    /// not the server, is at fault), or when `shutdown` comes first.
    pub async fn accept<S>(
        &self,
        stream: S,
        listener: Listener,
        shutdown: &CancellationToken,
    ) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        tokio::select! {
            _ = shutdown.cancelled() => None,
            done = self.handshake(stream, listener) => done,
        }
    }

    async fn handshake<S>(&self, stream: S, listener: Listener) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner()).clone();
        let config = match listener {
            Listener::Http => loaded.http.clone(),
            Listener::Tcp => loaded.tcp.clone(),
        };
        let handshake = TlsAcceptor::from(config).accept(stream);
        let label = listener.label();
        match tokio::time::timeout(self.settings.handshake_timeout, handshake).await {
            Ok(Ok(stream)) => {
                metrics::counter!(TLS_HANDSHAKES, "listener" => label, "result" => "ok")
                    .increment(1);
                Some(stream)
            }
            Ok(Err(e)) => {
                metrics::counter!(TLS_HANDSHAKES, "listener" => label, "result" => "failed")
                    .increment(1);
                tracing::debug!(listener = label, error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                metrics::counter!(TLS_HANDSHAKES, "listener" => label, "result" => "timeout")
                    .increment(1);
                tracing::debug!(listener = label, "TLS handshake timed out");
                None
            }
        }
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { what, path: path.to_owned(), source })
}

fn read_files(settings: &TlsSettings) -> Result<Files, TlsError> {
    Ok(Files {
        cert: read("certificate", &settings.cert)?,
        key: read("key", &settings.key)?,
        client_ca: settings.client_ca.as_deref().map(|p| read("client CA", p)).transpose()?,
    })
}

fn certificates(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { what, path: path.to_owned(), detail: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Empty { what, path: path.to_owned() });
    }
    Ok(certs)
}

fn configure(settings: &TlsSettings, files: &Files) -> Result<Loaded, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("certificate", &settings.cert, &files.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            TlsError::Empty { what: "key", path: settings.key.clone() }
        }
        e => TlsError::Pem { what: "key", path: settings.key.clone(), detail: e.to_string() },
    })?;
    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(versions)?;
    let builder = match (&settings.client_ca, &files.client_ca) {
        (Some(path), Some(pem)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates("client CA", path, pem)? {
                roots.add(cert).map_err(|e| TlsError::ClientCa {
                    path: path.clone(),
                    detail: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::ClientCa { path: path.clone(), detail: e.to_string() })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let tcp = builder.with_single_cert(chain, key)?;
    let mut http = tcp.clone();
    http.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Loaded { http: Arc::new(http), tcp: Arc::new(tcp) })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Issued {
        cert: String,
        key: String,
    }

    fn issue(name: &str) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        Issued { cert: cert.pem(), key: key.serialize_pem() }
    }

    fn settings(dir: &Path) -> TlsSettings {
        TlsSettings {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            client_ca: None,
            min_version: MinVersion::Tls12,
            handshake_timeout: Duration::from_secs(10),
            reload_interval: Duration::from_secs(10),
        }
    }

    fn write(dir: &Path, issued: &Issued) {
        std::fs::write(dir.join("cert.pem"), &issued.cert).unwrap();
        std::fs::write(dir.join("key.pem"), &issued.key).unwrap();
    }

    #[test]
    fn files_load_and_reload_only_when_they_change_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (issue("a.test"), issue("b.test"));
        write(dir.path(), &a);
        let tls = Tls::load(settings(dir.path())).unwrap();
        assert!(!tls.reload_if_changed().unwrap(), "nothing changed");

        // A key that is not the certificate's: refused, and the configuration stays.
        std::fs::write(dir.path().join("cert.pem"), &b.cert).unwrap();
        let before = tls.loaded.read().unwrap().clone();
        let err = tls.reload_if_changed().unwrap_err();
        assert!(matches!(err, TlsError::Config(_)), "{err}");
        assert!(Arc::ptr_eq(&before, &tls.loaded.read().unwrap()));

        // Both files renewed: loaded.
        std::fs::write(dir.path().join("key.pem"), &b.key).unwrap();
        assert!(tls.reload_if_changed().unwrap());
        assert!(!Arc::ptr_eq(&before, &tls.loaded.read().unwrap()));
        assert!(!tls.reload_if_changed().unwrap());
    }

    #[test]
    fn bad_files_say_which_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let a = issue("a.test");
        let s = settings(dir.path());
        let err = Tls::load(s.clone()).err().unwrap().to_string();
        assert!(
            err.contains("cannot read the TLS certificate") && err.contains("cert.pem"),
            "{err}"
        );

        std::fs::write(&s.cert, "not pem").unwrap();
        std::fs::write(&s.key, &a.key).unwrap();
        let err = Tls::load(s.clone()).err().unwrap().to_string();
        assert!(err.contains("holds no certificate"), "{err}");

        std::fs::write(&s.cert, &a.cert).unwrap();
        std::fs::write(&s.key, &a.cert).unwrap();
        let err = Tls::load(s.clone()).err().unwrap().to_string();
        assert!(err.contains("holds no key"), "{err}");

        std::fs::write(&s.key, &a.key).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "").unwrap();
        let err = Tls::load(TlsSettings { client_ca: Some(ca.clone()), ..s.clone() })
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("client CA") && err.contains("ca.pem"), "{err}");

        std::fs::write(&ca, &a.cert).unwrap();
        Tls::load(TlsSettings { client_ca: Some(ca), ..s }).unwrap();
    }
}
