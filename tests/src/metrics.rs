//! An agent's `/metrics` page, read over plain TCP as a scraper would.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::Context;

pub use crate::cluster::free_port;

/// The whole HTTP response (status line, headers, body) of `GET /metrics` on 127.0.0.1:`port`.
pub async fn scrape_metrics(port: u16) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
            .with_context(|| format!("connecting to the metrics listener on port {port}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
    .await
    .context("the metrics read panicked")?
}
