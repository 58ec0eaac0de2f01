//! Support shared by the test binaries of `kshard example sum`; each uses
//! part of it.
#![allow(dead_code)]

pub(crate) mod leader_kill;
pub(crate) mod primaries;
pub(crate) mod sum_cluster;
