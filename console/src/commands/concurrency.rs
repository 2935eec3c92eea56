//! `leasehold concurrency set LIMIT (--global | --type TYPE [--per-key] | --local)`:
//! SetConcurrency.
//!
//! Checked locally (the agent would refuse each; saying so before connecting gives the clearer
//! message, exit 2): a local limit is 1..=100000 ([`MAX_LOCAL_CONCURRENCY`]) and cannot be
//! `unlimited`; `--per-key` goes with `--type` only, and a per-key limit is
//! 1..=[`MAX_CONCURRENCY_LIMIT`] (or `unlimited`, which clears it).

use leasehold_proto::v1;
use leasehold_proto::v1::set_concurrency_request::Scope;
use serde::Serialize;

use crate::cli::ConcurrencySetArgs;
use crate::cli::values::{Limit, MAX_CONCURRENCY_LIMIT, MAX_LOCAL_CONCURRENCY};
use crate::client::Agent;
use crate::error::{Error, Result};
use crate::output::Out;
use crate::output::text::shown;

/// The request; refuses what the agent would refuse for a local limit.
pub fn prepare(args: &ConcurrencySetArgs) -> Result<v1::SetConcurrencyRequest> {
    let scope = if args.scope.global {
        Scope::Global(true)
    } else if args.scope.local {
        Scope::AgentLocal(true)
    } else if let Some(t) = &args.scope.task_type {
        Scope::TaskType(t.clone())
    } else {
        return Err(Error::usage(
            "concurrency set: give --global, --type TYPE or --local",
        ));
    };
    let local = matches!(scope, Scope::AgentLocal(_));
    if args.per_key && !matches!(scope, Scope::TaskType(_)) {
        return Err(Error::usage(
            "concurrency set: --per-key goes with --type TYPE (a per-key limit belongs to a task \
             type)",
        ));
    }
    let (limit, unlimited) = match args.limit {
        Limit::Max(0) if args.per_key => {
            return Err(Error::usage(format!(
                "concurrency set: a per-key limit is 1..={MAX_CONCURRENCY_LIMIT} (`unlimited` \
                 clears it; pause a type to stop it)"
            )));
        }
        Limit::Unlimited if local => {
            return Err(Error::usage(format!(
                "concurrency set: a local limit cannot be unlimited (use 1..={MAX_LOCAL_CONCURRENCY})"
            )));
        }
        Limit::Max(0) if local => {
            return Err(Error::usage(format!(
                "concurrency set: a local limit is 1..={MAX_LOCAL_CONCURRENCY} (pause a type to stop it)"
            )));
        }
        Limit::Max(n) if local && n > MAX_LOCAL_CONCURRENCY => {
            return Err(Error::usage(format!(
                "concurrency set: a local limit is 1..={MAX_LOCAL_CONCURRENCY}; {n} is above it"
            )));
        }
        Limit::Unlimited => (0, true),
        Limit::Max(n) => (n, false),
    };
    Ok(v1::SetConcurrencyRequest {
        limit,
        unlimited,
        scope: Some(scope),
        per_key: args.per_key,
    })
}

/// The JSON of `concurrency set`; `null` limits mean unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    pub scope: &'static str,
    pub task_type: Option<String>,
    pub previous: Option<u32>,
    pub limit: Option<u32>,
}

/// Runs `concurrency set`.
pub async fn run(agent: &Agent, request: v1::SetConcurrencyRequest, out: &mut Out) -> Result<u8> {
    let (scope, task_type) = match &request.scope {
        Some(Scope::Global(_)) | None => ("global", None),
        Some(Scope::TaskType(t)) if request.per_key => ("per_key", Some(t.clone())),
        Some(Scope::TaskType(t)) => ("type", Some(t.clone())),
        Some(Scope::AgentLocal(_)) => ("local", None),
    };
    let reply = agent.set_concurrency(request).await?;
    let changed = Changed {
        scope,
        task_type,
        previous: reply.previous,
        limit: reply.limit,
    };
    super::print_change(out, &reply.warnings, &changed, line)
}

fn limit_text(l: Option<u32>) -> String {
    l.map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
}

/// `global limit: unlimited → 10`, `type email.send per-key limit: unlimited → 2`.
pub fn line(c: &Changed) -> String {
    let name = match (c.scope, &c.task_type) {
        ("type", Some(t)) => format!("type {} limit", shown(t, 64)),
        ("per_key", Some(t)) => format!("type {} per-key limit", shown(t, 64)),
        (scope, _) => format!("{scope} limit"),
    };
    format!(
        "{name}: {} → {}",
        limit_text(c.previous),
        limit_text(c.limit)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ScopeArgs;

    fn args(
        limit: Limit,
        global: bool,
        task_type: Option<&str>,
        local: bool,
    ) -> ConcurrencySetArgs {
        ConcurrencySetArgs {
            limit,
            scope: ScopeArgs {
                global,
                task_type: task_type.map(str::to_owned),
                local,
            },
            per_key: false,
        }
    }

    fn per_key(
        limit: Limit,
        global: bool,
        task_type: Option<&str>,
        local: bool,
    ) -> Result<v1::SetConcurrencyRequest> {
        let mut a = args(limit, global, task_type, local);
        a.per_key = true;
        prepare(&a)
    }

    #[test]
    fn requests() {
        assert_eq!(
            prepare(&args(Limit::Max(10), true, None, false)).ok(),
            Some(v1::SetConcurrencyRequest {
                limit: 10,
                unlimited: false,
                scope: Some(Scope::Global(true)),
                per_key: false,
            })
        );
        assert_eq!(
            prepare(&args(Limit::Unlimited, false, Some("noop"), false)).ok(),
            Some(v1::SetConcurrencyRequest {
                limit: 0,
                unlimited: true,
                scope: Some(Scope::TaskType("noop".into())),
                per_key: false,
            })
        );
        assert_eq!(
            prepare(&args(Limit::Max(0), true, None, false))
                .ok()
                .map(|r| r.limit),
            Some(0)
        );
        assert_eq!(
            prepare(&args(Limit::Max(5), false, None, true))
                .ok()
                .map(|r| r.scope),
            Some(Some(Scope::AgentLocal(true)))
        );
    }

    #[test]
    fn per_key_limits_are_set_and_cleared_on_a_type() {
        assert_eq!(
            per_key(Limit::Max(2), false, Some("email.send"), false).ok(),
            Some(v1::SetConcurrencyRequest {
                limit: 2,
                unlimited: false,
                scope: Some(Scope::TaskType("email.send".into())),
                per_key: true,
            })
        );
        assert_eq!(
            per_key(Limit::Unlimited, false, Some("email.send"), false).ok(),
            Some(v1::SetConcurrencyRequest {
                limit: 0,
                unlimited: true,
                scope: Some(Scope::TaskType("email.send".into())),
                per_key: true,
            })
        );
        assert_eq!(
            per_key(Limit::Max(1_000_000), false, Some("noop"), false)
                .ok()
                .map(|r| r.limit),
            Some(1_000_000)
        );
    }

    #[test]
    fn per_key_needs_a_type_and_a_limit_of_at_least_one() {
        for (global, local) in [(true, false), (false, true)] {
            assert!(matches!(
                per_key(Limit::Max(2), global, None, local),
                Err(Error::Usage(m)) if m.contains("--per-key goes with --type TYPE")
            ));
        }
        assert!(matches!(
            per_key(Limit::Max(0), false, Some("noop"), false),
            Err(Error::Usage(m)) if m.contains("a per-key limit is 1..=1000000")
        ));
    }

    #[test]
    fn local_limits_are_bounded_and_never_unlimited() {
        assert!(matches!(
            prepare(&args(Limit::Unlimited, false, None, true)),
            Err(Error::Usage(m)) if m.contains("cannot be unlimited")
        ));
        assert!(matches!(
            prepare(&args(Limit::Max(0), false, None, true)),
            Err(Error::Usage(_))
        ));
        assert!(matches!(
            prepare(&args(Limit::Max(100_001), false, None, true)),
            Err(Error::Usage(m)) if m.contains("1..=100000; 100001 is above it")
        ));
        assert!(prepare(&args(Limit::Max(100_000), false, None, true)).is_ok());
    }

    /// The global and type limits go as high as the store takes (the console's prompt and
    /// the agent agree), not only as high as a local limit.
    #[test]
    fn global_and_type_limits_reach_the_store_s_bound() {
        for (global, task_type) in [(true, None), (false, Some("noop"))] {
            assert_eq!(
                prepare(&args(Limit::Max(1_000_000), global, task_type, false))
                    .ok()
                    .map(|r| r.limit),
                Some(1_000_000)
            );
        }
    }

    #[test]
    fn lines_and_json() {
        let c = Changed {
            scope: "type",
            task_type: Some("noop".into()),
            previous: None,
            limit: Some(3),
        };
        assert_eq!(line(&c), "type noop limit: unlimited → 3");
        assert_eq!(
            serde_json::to_string(&c).ok().as_deref(),
            Some(r#"{"scope":"type","task_type":"noop","previous":null,"limit":3}"#)
        );
        let c = Changed {
            scope: "local",
            task_type: None,
            previous: Some(100),
            limit: Some(50),
        };
        assert_eq!(line(&c), "local limit: 100 → 50");
        let c = Changed {
            scope: "per_key",
            task_type: Some("email.send".into()),
            previous: Some(2),
            limit: None,
        };
        assert_eq!(line(&c), "type email.send per-key limit: 2 → unlimited");
        assert_eq!(
            serde_json::to_string(&c).ok().as_deref(),
            Some(r#"{"scope":"per_key","task_type":"email.send","previous":2,"limit":null}"#)
        );
    }
}
