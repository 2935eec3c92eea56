//! ListSuspectLeases (DESIGN §4 "Suspect, then revoke"): the leases whose renewal is overdue,
//! read from the database, so a console sees the leases of an agent whose own Watch stream went
//! silent (a frozen or partitioned agent streams nothing, not even its failures).
//!
//! ```text
//!  console ──every 2 s──▶ any agent ──lease_list_suspect(threshold, limit + 1)──▶ database
//!          ◀── leases whose heartbeat_at < now() − threshold, oldest first, now, truncated
//! ```
//!
//! The threshold defaults to the answering agent's revoke threshold (3 × `--heartbeat`); every
//! time is the database's. Bad input — a negative threshold or one above a day, a limit above
//! [`MAX_SUSPECT_LIMIT`] — is INVALID_ARGUMENT naming the field. Nothing is written: a listed
//! lease is only shown; recovery takes it after `lease_until + grace`.

use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_shared::store::{MAX_SUSPECT_LIMIT, SuspectLease, SuspectParams};
use tonic::{Request, Response, Status};

use super::convert::ms;
use super::service::{Need, Service};
use super::status::from_store;

/// Leases returned when the request leaves `limit` 0.
pub const DEFAULT_SUSPECT_LIMIT: u32 = 1000;
/// Largest threshold a request may give.
pub const MAX_SUSPECT_THRESHOLD: Duration = Duration::from_secs(24 * 3600);

/// The threshold and limit of a request, defaults filled in; INVALID_ARGUMENT when out of
/// range.
pub fn suspect_request(
    r: &pb::ListSuspectLeasesRequest,
    default_threshold: Duration,
) -> Result<(Duration, u32), Status> {
    let threshold = match r.threshold_ms {
        0 => default_threshold,
        n if n < 0 => {
            return Err(Status::invalid_argument(format!(
                "threshold_ms: {n} is negative; give 0 for the agent's revoke threshold or a \
                 positive number of milliseconds"
            )));
        }
        n => {
            let d = Duration::from_millis(n.unsigned_abs());
            if d > MAX_SUSPECT_THRESHOLD {
                return Err(Status::invalid_argument(format!(
                    "threshold_ms: {n} is above one day ({} ms)",
                    MAX_SUSPECT_THRESHOLD.as_millis()
                )));
            }
            d
        }
    };
    let limit = match r.limit {
        0 => DEFAULT_SUSPECT_LIMIT,
        n if n > MAX_SUSPECT_LIMIT => {
            return Err(Status::invalid_argument(format!(
                "limit: {n} is above {MAX_SUSPECT_LIMIT}"
            )));
        }
        n => n,
    };
    Ok((threshold, limit))
}

/// One suspect lease on the wire.
pub fn suspect_to_wire(s: &SuspectLease) -> pb::SuspectLease {
    pb::SuspectLease {
        task_id: s.id.0,
        task_type: s.task_type.as_str().to_string(),
        owner: s.owner.as_str().to_string(),
        epoch: s.epoch.0,
        heartbeat_at_ms: ms(s.heartbeat_at),
        lease_until_ms: ms(s.lease_until),
        overdue_ms: ms(s.now).saturating_sub(ms(s.heartbeat_at)).max(0),
    }
}

impl Service {
    pub(super) async fn list_suspect_leases_rpc(
        &self,
        request: Request<pb::ListSuspectLeasesRequest>,
    ) -> Result<Response<pb::ListSuspectLeasesResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let (threshold, limit) =
            suspect_request(request.get_ref(), self.core.settings.revoke_threshold())?;
        // One more than asked tells whether the list was cut.
        let mut found = self
            .core
            .store
            .lease_list_suspect(SuspectParams {
                threshold,
                limit: limit.saturating_add(1).min(MAX_SUSPECT_LIMIT),
            })
            .await
            .map_err(|e| from_store("list_suspect_leases", e))?;
        let keep = usize::try_from(limit).unwrap_or(usize::MAX);
        let truncated = found.len() > keep;
        found.truncate(keep);
        // The database's time of the read; with nothing suspect, ask it (one cheap read).
        let now_ms = match found.first() {
            Some(s) => ms(s.now),
            None => self
                .core
                .store
                .db_now()
                .await
                .map(ms)
                .map_err(|e| from_store("list_suspect_leases", e))?,
        };
        Ok(Response::new(pb::ListSuspectLeasesResponse {
            leases: found.iter().map(suspect_to_wire).collect(),
            now_ms,
            threshold_ms: i64::try_from(threshold.as_millis()).unwrap_or(i64::MAX),
            truncated,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(threshold_ms: i64, limit: u32) -> pb::ListSuspectLeasesRequest {
        pb::ListSuspectLeasesRequest {
            threshold_ms,
            limit,
        }
    }

    #[test]
    fn defaults_fill_in_and_bad_values_are_refused() {
        let three_beats = Duration::from_secs(3);
        assert_eq!(
            suspect_request(&req(0, 0), three_beats).unwrap(),
            (three_beats, DEFAULT_SUSPECT_LIMIT)
        );
        assert_eq!(
            suspect_request(&req(1500, 7), three_beats).unwrap(),
            (Duration::from_millis(1500), 7)
        );
        for bad in [
            req(-1, 0),
            req(i64::MIN, 0),
            req(86_400_001, 0),
            req(0, MAX_SUSPECT_LIMIT + 1),
            req(0, u32::MAX),
        ] {
            let status = suspect_request(&bad, three_beats).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}");
        }
    }
}
