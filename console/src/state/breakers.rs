//! The circuit breakers the header names: the types whose breaker is open or half-open in the
//! last overview, by name. A breaker state the wire breaks (an unknown word) is not named: the
//! Types view shows it as `?`.

use leasehold_shared::domain::BreakerState;

use super::Data;

/// The types whose breaker is not closed, each list by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakers {
    /// Not claimed until their cooldown ends.
    pub open: Vec<String>,
    /// One task at a time tries.
    pub half_open: Vec<String>,
}

impl Breakers {
    /// No breaker is open or half-open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.half_open.is_empty()
    }
}

impl Data {
    /// The open and half-open breakers of the overview.
    pub fn breakers(&self) -> Breakers {
        let mut out = Breakers::default();
        let types = self.overview.iter().flat_map(|o| o.types.iter());
        for ty in types {
            let state = ty.breaker.as_ref().and_then(|b| b.state.parse().ok());
            match state {
                Some(BreakerState::Open) => out.open.push(ty.task_type.clone()),
                Some(BreakerState::HalfOpen) => out.half_open.push(ty.task_type.clone()),
                Some(BreakerState::Closed) | None => {}
            }
        }
        out.open.sort();
        out.half_open.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use leasehold_proto::v1 as pb;

    use super::*;

    fn ty(name: &str, state: Option<&str>) -> pb::TypeSummary {
        pb::TypeSummary {
            task_type: name.into(),
            breaker: state.map(|s| pb::BreakerSummary {
                state: s.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn open_and_half_open_breakers_are_named_by_type() {
        let mut data = Data::default();
        assert!(data.breakers().is_empty());
        data.overview = Some(pb::GetOverviewResponse {
            types: vec![
                ty("z.open", Some("open")),
                ty("a.open", Some("open")),
                ty("half", Some("half_open")),
                ty("shut", Some("closed")),
                ty("odd", Some("ajar")),
                ty("none", None),
            ],
            ..Default::default()
        });
        assert_eq!(
            data.breakers(),
            Breakers {
                open: vec!["a.open".into(), "z.open".into()],
                half_open: vec!["half".into()],
            }
        );
    }
}
