//! A local SMTP server of the test's own (`scripts/smtp-sink.py`, Debian's
//! python3-aiosmtpd): STARTTLS required with the given certificate, AUTH
//! required with the given user; each message it accepts kept as a file.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{repo_root, unique_name};

/// The SMTP server; stopped on drop.
#[derive(Debug)]
pub struct SmtpSink {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl SmtpSink {
    /// Starts it with the certificate and key files (PEM) and the one user
    /// it accepts.
    pub fn start(cert: &Path, key: &Path, user: &str, password: &str) -> Self {
        let out = std::env::temp_dir().join(unique_name("kshard-smtp"));
        let mut child = Command::new("/usr/bin/python3")
            .arg(repo_root().join("scripts/smtp-sink.py"))
            .args(["--cert", &cert.display().to_string(), "--key", &key.display().to_string()])
            .args(["--user", user, "--password", password, "--out", &out.display().to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting scripts/smtp-sink.py (scripts/install.sh installs python3-aiosmtpd): {e}")
            });
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let port = line
            .trim()
            .strip_prefix("PORT=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("scripts/smtp-sink.py did not say its port: {line:?}"));
        SmtpSink { child, port, out }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The messages accepted so far, in order, each with the envelope and
    /// whether the session was TLS (`X-Envelope-From`, `X-Envelope-To`,
    /// `X-Session-TLS`) before its headers.
    pub fn messages(&self) -> Vec<String> {
        let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.out)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name.strip_suffix(".eml")?.parse().ok()?, e.path()))
            })
            .collect();
        files.sort();
        files.iter().filter_map(|(_, p)| std::fs::read_to_string(p).ok()).collect()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.out);
    }
}
