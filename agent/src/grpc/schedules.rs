//! The schedule RPCs (ListSchedules, AddSchedule, RemoveSchedule, SetScheduleEnabled,
//! TriggerSchedule): request validation into a [`Schedule`], the store call (which audits),
//! and the answer. Bad input — an invalid cron, an unknown time zone, a malformed type name or
//! payload, or one the handler of its type refuses (see [`crate::handlers::check_enqueue`];
//! audited as `failed`) — is INVALID_ARGUMENT naming the field, and nothing is saved. A type no
//! live agent handles is saved with a warning in the reply.
//!
//! A schedule without its own max attempts inherits them (wire 0, both ways): every reply's
//! schedule also says what a task fired now would get (`max_attempts_in_force`), from the
//! policies read for that reply.

use leasehold_proto::v1 as pb;
use leasehold_proto::wire;
use leasehold_shared::domain::schedule::{DEFAULT_CATCH_UP, MissedTicks, Schedule, ScheduleName};
use leasehold_shared::domain::{Policy, PolicyScope, TaskType};
use leasehold_shared::store::{
    ScheduleAddParams, ScheduleEnableParams, ScheduleNameParams, ScheduleRecord, ScheduleWriteMode,
    UnreadableSchedule,
};
use tonic::{Request, Response, Status};

use super::convert::{invalid, json_without_nul, ms, opt_ms, status_to_wire, task_to_wire};
use super::service::{Need, Service};
use super::status::from_store;
use crate::runtime::scheduler::unserved_warning;

/// The policy rows a reply resolves inherited max attempts from; `None` when they could not
/// be read (the reply then says 0, "unknown", rather than failing a change already made).
#[derive(Debug, Clone, Default)]
pub struct AttemptPolicies(Option<Vec<Policy>>);

impl AttemptPolicies {
    /// The max attempts a task of `task_type` enqueued without its own gets now: the type's
    /// policy value, else the global one, else the default (as the enqueue resolves them);
    /// 0 when the policies are unknown.
    pub fn for_type(&self, task_type: &TaskType) -> i32 {
        let Some(rows) = &self.0 else {
            return 0;
        };
        let find = |scope: &PolicyScope| rows.iter().find(|p| p.scope == *scope);
        let global = find(&PolicyScope::Global)
            .cloned()
            .unwrap_or_else(|| Policy::inherit(PolicyScope::Global));
        let scope = PolicyScope::Type(task_type.clone());
        match find(&scope) {
            Some(row) => row.max_attempts_over(&global),
            None => Policy::inherit(scope).max_attempts_over(&global),
        }
    }
}

/// A stored schedule on the wire; its inherited max attempts resolved from `policies`.
pub fn schedule_to_wire(r: &ScheduleRecord, policies: &AttemptPolicies) -> pb::Schedule {
    let s = &r.schedule;
    pb::Schedule {
        name: s.name().to_string(),
        cron: s.cron().to_string(),
        time_zone: s.time_zone().name().to_string(),
        task_type: s.task_type().to_string(),
        payload_json: s.payload().to_string(),
        priority: i32::from(s.priority()),
        max_attempts: s.max_attempts().unwrap_or(0),
        max_attempts_in_force: s
            .max_attempts()
            .unwrap_or_else(|| policies.for_type(s.task_type())),
        enabled: s.enabled(),
        missed: s.missed().as_str().to_string(),
        catch_up_max: s.missed().limit(),
        next_fire_at_ms: opt_ms(r.next_fire_at),
        last_fired_at_ms: opt_ms(r.last_fired_at),
        last_task_id: r.last_task_id.map_or(0, |id| id.0),
        last_task_status: r
            .last_task_status
            .map_or(pb::TaskStatus::Unspecified, status_to_wire) as i32,
        last_error: r.last_error.clone().unwrap_or_default(),
        created_at_ms: ms(r.created_at),
        updated_at_ms: ms(r.updated_at),
        description: s.cron().describe(),
    }
}

/// A stored schedule the agent cannot read, on the wire: what could be read of it, never
/// firing (next fire 0), and why in `last_error`.
pub fn unreadable_to_wire(u: &UnreadableSchedule) -> pb::Schedule {
    pb::Schedule {
        name: u.name.clone(),
        cron: u.cron.clone().unwrap_or_default(),
        task_type: u.task_type.clone().unwrap_or_default(),
        enabled: u.enabled.unwrap_or(false),
        last_error: format!("unreadable in the database: {}", u.error),
        ..Default::default()
    }
}

fn name_from_wire(name: &str) -> Result<ScheduleName, Status> {
    ScheduleName::new(name).map_err(invalid)
}

/// An AddSchedule request as a validated schedule.
pub fn schedule_from_wire(
    r: &pb::AddScheduleRequest,
    limits: &leasehold_shared::InputLimits,
) -> Result<Schedule, Status> {
    let payload: serde_json::Value = if r.payload_json.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_str(&r.payload_json)
            .map_err(|e| Status::invalid_argument(format!("payload_json: not valid JSON: {e}")))?
    };
    json_without_nul("payload_json", &payload)?;
    let priority = i16::try_from(r.priority).map_err(|_| {
        Status::invalid_argument(format!(
            "priority: {} is not within -32768..=32767",
            r.priority
        ))
    })?;
    let missed = match (r.missed.trim(), r.catch_up_max) {
        ("" | "skip", 0) => MissedTicks::Skip,
        ("" | "skip", n) => {
            return Err(Status::invalid_argument(format!(
                "catch_up_max: {n} is only for missed = catch_up"
            )));
        }
        ("catch_up", 0) => MissedTicks::catch_up(DEFAULT_CATCH_UP).map_err(invalid)?,
        ("catch_up", n) => MissedTicks::catch_up(n).map_err(invalid)?,
        (other, _) => {
            return Err(Status::invalid_argument(format!(
                "missed: {:?} is not a missed-tick policy: use skip or catch_up",
                other.chars().take(40).collect::<String>()
            )));
        }
    };
    let mut builder = Schedule::builder(&r.name, &r.cron, &r.task_type)
        .payload(payload)
        .priority(priority)
        .max_attempts_opt(match r.max_attempts {
            0 => None,
            n => Some(n),
        })
        .enabled(!r.disabled)
        .missed(missed);
    if !r.time_zone.trim().is_empty() {
        builder = builder.time_zone(r.time_zone.trim());
    }
    builder.build(limits).map_err(invalid)
}

impl Service {
    /// The policy rows this reply's inherited max attempts are resolved from. Read after the
    /// change it reports, so a failure here must not fail the reply (a retried trigger would
    /// enqueue twice): it is logged and the value in force is sent as 0, unknown.
    async fn attempt_policies(&self, op: &'static str) -> AttemptPolicies {
        match self.core.store.policy_list().await {
            Ok(rows) => AttemptPolicies(Some(rows)),
            Err(error) => {
                tracing::warn!(%error, op, "reading policies for a schedule reply failed");
                AttemptPolicies(None)
            }
        }
    }

    pub(super) async fn list_schedules_rpc(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        self.caller(&request, Need::View).await?;
        let store = &self.core.store;
        let listing = store
            .schedule_list()
            .await
            .map_err(|e| from_store("list_schedules", e))?;
        let policies = self.attempt_policies("list_schedules").await;
        let mut schedules: Vec<pb::Schedule> = listing
            .schedules
            .iter()
            .map(|r| schedule_to_wire(r, &policies))
            .collect();
        schedules.extend(listing.unreadable.iter().map(unreadable_to_wire));
        schedules.sort_by(|a, b| a.name.cmp(&b.name));
        let now = store
            .db_now()
            .await
            .map_err(|e| from_store("list_schedules", e))?;
        Ok(Response::new(pb::ListSchedulesResponse {
            schedules,
            now_ms: ms(now),
        }))
    }

    pub(super) async fn add_schedule_rpc(
        &self,
        request: Request<pb::AddScheduleRequest>,
    ) -> Result<Response<pb::AddScheduleResponse>, Status> {
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "schedule_add",
                    target: format!("schedule:{}", request.get_ref().name),
                },
            )
            .await?;
        let r = request.into_inner();
        let schedule = schedule_from_wire(&r, &leasehold_shared::InputLimits::default())?;
        self.check_payload(
            &actor,
            "schedule_add",
            format!("schedule:{}", schedule.name()),
            schedule.task_type(),
            schedule.payload(),
        )
        .await?;
        let warning = unserved_warning(&self.core, schedule.task_type()).await;
        let added = self
            .core
            .store
            .schedule_add(ScheduleAddParams {
                schedule,
                mode: if r.replace {
                    ScheduleWriteMode::Replace
                } else {
                    ScheduleWriteMode::Create
                },
                actor,
            })
            .await
            .map_err(|e| from_store("add_schedule", e))?;
        self.core.schedules_changed.notify_one();
        let policies = self.attempt_policies("add_schedule").await;
        let (add_outcome, outcome) = wire::write(added.outcome);
        #[allow(deprecated)] // `outcome` is filled for consoles older than `add_outcome`
        let response = pb::AddScheduleResponse {
            schedule: Some(schedule_to_wire(&added.record, &policies)),
            outcome,
            add_outcome,
            warnings: warning.into_iter().collect(),
        };
        Ok(Response::new(response))
    }

    pub(super) async fn remove_schedule_rpc(
        &self,
        request: Request<pb::RemoveScheduleRequest>,
    ) -> Result<Response<pb::RemoveScheduleResponse>, Status> {
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "schedule_remove",
                    target: format!("schedule:{}", request.get_ref().name),
                },
            )
            .await?;
        let name = name_from_wire(&request.get_ref().name)?;
        let removed = self
            .core
            .store
            .schedule_remove(ScheduleNameParams { name, actor })
            .await
            .map_err(|e| from_store("remove_schedule", e))?;
        self.core.schedules_changed.notify_one();
        let policies = self.attempt_policies("remove_schedule").await;
        Ok(Response::new(pb::RemoveScheduleResponse {
            schedule: removed.as_ref().map(|r| schedule_to_wire(r, &policies)),
        }))
    }

    pub(super) async fn set_schedule_enabled_rpc(
        &self,
        request: Request<pb::SetScheduleEnabledRequest>,
    ) -> Result<Response<pb::SetScheduleEnabledResponse>, Status> {
        let enabled = request.get_ref().enabled;
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: if enabled {
                        "schedule_enable"
                    } else {
                        "schedule_disable"
                    },
                    target: format!("schedule:{}", request.get_ref().name),
                },
            )
            .await?;
        let name = name_from_wire(&request.get_ref().name)?;
        let done = self
            .core
            .store
            .schedule_set_enabled(ScheduleEnableParams {
                name,
                enabled,
                actor,
            })
            .await
            .map_err(|e| from_store("set_schedule_enabled", e))?;
        self.core.schedules_changed.notify_one();
        let policies = self.attempt_policies("set_schedule_enabled").await;
        Ok(Response::new(pb::SetScheduleEnabledResponse {
            schedule: Some(schedule_to_wire(&done.record, &policies)),
            changed: done.changed,
        }))
    }

    pub(super) async fn trigger_schedule_rpc(
        &self,
        request: Request<pb::TriggerScheduleRequest>,
    ) -> Result<Response<pb::TriggerScheduleResponse>, Status> {
        let actor = self
            .caller(
                &request,
                Need::Act {
                    action: "schedule_trigger",
                    target: format!("schedule:{}", request.get_ref().name),
                },
            )
            .await?;
        let name = name_from_wire(&request.get_ref().name)?;
        let store = &self.core.store;
        let done = store
            .schedule_trigger(ScheduleNameParams { name, actor })
            .await
            .map_err(|e| from_store("trigger_schedule", e))?;
        self.core.wake_claimers();
        let task = store
            .task_get(done.task.id)
            .await
            .map_err(|e| from_store("trigger_schedule", e))?
            .map(|d| task_to_wire(&d.task));
        let policies = self.attempt_policies("trigger_schedule").await;
        Ok(Response::new(pb::TriggerScheduleResponse {
            task,
            schedule: Some(schedule_to_wire(&done.record, &policies)),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use tonic::Code;

    fn add(name: &str, cron: &str) -> pb::AddScheduleRequest {
        pb::AddScheduleRequest {
            name: name.into(),
            cron: cron.into(),
            task_type: "noop".into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_add_request_becomes_a_schedule_or_names_the_bad_field() {
        let limits = leasehold_shared::InputLimits::default();
        let s = schedule_from_wire(&add("tick", "* * * * * *"), &limits).unwrap();
        assert_eq!(s.missed(), MissedTicks::Skip);
        assert_eq!(s.max_attempts(), None, "0 inherits");
        let own = pb::AddScheduleRequest {
            max_attempts: 5,
            ..add("tick", "* * * * * *")
        };
        assert_eq!(
            schedule_from_wire(&own, &limits).unwrap().max_attempts(),
            Some(5)
        );
        assert_eq!(s.time_zone().name(), "UTC");
        let catch_up = pb::AddScheduleRequest {
            missed: "catch_up".into(),
            ..add("tick", "* * * * * *")
        };
        assert_eq!(
            schedule_from_wire(&catch_up, &limits).unwrap().missed(),
            MissedTicks::CatchUp {
                max: DEFAULT_CATCH_UP
            }
        );
        let refused = |r: pb::AddScheduleRequest, field: &str| {
            let status = schedule_from_wire(&r, &limits).unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(
                status.message().contains(field),
                "{field}: {}",
                status.message()
            );
        };
        refused(add("tick", "every minute"), "cron");
        refused(add("Bad Name", "* * * * * *"), "name");
        refused(
            pb::AddScheduleRequest {
                time_zone: "Mars/Olympus".into(),
                ..add("tick", "* * * * * *")
            },
            "time zone",
        );
        refused(
            pb::AddScheduleRequest {
                task_type: "no spaces".into(),
                ..add("tick", "* * * * * *")
            },
            "type",
        );
        refused(
            pb::AddScheduleRequest {
                payload_json: "{not json".into(),
                ..add("tick", "* * * * * *")
            },
            "payload_json",
        );
        refused(
            pb::AddScheduleRequest {
                missed: "sometimes".into(),
                ..add("tick", "* * * * * *")
            },
            "missed",
        );
        refused(
            pb::AddScheduleRequest {
                catch_up_max: 5,
                ..add("tick", "* * * * * *")
            },
            "catch_up_max",
        );
        refused(
            pb::AddScheduleRequest {
                missed: "catch_up".into(),
                catch_up_max: 5000,
                ..add("tick", "* * * * * *")
            },
            "catch_up_max",
        );
        refused(
            pb::AddScheduleRequest {
                priority: 40_000,
                ..add("tick", "* * * * * *")
            },
            "priority",
        );
        refused(
            pb::AddScheduleRequest {
                max_attempts: -1,
                ..add("tick", "* * * * * *")
            },
            "max_attempts",
        );
    }

    #[test]
    fn an_inherited_max_attempts_is_shown_as_the_policies_resolve_it() {
        let limits = leasehold_shared::InputLimits::default();
        let record = |max_attempts: i32| ScheduleRecord {
            schedule: schedule_from_wire(
                &pb::AddScheduleRequest {
                    max_attempts,
                    ..add("tick", "* * * * * *")
                },
                &limits,
            )
            .unwrap(),
            next_fire_at: None,
            last_fired_at: None,
            last_task_id: None,
            last_task_status: None,
            last_error: None,
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
        };
        let noop = TaskType::new("noop").unwrap();
        let mut global = Policy::inherit(PolicyScope::Global);
        global.max_attempts = Some(9);
        let mut own = Policy::inherit(PolicyScope::Type(noop.clone()));
        own.max_attempts = Some(4);
        let shown = |r: &ScheduleRecord, rows: Vec<Policy>| {
            let s = schedule_to_wire(r, &AttemptPolicies(Some(rows)));
            (s.max_attempts, s.max_attempts_in_force)
        };
        let inherits = record(0);
        assert_eq!(shown(&inherits, vec![]), (0, 25), "the default");
        assert_eq!(shown(&inherits, vec![global.clone()]), (0, 9), "global");
        assert_eq!(
            shown(&inherits, vec![global.clone(), own.clone()]),
            (0, 4),
            "the type's"
        );
        assert_eq!(shown(&record(2), vec![global, own]), (2, 2), "its own");
    }
}
