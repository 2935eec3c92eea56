//! Compiles `leasehold/v1/*.proto` with protox (a pure-Rust protobuf compiler), so building
//! Leasehold never needs a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["leasehold/v1/agent.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["."])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
