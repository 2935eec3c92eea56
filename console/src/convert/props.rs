//! Property tests of wire → view conversion (issue 18). Replies come from an agent, which may
//! be of another version, buggy or not an agent at all: every converter here must turn any
//! message into a view or a [`WireError`], never a panic, and an error must name a field the
//! schema has.
//!
//! Messages are generated from the schema itself (`leasehold_proto::FILE_DESCRIPTOR_SET`):
//! a tape of random numbers drives, field by field, which fields are set and to what
//! (edge integers, JSON and non-JSON text, control characters, unknown enum numbers, nested
//! and repeated messages), so every field of every reply is exercised, new fields included,
//! and proptest shrinks a failing tape to the simplest message that still fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use leasehold_proto::v1;
use proptest::prelude::*;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

use super::agent::{AgentList, LeaderView};
use super::overview::TypeList;
use super::rate::{FillView, RateView};
use super::resource::{GroupList, GroupShards, GroupView, LockList, LockView};
use super::schedule::{ScheduleList, ScheduleView};
use super::task::{TaskDetail, TaskPage, TaskView};
use super::{WireError, watch};

/// Every message of the schema by full name (`.leasehold.v1.Task`), and every field name.
struct Schema {
    messages: HashMap<String, DescriptorProto>,
    field_names: BTreeSet<String>,
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let set = FileDescriptorSet::decode(leasehold_proto::FILE_DESCRIPTOR_SET).unwrap();
        let mut messages = HashMap::new();
        let mut field_names = BTreeSet::new();
        fn walk(
            prefix: &str,
            m: &DescriptorProto,
            out: &mut HashMap<String, DescriptorProto>,
            names: &mut BTreeSet<String>,
        ) {
            let name = format!("{prefix}.{}", m.name());
            for f in &m.field {
                names.insert(f.name().to_string());
            }
            for nested in &m.nested_type {
                walk(&name, nested, out, names);
            }
            out.insert(name, m.clone());
        }
        for file in &set.file {
            for m in &file.message_type {
                walk(
                    &format!(".{}", file.package()),
                    m,
                    &mut messages,
                    &mut field_names,
                );
            }
        }
        Schema {
            messages,
            field_names,
        }
    })
}

/// The random choices a message is built from; an exhausted tape reads zeros (field unset).
struct Tape<'a>(std::slice::Iter<'a, u64>);

impl Tape<'_> {
    fn next(&mut self) -> u64 {
        self.0.next().copied().unwrap_or(0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Unix ms of 9999-12-31T23:59:59.999Z, the last time chrono-friendly views expect.
const MAX_MS: i64 = 253_402_300_799_999;

fn int(tape: &mut Tape<'_>) -> i64 {
    const EDGES: [i64; 12] = [
        0,
        1,
        -1,
        i64::MIN,
        i64::MAX,
        i32::MAX as i64 + 1,
        i16::MAX as i64 + 1,
        MAX_MS,
        MAX_MS + 1,
        8_210_298_412_800_001,
        1_764_588_000_000,
        -62_135_596_800_001,
    ];
    match tape.below(4) {
        0 => EDGES[tape.below(EDGES.len() as u64) as usize],
        // Plausible values (ids, counts, times up to 2033) most of the time, so conversions
        // get past their first check and reach the later ones.
        1 | 2 => 1 + tape.below(2_000_000_000_000) as i64,
        _ => tape.next() as i64,
    }
}

fn string(tape: &mut Tape<'_>, field: &str) -> String {
    const JSON: [&str; 5] = [
        "{}",
        "{\"a\": [1, 2.5, null, \"x\"]}",
        "[1,2,3]",
        "null",
        "\"\\u001b[2J\"",
    ];
    if field.ends_with("_json") && tape.below(4) != 0 {
        return JSON[tape.below(JSON.len() as u64) as usize].to_string();
    }
    const TEXTS: [&str; 14] = [
        "",
        "{}",
        "{\"a\": [1, 2.5, null, \"x\"]}",
        "[1,2,3]",
        "null",
        "not json",
        "{\"unterminated\": ",
        "\u{1b}[2J\u{1b}]0;pwned\u{7}",
        "\u{202e}evil\u{202c}",
        "a\u{0}b",
        "queued",
        "running",
        "held",
        "1e999",
    ];
    match tape.below(4) {
        0 => TEXTS[tape.below(TEXTS.len() as u64) as usize].to_string(),
        1 => "é".repeat(tape.below(2000) as usize),
        2 => {
            let n = tape.below(12);
            (0..n)
                .map(|_| char::from_u32(tape.below(0x11_0000) as u32).unwrap_or('?'))
                .collect()
        }
        _ => format!("{}", tape.next()),
    }
}

/// Appends one field value to `buf`.
fn value(
    tape: &mut Tape<'_>,
    field: &prost_types::FieldDescriptorProto,
    depth: u32,
    buf: &mut Vec<u8>,
) {
    let tag = u32::try_from(field.number()).unwrap();
    match field.r#type() {
        Type::Int64 | Type::Uint64 | Type::Int32 | Type::Uint32 | Type::Enum | Type::Bool => {
            let v = match field.r#type() {
                Type::Bool => tape.below(2),
                Type::Enum => (tape.below(14) as i64 - 2) as u64,
                Type::Int32 => int(tape) as i32 as i64 as u64,
                Type::Uint32 => u64::from(int(tape) as u32),
                _ => int(tape) as u64,
            };
            encode_key(tag, WireType::Varint, buf);
            encode_varint(v, buf);
        }
        Type::Sint64 | Type::Sint32 => {
            let v = int(tape);
            encode_key(tag, WireType::Varint, buf);
            encode_varint(((v << 1) ^ (v >> 63)) as u64, buf);
        }
        Type::Double | Type::Fixed64 | Type::Sfixed64 => {
            encode_key(tag, WireType::SixtyFourBit, buf);
            buf.extend_from_slice(&tape.next().to_le_bytes());
        }
        Type::Float | Type::Fixed32 | Type::Sfixed32 => {
            encode_key(tag, WireType::ThirtyTwoBit, buf);
            buf.extend_from_slice(&(tape.next() as u32).to_le_bytes());
        }
        Type::String | Type::Bytes => {
            let s = string(tape, field.name());
            encode_key(tag, WireType::LengthDelimited, buf);
            encode_varint(s.len() as u64, buf);
            buf.extend_from_slice(s.as_bytes());
        }
        Type::Message => {
            let inner = if depth >= 4 {
                Vec::new()
            } else {
                message(tape, field.type_name(), depth + 1)
            };
            encode_key(tag, WireType::LengthDelimited, buf);
            encode_varint(inner.len() as u64, buf);
            buf.extend_from_slice(&inner);
        }
        Type::Group => {}
    }
}

/// An encoded message of type `name`, every field chosen from the tape.
fn message(tape: &mut Tape<'_>, name: &str, depth: u32) -> Vec<u8> {
    let Some(m) = schema().messages.get(name) else {
        return Vec::new();
    };
    let mut buf = Vec::new();
    for field in &m.field {
        let times = if field.label() == Label::Repeated {
            tape.below(4)
        } else {
            u64::from(tape.below(4) != 0)
        };
        for _ in 0..times {
            value(tape, field, depth, &mut buf);
        }
    }
    buf
}

fn encoded<M: Message + Default>(name: &str, tape: &[u64]) -> M {
    let bytes = message(&mut Tape(tape.iter()), &format!(".leasehold.v1.{name}"), 0);
    M::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("the generator wrote a bad {name}: {e}"))
}

/// An error must name a field of the schema (or say which message is missing).
fn names_a_field(e: &WireError) -> Result<(), TestCaseError> {
    let names = &schema().field_names;
    match e {
        WireError::Status(_) | WireError::Broken(_) => Ok(()),
        WireError::InTask { source, .. } => names_a_field(source),
        WireError::MissingField(f)
        | WireError::Json { field: f, .. }
        | WireError::Time { field: f, .. }
        | WireError::OutOfRange { field: f, .. } => {
            // A field may be qualified by where it sits (`lease started_at_ms`).
            let last = f.rsplit([' ', '.']).next().unwrap_or(f);
            prop_assert!(
                names.contains(last),
                "{e} names {f:?}, which no message has"
            );
            Ok(())
        }
    }
}

fn check<T>(got: Result<T, WireError>) -> Result<(), TestCaseError> {
    match got {
        Ok(_) => Ok(()),
        Err(e) => names_a_field(&e),
    }
}

fn tape() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(any::<u64>(), 0..400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_reply_converts_or_is_refused_by_field(t in tape(), now_ms in any::<i64>()) {
        check(TaskView::from_wire(encoded("Task", &t)))?;
        check(TaskDetail::from_wire(encoded("GetTaskResponse", &t)))?;
        check(TaskPage::from_wire(encoded("ListTasksResponse", &t)))?;
        check(AgentList::from_wire(encoded("ListAgentsResponse", &t)))?;
        check(LeaderView::from_wire(encoded("LeaderInfo", &t)))?;
        check(LockView::from_wire(encoded("ResourceLease", &t), now_ms))?;
        check(LockList::from_wire(encoded("ListLocksResponse", &t)))?;
        check(GroupView::from_wire(encoded("ShardGroup", &t)))?;
        check(GroupList::from_wire(encoded("ListShardGroupsResponse", &t)))?;
        check(GroupShards::from_wire(encoded("ListShardsResponse", &t)))?;
        check(ScheduleView::from_wire(encoded("Schedule", &t)))?;
        check(ScheduleList::from_wire(encoded("ListSchedulesResponse", &t)))?;
        check(TypeList::from_wire(&encoded("GetOverviewResponse", &t)))?;
        check(RateView::from_wire(&encoded("RateLimit", &t)))?;
        check(FillView::from_wire(&encoded("RateFill", &t)))?;
        check(watch::lines(encoded("WatchUpdate", &t)))?;
    }

    #[test]
    fn generated_messages_survive_a_wire_round_trip(t in tape()) {
        let task: v1::Task = encoded("Task", &t);
        prop_assert_eq!(v1::Task::decode(task.encode_to_vec().as_slice()).unwrap(), task);
        let update: v1::WatchUpdate = encoded("WatchUpdate", &t);
        prop_assert_eq!(v1::WatchUpdate::decode(update.encode_to_vec().as_slice()).unwrap(), update);
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_converter(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(m) = v1::Task::decode(bytes.as_slice()) {
            check(TaskView::from_wire(m))?;
        }
        if let Ok(m) = v1::WatchUpdate::decode(bytes.as_slice()) {
            check(watch::lines(m))?;
        }
        if let Ok(m) = v1::ListShardsResponse::decode(bytes.as_slice()) {
            check(GroupShards::from_wire(m))?;
        }
    }

    #[test]
    fn valid_tasks_round_trip_into_their_view(
        id in 1i64..=i64::MAX,
        status in 1i32..=8,
        priority in any::<i16>(),
        attempt in 0i32..1000,
        n in any::<i64>(),
        created in 1i64..=MAX_MS,
        owner in "[a-z0-9#-]{0,20}",
    ) {
        let wire = v1::Task {
            id,
            task_type: "email.send".into(),
            status,
            payload_json: format!("{{\"n\": {n}}}"),
            priority: i32::from(priority),
            attempt,
            max_attempts: attempt + 1,
            lease_owner: owner.clone(),
            lease_epoch: n,
            created_at_ms: created,
            ..v1::Task::default()
        };
        let view = TaskView::from_wire(wire).unwrap();
        prop_assert_eq!(view.id, id);
        prop_assert_eq!(super::wire_status(view.status) as i32, status);
        prop_assert_eq!(view.payload, serde_json::json!({"n": n}));
        prop_assert_eq!(view.priority, priority);
        prop_assert_eq!((view.attempt, view.max_attempts), (attempt, attempt + 1));
        prop_assert_eq!(view.lease_owner, (!owner.is_empty()).then_some(owner));
        prop_assert_eq!(view.created_at.map(|t| t.millis()), Some(created));
        prop_assert_eq!(view.deadline_at, None);
    }
}

/// Positive control: the generator knows the schema and reaches both outcomes, so the
/// properties above are not passing on empty messages.
#[test]
fn the_generator_reaches_accepted_and_refused_replies() {
    assert!(schema().messages.contains_key(".leasehold.v1.Task"));
    assert!(schema().messages.contains_key(".leasehold.v1.WatchUpdate"));
    let mut rng = fastrand::Rng::with_seed(18);
    let (mut ok, mut refused, mut filled) = (0, 0, 0);
    for _ in 0..2000 {
        let tape: Vec<u64> = (0..400).map(|_| rng.u64(..)).collect();
        let task: v1::Task = encoded("Task", &tape);
        filled += usize::from(!task.payload_json.is_empty() && task.id != 0);
        match TaskView::from_wire(task) {
            Ok(_) => ok += 1,
            Err(e) => {
                refused += 1;
                names_a_field(&e).unwrap();
            }
        }
    }
    assert!(
        ok > 0 && refused > 0 && filled > 0,
        "ok {ok}, refused {refused}, filled {filled}"
    );
}
