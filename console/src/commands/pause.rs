//! `leasehold pause TYPE` and `leasehold resume TYPE`: PauseType / ResumeType, saying when
//! nothing changed (already paused, or not paused).

use serde::Serialize;

use crate::client::Agent;
use crate::error::Result;
use crate::exit;
use crate::output::Out;
use crate::output::text::shown;

/// The result of a pause or resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Paused {
    pub task_type: String,
    /// The state after the call.
    pub paused: bool,
    pub changed: bool,
}

/// Runs `pause TYPE`.
pub async fn run_pause(agent: &Agent, task_type: String, out: &mut Out) -> Result<u8> {
    let reply = agent.pause_type(task_type.clone()).await?;
    // On stderr in both output modes, as `schedules add` does: stdout stays the result.
    for w in &reply.warnings {
        out.note(&format!("warning: {w}"));
    }
    print(
        out,
        &Paused {
            task_type,
            paused: true,
            changed: reply.changed,
        },
    )
}

/// Runs `resume TYPE`.
pub async fn run_resume(agent: &Agent, task_type: String, out: &mut Out) -> Result<u8> {
    let reply = agent.resume_type(task_type.clone()).await?;
    print(
        out,
        &Paused {
            task_type,
            paused: false,
            changed: reply.changed,
        },
    )
}

fn print(out: &mut Out, p: &Paused) -> Result<u8> {
    if out.json_mode() {
        out.json(p)?;
    } else {
        out.line(&line(p))?;
    }
    Ok(exit::OK)
}

/// `paused type noop`, `type noop was already paused (nothing changed)`, …
pub fn line(p: &Paused) -> String {
    let t = shown(&p.task_type, 64);
    match (p.paused, p.changed) {
        (true, true) => format!("paused type {t}"),
        (true, false) => format!("type {t} was already paused (nothing changed)"),
        (false, true) => format!("resumed type {t}"),
        (false, false) => format!("type {t} was not paused (nothing changed)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_when_nothing_changed() {
        let p = |paused, changed| Paused {
            task_type: "noop".into(),
            paused,
            changed,
        };
        assert_eq!(line(&p(true, true)), "paused type noop");
        assert_eq!(
            line(&p(true, false)),
            "type noop was already paused (nothing changed)"
        );
        assert_eq!(line(&p(false, true)), "resumed type noop");
        assert_eq!(
            line(&p(false, false)),
            "type noop was not paused (nothing changed)"
        );
        assert_eq!(
            serde_json::to_string(&p(true, false)).ok().as_deref(),
            Some(r#"{"task_type":"noop","paused":true,"changed":false}"#)
        );
    }
}
