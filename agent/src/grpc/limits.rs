//! The status of a request above the message limit.
//!
//! tonic refuses a request message whose length prefix is above
//! [`leasehold_proto::MAX_MESSAGE_BYTES`] with OUT_OF_RANGE ("decoded message length too
//! large") before reading its body, while a compressed message that grows past the limit while
//! decompressing gets RESOURCE_EXHAUSTED. The contract (`agent.proto`, DESIGN §10) says a
//! message above the limits is RESOURCE_EXHAUSTED, so [`MessageLimit`] rewrites the former:
//! the service itself never answers OUT_OF_RANGE, so every such answer is tonic's.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;
use tonic::{Code, Status};

/// Wraps a gRPC service so that a request refused for its size is RESOURCE_EXHAUSTED.
#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
}

impl<S> MessageLimit<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S: NamedService> NamedService for MessageLimit<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for MessageLimit<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let answer = self.inner.call(request);
        Box::pin(async move { Ok(remap(answer.await?)) })
    }
}

/// A trailers-only OUT_OF_RANGE answer becomes RESOURCE_EXHAUSTED; anything else is kept.
fn remap(response: http::Response<Body>) -> http::Response<Body> {
    match Status::from_header_map(response.headers()) {
        Some(status) if status.code() == Code::OutOfRange => {
            tracing::warn!(
                message = status.message(),
                "request above the message limit refused"
            );
            Status::resource_exhausted(format!(
                "the request is larger than the agent's message limit of {} bytes ({})",
                leasehold_proto::MAX_MESSAGE_BYTES,
                status.message()
            ))
            .into_http()
        }
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn out_of_range_becomes_resource_exhausted_and_nothing_else_changes() {
        let oversized = Status::out_of_range("Error, decoded message length too large");
        let mapped = remap(oversized.into_http());
        let status = Status::from_header_map(mapped.headers()).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(
            status.message().contains("message limit"),
            "{}",
            status.message()
        );
        let other = remap(Status::not_found("task 9 does not exist").into_http());
        let status = Status::from_header_map(other.headers()).unwrap();
        assert_eq!(status.code(), Code::NotFound);
        let ok = remap(http::Response::new(Body::default()));
        assert!(Status::from_header_map(ok.headers()).is_none());
    }
}
