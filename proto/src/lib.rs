//! Generated wire types and service stubs of the `leasehold.v1` protobuf package.
//!
//! The `.proto` files under `proto/leasehold/v1/` are the documented contract; this crate only
//! compiles them. Conversions between wire and domain types live with their users (the agent's
//! gRPC service and the console's client), never here, so this crate knows nothing of either.

/// The `leasehold.v1` package.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("leasehold.v1");
}
