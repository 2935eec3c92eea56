//! Throwaway TLS material for end-to-end tests, made with the system `openssl` CLI (OpenSSL 3)
//! in a fresh temp directory: a CA, a server certificate for `localhost` (subjectAltName
//! `DNS:localhost`, `IP:127.0.0.1`) and a client certificate signed by it, and a second,
//! unrelated CA with a client certificate of its own (for "wrong CA" cases).
//!
//! Every certificate is X.509 v3 with the extensions rustls insists on; keys are P-256 in
//! PKCS#8 PEM. The directory is removed when the [`TestCerts`] is dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};

use crate::scratch::scratch_dir;

/// The server name in the server certificate.
pub const SERVER_NAME: &str = "localhost";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A certificate and its private key, as files and PEM text.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// Everything a TLS test needs; see the module doc.
#[derive(Debug)]
pub struct TestCerts {
    dir: PathBuf,
    /// The CA that signed `server` and `client`.
    pub ca: CertPair,
    /// The agent's certificate, for `localhost` and 127.0.0.1.
    pub server: CertPair,
    /// A client certificate signed by `ca` (mTLS).
    pub client: CertPair,
    /// A CA that signed nothing the agent trusts.
    pub other_ca: CertPair,
    /// A client certificate signed by `other_ca`.
    pub other_client: CertPair,
}

impl TestCerts {
    /// Generates the whole set in a new temp directory.
    pub fn generate() -> anyhow::Result<TestCerts> {
        let dir = scratch_dir("leasehold-certs")?;
        let made = (|| {
            let ca = make_ca(&dir, "ca", "Leasehold Test CA")?;
            let other_ca = make_ca(&dir, "other-ca", "Unrelated Test CA")?;
            let server = make_leaf(
                &dir,
                "server",
                SERVER_NAME,
                &ca,
                "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
            )?;
            let client_ext = "subjectAltName=DNS:leasehold-client\nbasicConstraints=critical,CA:FALSE\n\
                 keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n";
            let client = make_leaf(&dir, "client", "leasehold-client", &ca, client_ext)?;
            let other_client = make_leaf(
                &dir,
                "other-client",
                "leasehold-client",
                &other_ca,
                client_ext,
            )?;
            Ok::<_, anyhow::Error>((ca, server, client, other_ca, other_client))
        })();
        match made {
            Ok((ca, server, client, other_ca, other_client)) => Ok(TestCerts {
                dir,
                ca,
                server,
                client,
                other_ca,
                other_client,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .context("running openssl (is the openssl CLI installed?)")?;
    if !output.status.success() {
        bail!(
            "openssl {} failed with {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

fn pair(dir: &Path, name: &str) -> anyhow::Result<CertPair> {
    let cert_path = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}-key.pem"));
    let cert_pem =
        std::fs::read(&cert_path).with_context(|| format!("reading {}", cert_path.display()))?;
    let key_pem =
        std::fs::read(&key_path).with_context(|| format!("reading {}", key_path.display()))?;
    Ok(CertPair {
        cert_path,
        key_path,
        cert_pem,
        key_pem,
    })
}

fn make_ca(dir: &Path, name: &str, cn: &str) -> anyhow::Result<CertPair> {
    let key = format!("{name}-key.pem");
    let cert = format!("{name}.pem");
    let subj = format!("/CN={cn}");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "3",
            "-subj",
            &subj,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )?;
    pair(dir, name)
}

fn make_leaf(
    dir: &Path,
    name: &str,
    cn: &str,
    ca: &CertPair,
    extensions: &str,
) -> anyhow::Result<CertPair> {
    let key = format!("{name}-key.pem");
    let csr = format!("{name}.csr");
    let cert = format!("{name}.pem");
    let ext = format!("{name}.ext");
    let subj = format!("/CN={cn}");
    std::fs::write(dir.join(&ext), extensions).with_context(|| format!("writing {ext}"))?;
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subj,
        ],
    )?;
    let ca_cert = ca.cert_path.to_string_lossy().into_owned();
    let ca_key = ca.key_path.to_string_lossy().into_owned();
    let serial = format!(
        "0x{:x}{:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-set_serial",
            &serial,
            "-days",
            "3",
            "-out",
            &cert,
            "-extfile",
            &ext,
        ],
    )?;
    pair(dir, name)
}
