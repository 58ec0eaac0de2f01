//! Certificates for the tests' TLS peers, made with OpenSSL on the spot.

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::x509::extension::{BasicConstraints, SubjectAlternativeName};
use openssl::x509::{X509, X509NameBuilder};

/// A certificate for `name`, signed by `ca` (self-signed when `None`), with
/// `san` as its subject alternative name (an IP or a DNS name).
pub fn certificate(name: &str, san: &str, ca: Option<(&X509, &PKey<Private>)>) -> (X509, PKey<Private>) {
    let key = PKey::from_rsa(Rsa::generate(2048).expect("rsa")).expect("key");
    let mut subject = X509NameBuilder::new().expect("name");
    subject.append_entry_by_text("CN", name).expect("cn");
    let subject = subject.build();
    let mut b = X509::builder().expect("builder");
    b.set_version(2).expect("version");
    let mut serial = BigNum::new().expect("bn");
    serial.rand(64, MsbOption::MAYBE_ZERO, false).expect("rand");
    b.set_serial_number(&serial.to_asn1_integer().expect("serial")).expect("serial");
    b.set_subject_name(&subject).expect("subject");
    b.set_issuer_name(ca.map_or(&subject, |(c, _)| c.subject_name())).expect("issuer");
    b.set_pubkey(&key).expect("pubkey");
    b.set_not_before(&Asn1Time::days_from_now(0).expect("time")).expect("nb");
    b.set_not_after(&Asn1Time::days_from_now(2).expect("time")).expect("na");
    if ca.is_none() {
        b.append_extension(BasicConstraints::new().critical().ca().build().expect("bc")).expect("bc");
    }
    let mut alt = SubjectAlternativeName::new();
    if san.parse::<std::net::IpAddr>().is_ok() {
        alt.ip(san);
    } else {
        alt.dns(san);
    }
    let alt = alt.build(&b.x509v3_context(ca.map(|(c, _)| c.as_ref()), None)).expect("san");
    b.append_extension(alt).expect("san");
    b.sign(ca.map_or(&key, |(_, k)| k), MessageDigest::sha256()).expect("sign");
    (b.build(), key)
}
