//! Serde helpers that show raw bytes as lowercase hex strings.

#![cfg(feature = "serde")]

use std::borrow::Cow;
use std::fmt::Write;

fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

// serde's `serialize_with` hands over `&FieldType`, here `&Cow<[u8]>`.
#[allow(clippy::ptr_arg)]
pub(crate) fn bytes<S: serde::Serializer>(v: &Cow<'_, [u8]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&to_hex(v))
}

pub(crate) fn nullable<S: serde::Serializer>(v: &Option<Cow<'_, [u8]>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(b) => s.serialize_str(&to_hex(b)),
        None => s.serialize_none(),
    }
}
