//! Generates KEDA's external scaler service and client from
//! `proto/externalscaler.proto` with protoc (scripts/install.sh installs it;
//! etcd-client's build needs it too).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalscaler.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&["proto/externalscaler.proto"], &["proto"])?;
    Ok(())
}
