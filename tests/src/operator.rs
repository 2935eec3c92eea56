//! Operator calls made by a scenario through the `leasehold` CLI, recorded so the ledger's last
//! promise can be checked (TESTING.md, "The ledger"): every operator call has exactly one audit
//! row.
//!
//! [`Operator::run`] runs `leasehold --output json ACTION [FLAGS] ID…` (one call per id, as
//! the CLI makes them) and records how each id was answered: a JSON line on stdout means the
//! call was accepted (audited `applied` or `noop`), a `(failed precondition)` line on stderr
//! that it was refused as a bad transition (audited `failed`); anything else (the agent or its
//! database did not answer) leaves the call unanswered, and an unanswered call may have left
//! one audit row or none. [`Operator::check_audit`] then matches the `audit_log` against the
//! calls: per `(action, target)`, exactly the rows the answers imply, every one by a local
//! operator (`local`, or a local user's `uid:N(name)` label when the call came over the
//! agent's Unix socket or a loopback connection whose uid is known), and no operator row that
//! no call explains.

use std::collections::BTreeMap;

use anyhow::bail;
use serde_json::Value;
use sqlx::PgPool;

use crate::cli::{Cli, CliOutput};
use crate::inspect::audit_rows;

/// The actor of calls on an agent without tokens when the caller's uid is unknown.
pub const OPEN_ACTOR: &str = "local";
/// How the agent names a local user it identified (`uid:0(root)`, `uid:1000`).
pub const LOCAL_USER_PREFIX: &str = "uid:";

/// True for an actor name the agent gives a local caller without a token: [`OPEN_ACTOR`] or
/// a `uid:` label.
pub fn is_local_actor(actor: &str) -> bool {
    actor == OPEN_ACTOR || actor.starts_with(LOCAL_USER_PREFIX)
}

/// How one call on one task was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Accepted: audited `applied` or `noop`.
    Done,
    /// Refused as a bad transition: audited `failed`.
    Refused,
    /// No answer: one audit row or none.
    Unknown,
}

/// Every call made so far, by `(action, "task:ID")`.
#[derive(Debug, Default)]
pub struct Operator {
    calls: BTreeMap<(String, String), Vec<Answer>>,
}

impl Operator {
    /// Runs `leasehold --output json ACTION FLAGS… IDS…` through `cli` and records each id's
    /// answer; returns them in `ids` order.
    pub async fn run(
        &mut self,
        cli: &Cli,
        action: &str,
        flags: &[&str],
        ids: &[i64],
    ) -> anyhow::Result<Vec<(i64, Answer)>> {
        let id_args: Vec<String> = ids.iter().map(i64::to_string).collect();
        let mut args = vec!["--output", "json", action];
        args.extend_from_slice(flags);
        args.extend(id_args.iter().map(String::as_str));
        let output = cli.run(&args).await?;
        let mut answers = Vec::with_capacity(ids.len());
        for &id in ids {
            let answer = answer_of(&output, action, id);
            self.calls
                .entry((action.to_string(), format!("task:{id}")))
                .or_default()
                .push(answer);
            answers.push((id, answer));
        }
        Ok(answers)
    }

    /// Calls made.
    pub fn calls(&self) -> usize {
        self.calls.values().map(Vec::len).sum()
    }

    /// Calls that got no answer.
    pub fn unanswered(&self) -> usize {
        self.calls
            .values()
            .flatten()
            .filter(|a| **a == Answer::Unknown)
            .count()
    }

    /// Checks the audit log against the calls (see the module documentation); returns the
    /// number of operator rows. Rows of the `system` role (Leasehold's own) are not operator
    /// calls and are skipped.
    pub async fn check_audit(&self, pool: &PgPool) -> anyhow::Result<usize> {
        let mut rows: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        let mut problems = Vec::new();
        let mut operator_rows = 0;
        for (actor, role, action, target, result) in audit_rows(pool).await? {
            if role == "system" {
                continue;
            }
            if !is_local_actor(&actor) || role != "operator" {
                problems.push(format!("{action} {target}: by {actor} ({role})"));
            }
            rows.entry((action, target)).or_default().push(result);
            operator_rows += 1;
        }
        for (key, answers) in &self.calls {
            let results = rows.remove(key).unwrap_or_default();
            if !rows_fit(answers, &results) {
                problems.push(format!(
                    "{key:?}: answers {answers:?}, audit rows {results:?}"
                ));
            }
        }
        for (key, results) in rows {
            problems.push(format!("{key:?}: audit rows {results:?} for no call"));
        }
        if !problems.is_empty() {
            bail!(
                "the audit log disagrees with the operator calls:\n{}",
                problems.join("\n")
            );
        }
        Ok(operator_rows)
    }
}

/// Whether the audit `results` of one `(action, target)` are what its calls' `answers` imply.
fn rows_fit(answers: &[Answer], results: &[String]) -> bool {
    let n = |answer: Answer| answers.iter().filter(|a| **a == answer).count();
    let accepted = results
        .iter()
        .filter(|r| *r == "applied" || *r == "noop")
        .count();
    let failed = results.iter().filter(|r| *r == "failed").count();
    results.len() == accepted + failed
        && accepted >= n(Answer::Done)
        && failed >= n(Answer::Refused)
        && results.len() <= answers.len()
}

fn answer_of(output: &CliOutput, action: &str, id: i64) -> Answer {
    let lines: Vec<Value> = output
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|j| j["id"].as_i64() == Some(id))
        .collect();
    // "Already finished" / "already waiting" (exit 0): the agent refused the change (its audit
    // row says `failed`) and the CLI said why without calling it a failure.
    let already = lines.iter().any(|j| {
        j["outcome"]
            .as_str()
            .is_some_and(|o| o.starts_with("already_"))
    });
    let done = !lines.is_empty() && !already;
    let prefix = format!("leasehold: {action} task {id}: ");
    let refused = already
        || output
            .stderr
            .lines()
            .any(|line| line.starts_with(&prefix) && line.ends_with("(failed precondition)"));
    match (done, refused) {
        (true, false) => Answer::Done,
        (false, true) => Answer::Refused,
        _ => Answer::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_row_per_answered_call() {
        use Answer::*;
        assert!(rows_fit(&[Done], &results(&["applied"])));
        assert!(rows_fit(&[Done, Refused], &results(&["noop", "failed"])));
        assert!(!rows_fit(&[Done], &results(&[])));
        assert!(!rows_fit(&[Done], &results(&["applied", "applied"])));
        assert!(!rows_fit(&[Refused], &results(&["applied"])));
        assert!(!rows_fit(&[Done], &results(&["denied"])));
        assert!(rows_fit(&[Unknown], &results(&[])));
        assert!(rows_fit(&[Unknown], &results(&["applied"])));
        assert!(!rows_fit(&[Unknown], &results(&["applied", "failed"])));
    }

    #[test]
    fn local_actors_are_the_open_name_or_a_uid_label() {
        assert!(is_local_actor("local"));
        assert!(is_local_actor("uid:0(root)"));
        assert!(is_local_actor("uid:1000"));
        assert!(!is_local_actor("ops"));
        assert!(!is_local_actor("unauthenticated"));
        assert!(!is_local_actor("localhost"));
    }

    #[test]
    fn answers_are_read_from_both_streams() {
        let output = CliOutput {
            args: Vec::new(),
            code: Some(2),
            stdout: "{\"id\":7,\"previous\":\"dead\"}\n\
                     {\"id\":10,\"outcome\":\"already_waiting\",\"status\":\"queued\"}\n"
                .into(),
            stderr: "leasehold: requeue task 8: task 8: cannot requeue a task that is queued \
                     (failed precondition)\nleasehold: requeue task 9: unreachable (unavailable)\n"
                .into(),
        };
        assert_eq!(answer_of(&output, "requeue", 7), Answer::Done);
        assert_eq!(answer_of(&output, "requeue", 8), Answer::Refused);
        assert_eq!(answer_of(&output, "requeue", 9), Answer::Unknown);
        assert_eq!(answer_of(&output, "requeue", 10), Answer::Refused);
    }
}
