//! Compiles `leasehold/v1/*.proto` with protox (a pure-Rust protobuf compiler), so building
//! Leasehold never needs a system `protoc`. The encoded descriptor set is written next to the
//! generated code for the server reflection service.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["leasehold/v1/agent.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("leasehold_v1_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
