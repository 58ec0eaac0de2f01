//! Who a runtime member is: its id (given, else the host's name) and its
//! zone, checked — for `kshard serve --etcd` and the example applications'
//! members alike.

use anyhow::{Result, bail};
use kshard_runtime::valid_id;

/// A member's id (`given`, else the host name) and zone, checked.
pub(crate) fn member_identity(given: Option<&str>, zone: &str) -> Result<String> {
    let id = match given {
        Some(id) => id.to_owned(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| valid_id(h))
            .unwrap_or_else(|| "member".to_owned()),
    };
    if !valid_id(&id) {
        bail!("invalid member_id: {id:?} (not empty, no '#' or '/')");
    }
    if !valid_id(zone) {
        bail!("invalid zone: {zone:?} (not empty, no '#' or '/')");
    }
    Ok(id)
}
