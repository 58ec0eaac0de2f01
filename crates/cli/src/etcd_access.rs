//! How every command that talks to etcd reaches one that asks for TLS and a
//! user: `--etcd-ca-file`, `--etcd-cert-file`, `--etcd-key-file`,
//! `--etcd-user` and `--etcd-password` (best from `KSHARD_ETCD_PASSWORD`),
//! or the same keys under `cluster:` in `serve`'s file; flags win.

use std::path::PathBuf;

use anyhow::{Result, bail};
use kshard_runtime::keyspace::EtcdAccess;
use serde::Deserialize;

/// The flags.
#[derive(Clone, Default, clap::Args)]
pub(crate) struct EtcdAccessArgs {
    /// The CA (PEM) that signed etcd's certificate (with `https://` endpoints;
    /// default: the system's CAs).
    #[arg(long, env = "KSHARD_ETCD_CA_FILE")]
    pub(crate) etcd_ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for an etcd that verifies its clients.
    #[arg(long, env = "KSHARD_ETCD_CERT_FILE")]
    pub(crate) etcd_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "KSHARD_ETCD_KEY_FILE")]
    pub(crate) etcd_key_file: Option<PathBuf>,
    /// The etcd user to authenticate as.
    #[arg(long, env = "KSHARD_ETCD_USER")]
    pub(crate) etcd_user: Option<String>,
    /// Its password (prefer the environment variable to the flag).
    #[arg(long, env = "KSHARD_ETCD_PASSWORD", hide_env_values = true)]
    pub(crate) etcd_password: Option<String>,
}

impl std::fmt::Debug for EtcdAccessArgs {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccessArgs")
            .field("etcd_ca_file", &self.etcd_ca_file)
            .field("etcd_cert_file", &self.etcd_cert_file)
            .field("etcd_key_file", &self.etcd_key_file)
            .field("etcd_user", &self.etcd_user)
            .field("etcd_password", &self.etcd_password.as_ref().map(|_| "…"))
            .finish()
    }
}

/// The same keys in a configuration file's `cluster:`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EtcdAccessFile {
    pub(crate) etcd_ca_file: Option<PathBuf>,
    pub(crate) etcd_cert_file: Option<PathBuf>,
    pub(crate) etcd_key_file: Option<PathBuf>,
    pub(crate) etcd_user: Option<String>,
    pub(crate) etcd_password: Option<String>,
}

impl std::fmt::Debug for EtcdAccessFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccessFile").field("etcd_user", &self.etcd_user).finish_non_exhaustive()
    }
}

impl EtcdAccessArgs {
    /// The access these flags (over `file`) ask for, checked: a user needs
    /// its password and a password its user.
    pub(crate) fn access(&self, file: &EtcdAccessFile) -> Result<EtcdAccess> {
        let user = self.etcd_user.clone().or_else(|| file.etcd_user.clone());
        let password = self.etcd_password.clone().or_else(|| file.etcd_password.clone());
        let user = match (user, password) {
            (Some(user), Some(password)) if !user.is_empty() => Some((user, password)),
            (None, None) => None,
            (Some(_), None) => bail!("invalid etcd_user: it needs etcd_password (KSHARD_ETCD_PASSWORD)"),
            _ => bail!("invalid etcd_password: it needs etcd_user"),
        };
        Ok(EtcdAccess {
            ca_file: self.etcd_ca_file.clone().or_else(|| file.etcd_ca_file.clone()),
            cert_file: self.etcd_cert_file.clone().or_else(|| file.etcd_cert_file.clone()),
            key_file: self.etcd_key_file.clone().or_else(|| file.etcd_key_file.clone()),
            user,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_and_a_user_needs_its_password() {
        let file =
            EtcdAccessFile { etcd_user: Some("file".into()), etcd_password: Some("p".into()), ..Default::default() };
        let flags = EtcdAccessArgs { etcd_user: Some("flag".into()), ..Default::default() };
        assert_eq!(flags.access(&file).expect("valid").user, Some(("flag".into(), "p".into())));
        let half = EtcdAccessArgs { etcd_user: Some("u".into()), ..Default::default() };
        assert!(half.access(&EtcdAccessFile::default()).expect_err("no password").to_string().contains("etcd_user"));
        let text = format!("{:?}", EtcdAccessArgs { etcd_password: Some("s3cret".into()), ..Default::default() });
        assert!(!text.contains("s3cret"), "{text}");
    }
}
