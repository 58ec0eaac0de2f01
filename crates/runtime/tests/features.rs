//! What a single-process application pulls in: kshard-runtime without its
//! default `etcd` feature has no etcd client, gRPC or protobuf code in its
//! build (so no protoc); with it, etcd-client is there. Read from the
//! workspace's lock file by `cargo tree` (offline: nothing fetched).

use std::process::Command;

fn tree(features: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", "kshard-runtime", "-e", "normal,build", "--prefix", "none", "--locked", "--offline"])
        .args(features)
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn has(tree: &str, name: &str) -> bool {
    tree.lines().any(|line| line.split_whitespace().next() == Some(name))
}

#[test]
fn without_the_etcd_feature_no_etcd_client_tonic_or_protobuf_is_built() {
    let single = tree(&["--no-default-features"]);
    assert!(has(&single, "kshard-kafka") && has(&single, "redb"), "the tree was read: {single}");
    let protobuf = ["etcd-client", "tonic", "tonic-build", "tonic-prost-build", "prost", "prost-build"];
    for name in protobuf {
        assert!(!has(&single, name), "{name} in a single-process build:\n{single}");
    }
    let default = tree(&[]);
    assert!(protobuf.iter().all(|name| has(&default, name)), "the default build has etcd's client: {default}");
}

/// The crates a user depends on package as crates.io takes them: every
/// workspace dependency with a version, each crate checked against the
/// others' packages (cargo's overlay of the ones packaged together).
#[test]
fn the_library_and_the_crates_it_names_package_for_crates_io() {
    let target = std::env::temp_dir().join(format!("kshard-package-{}", std::process::id()));
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target)
        .args(["package", "-p", "kshard-offsets", "-p", "kshard-kafka", "-p", "kshard-runtime"])
        .args(["--no-verify", "--offline", "--allow-dirty"])
        .output()
        .expect("cargo package runs");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_dir_all(&target);
    assert!(out.status.success(), "cargo package: {said}");
    assert!(said.contains("Packaging kshard-runtime"), "{said}");
}
