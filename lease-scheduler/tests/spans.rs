//! The span of each round (issue 26, item 5): its name and fields, and the
//! lease's span (where the job's own events are) nested in it, so that a
//! round shows in OpenTelemetry (`tracing-opentelemetry`) as one span with
//! the job's work inside. A binary of its own, with a subscriber that keeps
//! every span (see `tests/logs.rs` on why captures get their own binary).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{T0, TestStore, secs};
use lease_core::{CancellationToken, Leases};
use lease_scheduler::{Job, Round, Scheduler};
use tokio::time::sleep;

/// A span as opened: its name, its fields (as recorded, later records
/// included) and its parent's id.
#[derive(Debug, Clone, Default)]
struct Opened {
    name: String,
    fields: BTreeMap<String, String>,
    parent: Option<u64>,
}

#[derive(Default)]
struct State {
    spans: BTreeMap<u64, Opened>,
    /// The spans entered, innermost last (the paused tests run on one thread).
    stack: Vec<u64>,
    /// Each event's message and the spans it was in, innermost last.
    events: Vec<(String, Vec<u64>)>,
}

#[derive(Clone, Default)]
struct Spans {
    state: Arc<Mutex<State>>,
    next: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        let _ = self.0.insert(field.name().to_owned(), text);
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        let _ = self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut s = self.state.lock().unwrap();
        let parent = match attrs.parent() {
            Some(p) => Some(p.into_u64()),
            None if attrs.is_contextual() => s.stack.last().copied(),
            None => None,
        };
        let mut opened = Opened {
            name: attrs.metadata().name().to_owned(),
            parent,
            ..Opened::default()
        };
        attrs.record(&mut Fields(&mut opened.fields));
        let _ = s.spans.insert(id, opened);
        tracing::span::Id::from_u64(id)
    }

    fn record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut s = self.state.lock().unwrap();
        if let Some(span) = s.spans.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let mut s = self.state.lock().unwrap();
        let stack = s.stack.clone();
        s.events
            .push((fields.remove("message").unwrap_or_default(), stack));
    }

    fn enter(&self, id: &tracing::span::Id) {
        self.state.lock().unwrap().stack.push(id.into_u64());
    }

    fn exit(&self, id: &tracing::span::Id) {
        let mut s = self.state.lock().unwrap();
        if let Some(at) = s.stack.iter().rposition(|&x| x == id.into_u64()) {
            let _ = s.stack.remove(at);
        }
    }
}

async fn until(store: &TestStore, at_ms: i64) {
    let left = T0 + at_ms - store.now();
    sleep(Duration::from_millis(u64::try_from(left).unwrap())).await;
}

#[tokio::test(start_paused = true)]
async fn each_round_is_a_span_with_its_fields_and_the_jobs_work_inside() {
    let spans = Spans::default();
    lease_testkit::logs::every_callsite_interesting();
    let _guard = tracing::subscriber::set_default(spans.clone());
    let store = TestStore::new();
    let leases = Leases::new(store.clone()).with_instance("a").unwrap();
    let scheduler = Scheduler::builder(leases)
        .job(Job::new("tick", "@every 10s", |_round: Round| async {
            tracing::info!("the job's own work");
            Ok(())
        }))
        .job(Job::new("local", "@every 10s", |_round: Round| async { Ok(()) }).per_instance())
        .build()
        .unwrap();
    until(&store, 1_000).await;
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let running = tokio::spawn(async move { scheduler.run(&token, secs(5)).await });
    until(&store, 21_000).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();

    let s = spans.state.lock().unwrap();
    let rounds: Vec<(&u64, &Opened)> = s
        .spans
        .iter()
        .filter(|(_, o)| o.name == "round" && o.fields["job"] == "\"tick\"")
        .collect();
    assert_eq!(rounds.len(), 2, "{:#?}", s.spans);
    let (id, round) = rounds[1];
    let field = |k: &str| round.fields.get(k).map(String::as_str);
    assert_eq!(field("instant"), Some("2025-12-01T10:00:20.000Z"));
    assert_eq!(field("term"), Some("2"));
    assert_eq!(field("rerun"), Some("false"));
    assert_eq!(field("catch_up"), Some("false"));
    assert_eq!(field("late_ms"), Some("0"));
    // The round's span is in the scheduler's.
    let parent = &s.spans[&round.parent.unwrap()];
    assert_eq!(parent.name, "scheduler");
    // The lease's span is opened in the round's, and the job's events are
    // in both.
    let (lease, _) = s
        .spans
        .iter()
        .find(|(_, o)| o.name == "lease" && o.parent == Some(*id))
        .expect("the lease's span in the round's");
    let inside: Vec<_> = s
        .events
        .iter()
        .filter(|(m, _)| m == "the job's own work")
        .collect();
    assert_eq!(inside.len(), 2);
    let (_, stack) = inside[1];
    assert!(stack.contains(lease), "{stack:?}");
    // The scheduler's events of the round are in its span.
    let started: Vec<_> = s
        .events
        .iter()
        .filter(|(m, stack)| m == "round started" && stack.last() == Some(id))
        .collect();
    assert_eq!(started.len(), 1, "{:#?}", s.events);
    // A per-instance round has its span too, without a term.
    let local = s
        .spans
        .values()
        .find(|o| o.name == "round" && o.fields["job"] == "\"local\"")
        .expect("the per-instance round's span");
    assert!(!local.fields.contains_key("term"), "{local:?}");
    assert_eq!(local.fields.get("late_ms").map(String::as_str), Some("0"));
}
