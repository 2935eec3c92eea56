//! Service failpoints for tests (cargo feature `failpoints` only): make one service of a real
//! agent fail on purpose, at a moment the test chooses.
//!
//! `LEASEHOLD_FAILPOINT=SERVICE:ACTION[:FILE]` — once `FILE` exists (checked every 50 ms; at
//! once without a file), the service named `SERVICE` (`heartbeat`, `claimer`, `completer`, …)
//! stops running: `ACTION` `panic` panics in its task, `exit` makes it return as if it ended
//! by itself. Inert when the variable is unset or names another service; an unreadable
//! value is ignored with a warning. The service's own future is dropped, exactly as if it had
//! died there.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// The environment variable that arms a failpoint.
pub(super) const VAR: &str = "LEASEHOLD_FAILPOINT";
/// How often the trigger file is looked for.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Panic,
    Exit,
}

/// `service`, or — if a failpoint is armed for `name` — `service` until the failpoint fires.
pub(super) fn wrap<F>(name: &'static str, service: F) -> impl Future<Output = ()> + Send + 'static
where
    F: Future<Output = ()> + Send + 'static,
{
    let armed = armed_for(name);
    async move {
        let Some((action, file)) = armed else {
            return service.await;
        };
        tracing::warn!(service = name, ?action, ?file, "failpoint armed");
        tokio::select! {
            () = service => {}
            () = triggered(file) => fire(name, action),
        }
    }
}

fn armed_for(name: &str) -> Option<(Action, Option<PathBuf>)> {
    let value = std::env::var(VAR).ok()?;
    let mut parts = value.splitn(3, ':');
    let (service, action, file) = (parts.next()?, parts.next(), parts.next());
    if service != name {
        return None;
    }
    let action = match action {
        Some("panic") => Action::Panic,
        Some("exit") => Action::Exit,
        other => {
            tracing::warn!(
                value,
                ?other,
                "{VAR}: the action must be panic or exit; ignored"
            );
            return None;
        }
    };
    Some((action, file.map(PathBuf::from)))
}

async fn triggered(file: Option<PathBuf>) {
    let Some(file) = file else { return };
    while !file.exists() {
        tokio::time::sleep(POLL).await;
    }
}

#[allow(clippy::panic)] // the point of the failpoint
fn fire(name: &'static str, action: Action) {
    tracing::warn!(service = name, ?action, "failpoint fired");
    if action == Action::Panic {
        panic!("failpoint: the {name} service panics");
    }
}
