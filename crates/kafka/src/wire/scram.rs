//! SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the client's
//! side, as Kafka speaks it: no channel binding (`n,,`), no extensions. Pure:
//! the nonce is given, the messages go in and out as strings; the crypto is
//! OpenSSL's (the library librdkafka already links).

use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// SHA-256 or SHA-512.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn digest(self) -> MessageDigest {
        match self {
            ScramHash::Sha256 => MessageDigest::sha256(),
            ScramHash::Sha512 => MessageDigest::sha512(),
        }
    }
}

/// Why a SCRAM exchange failed on the client's side.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ScramError {
    #[error("the server's first message is malformed: {0}")]
    ServerFirst(&'static str),
    #[error("the server's nonce does not extend the client's")]
    Nonce,
    #[error("the server refused: {0}")]
    Refused(String),
    #[error("the server's signature is wrong (not the broker the password belongs to)")]
    ServerSignature,
    #[error("the server's final message is malformed")]
    ServerFinal,
    #[error("crypto: {0}")]
    Crypto(String),
}

/// One exchange: client-first, then client-final from the server's first,
/// then a check of the server's final.
#[derive(Debug)]
pub(crate) struct Scram {
    hash: ScramHash,
    password: String,
    nonce: String,
    client_first_bare: String,
    /// After [`Scram::client_final`]: the signature the server must send.
    expected_server_signature: Option<Vec<u8>>,
}

impl Scram {
    /// An exchange for `user` with a client nonce (printable, no comma).
    pub(crate) fn new(hash: ScramHash, user: &str, password: &str, nonce: &str) -> Scram {
        let user = user.replace('=', "=3D").replace(',', "=2C");
        Scram {
            hash,
            password: password.to_owned(),
            nonce: nonce.to_owned(),
            client_first_bare: format!("n={user},r={nonce}"),
            expected_server_signature: None,
        }
    }

    /// The client's first message.
    pub(crate) fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// The client's final message, from the server's first.
    pub(crate) fn client_final(&mut self, server_first: &str) -> Result<String, ScramError> {
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("e", v)) => return Err(ScramError::Refused(v.to_owned())),
                _ => {}
            }
        }
        let nonce = nonce.ok_or(ScramError::ServerFirst("no nonce"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let salt = openssl::base64::decode_block(salt.ok_or(ScramError::ServerFirst("no salt"))?)
            .map_err(|_| ScramError::ServerFirst("a salt not in base64"))?;
        let iterations: usize = iterations
            .ok_or(ScramError::ServerFirst("no iteration count"))?
            .parse()
            .map_err(|_| ScramError::ServerFirst("an iteration count not a number"))?;
        // Kafka's minimum is 4096; refuse what would stall the process.
        if !(1..=1_000_000).contains(&iterations) {
            return Err(ScramError::ServerFirst("an iteration count out of range"));
        }
        let digest = self.hash.digest();
        let mut salted = vec![0; digest.size()];
        openssl::pkcs5::pbkdf2_hmac(self.password.as_bytes(), &salt, iterations, digest, &mut salted)
            .map_err(crypto)?;
        let client_key = hmac(digest, &salted, b"Client Key")?;
        let stored_key = openssl::hash::hash(digest, &client_key).map_err(crypto)?;
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac(digest, &stored_key, auth_message.as_bytes())?;
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        let server_key = hmac(digest, &salted, b"Server Key")?;
        self.expected_server_signature = Some(hmac(digest, &server_key, auth_message.as_bytes())?);
        Ok(format!("{without_proof},p={}", openssl::base64::encode_block(&proof)))
    }

    /// Checks the server's final message: it proves the server knew the
    /// password's keys.
    pub(crate) fn check_server_final(&self, server_final: &str) -> Result<(), ScramError> {
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(ScramError::Refused(error.to_owned()));
        }
        let signature = server_final
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .and_then(|v| openssl::base64::decode_block(v).ok())
            .ok_or(ScramError::ServerFinal)?;
        match &self.expected_server_signature {
            Some(expected) if expected.len() == signature.len() && openssl::memcmp::eq(expected, &signature) => Ok(()),
            _ => Err(ScramError::ServerSignature),
        }
    }
}

fn hmac(digest: MessageDigest, key: &[u8], data: &[u8]) -> Result<Vec<u8>, ScramError> {
    let key = PKey::hmac(key).map_err(crypto)?;
    let mut signer = Signer::new(digest, &key).map_err(crypto)?;
    signer.update(data).map_err(crypto)?;
    signer.sign_to_vec().map_err(crypto)
}

fn crypto(e: openssl::error::ErrorStack) -> ScramError {
    ScramError::Crypto(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange, byte for byte.
    #[test]
    fn rfc_7677_sha_256() {
        let mut scram = Scram::new(ScramHash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(scram.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        assert_eq!(
            scram.client_final(server_first).expect("final"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(scram.check_server_final("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="), Ok(()));
        assert_eq!(
            scram.check_server_final("v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(ScramError::ServerSignature)
        );
        assert_eq!(scram.check_server_final("e=invalid-proof"), Err(ScramError::Refused("invalid-proof".into())));
    }

    #[test]
    fn names_are_escaped_and_bad_servers_refused() {
        let mut scram = Scram::new(ScramHash::Sha512, "a=b,c", "p", "abc");
        assert_eq!(scram.client_first(), "n,,n=a=3Db=2Cc,r=abc");
        assert_eq!(scram.client_final("r=xyz,s=AAAA,i=4096"), Err(ScramError::Nonce));
        assert_eq!(scram.client_final("r=abc,s=AAAA,i=4096"), Err(ScramError::Nonce), "the server added nothing");
        assert_eq!(scram.client_final("r=abcd,i=4096"), Err(ScramError::ServerFirst("no salt")));
        assert!(matches!(scram.client_final("r=abcd,s=AAAA,i=0"), Err(ScramError::ServerFirst(_))));
        assert!(matches!(scram.client_final("r=abcd,s=AAAA,i=x"), Err(ScramError::ServerFirst(_))));
        assert_eq!(scram.check_server_final("v=AAAA"), Err(ScramError::ServerSignature), "before client_final");
        let answer = scram.client_final("r=abcd,s=AAAA,i=4096").expect("final");
        assert!(answer.starts_with("c=biws,r=abcd,p="), "{answer}");
    }
}
