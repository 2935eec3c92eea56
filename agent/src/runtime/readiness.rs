//! What `/readyz` ([`super::metrics::Readiness`]) asks of a running agent: whether it is
//! draining (stopped claiming: SIGTERM, the gRPC `Drain` call, `--exit-when-idle`), and one
//! round trip through its main store that reads the migrations the database applied.
//!
//! The round trip uses the main pool, the one claims and completions use, not the
//! heartbeat's connection: an agent whose pool cannot give a connection within the check's
//! timeout could not claim either, and is reported not ready.

use std::sync::Arc;

use leasehold_shared::StoreError;

use super::core::Core;
use super::metrics::{MigrationCount, ReadinessSource};

/// [`ReadinessSource`] of an agent.
pub(crate) struct AgentReadiness {
    pub(crate) core: Arc<Core>,
}

#[async_trait::async_trait]
impl ReadinessSource for AgentReadiness {
    fn draining(&self) -> bool {
        self.core.is_draining() || self.core.drain.is_cancelled()
    }

    async fn migrations(&self) -> Result<MigrationCount, StoreError> {
        let (applied, known) = self.core.database.migrations_applied().await?;
        Ok(MigrationCount { applied, known })
    }
}
