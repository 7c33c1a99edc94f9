//! A certificate authority for the tests of TLS clients and servers, made by rcgen.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A certificate authority and what it issued, as PEM files in a directory of their own.
pub struct Ca {
    /// The CA's own certificate.
    pub cert: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &'static str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, format!("bucketd test CA {name}"));
        let cert = params.self_signed(&key).unwrap();
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, cert.pem()).unwrap();
        Ca { cert: path, issuer: Issuer::new(params, key), dir: dir.to_owned() }
    }

    /// Issues a certificate for `names` and writes it and its key as `<file>.pem` and
    /// `<file>-key.pem`.
    pub fn issue(&self, names: &[&str], file: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, file);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) =
            (self.dir.join(format!("{file}.pem")), self.dir.join(format!("{file}-key.pem")));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}
