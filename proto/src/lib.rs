//! Generated wire types and service stubs of the `leasehold.v1` protobuf package.
//!
//! The `.proto` files under `proto/leasehold/v1/` are the documented contract; this crate
//! compiles them. The mappings between the wire enums and the domain enums of `leasehold-shared`
//! live here, in [`wire`], written once for both sides; message conversions stay with their users
//! (the agent's gRPC service and the console's client), so this crate knows nothing of either.

// Only the agent's exec spawner may use unsafe (the workspace lint is `deny` for its sake).
#![forbid(unsafe_code)]

/// The `leasehold.v1` package.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("leasehold.v1");
}

pub mod wire;

/// The encoded `FileDescriptorSet` of `leasehold.v1`, for the server reflection service.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/leasehold_v1_descriptor.bin"));

/// The metadata key carrying a client's token: `authorization: Bearer <token>`.
pub const AUTHORIZATION: &str = "authorization";

/// Largest message either side sends or accepts, after decompression (4 MiB). Payloads are
/// limited far below this by the agent's input limits.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
