//! The suite has teeth: deliberately broken stores fail the cases that check
//! the rule they break, and the mapping names every case.

use std::collections::HashSet;
use std::sync::Arc;

use lease_conformance::reference::{CAUGHT_BY, Fault, MemoryStore};
use lease_conformance::{CASES, MAPPING, Outcome, case, factory, run_case};
use lease_core::LeaseStore;

fn broken(fault: Fault) -> lease_conformance::Factory {
    factory(move || async move {
        Some((
            Arc::new(MemoryStore::with_fault(fault)) as Arc<dyn LeaseStore>,
            (),
        ))
    })
}

#[test]
fn every_fault_is_caught_by_its_cases() {
    let mut escaped = Vec::new();
    for &(fault, cases) in CAUGHT_BY {
        assert!(!cases.is_empty(), "{fault:?} names no case");
        for &name in cases {
            let Some(f) = case(name) else {
                panic!("{fault:?} names {name}, which is not a case of the suite");
            };
            match run_case(name, f, &broken(fault)) {
                Outcome::Failed(failure) => {
                    eprintln!("{fault:?} caught by {name}: {}", failure.message);
                }
                other => escaped.push(format!("{fault:?} was not caught by {name}: {other:?}")),
            }
        }
    }
    assert!(
        escaped.is_empty(),
        "broken stores passed cases:\n{}",
        escaped.join("\n")
    );
}

#[test]
fn a_correct_store_passes_the_cases_the_faults_fail() {
    let correct =
        factory(|| async { Some((Arc::new(MemoryStore::new()) as Arc<dyn LeaseStore>, ())) });
    let names: HashSet<&str> = CAUGHT_BY
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .collect();
    for name in names {
        let f = case(name).unwrap();
        assert_eq!(run_case(name, f, &correct), Outcome::Passed, "{name}");
    }
}

#[test]
fn the_suite_has_at_least_forty_cases_with_distinct_names() {
    let names: HashSet<&str> = CASES.iter().map(|(n, _)| *n).collect();
    assert_eq!(names.len(), CASES.len(), "case names must be unique");
    assert!(CASES.len() >= 40, "only {} cases", CASES.len());
}

#[test]
fn mapping_names_every_case_and_only_cases() {
    let cases: HashSet<&str> = CASES.iter().map(|(n, _)| *n).collect();
    let mut mapped = HashSet::new();
    for (behaviour, names) in MAPPING {
        assert!(!names.is_empty(), "{behaviour} has no case");
        for name in *names {
            assert!(
                cases.contains(name),
                "the mapping names {name}, which is not a case"
            );
            let _ = mapped.insert(*name);
        }
    }
    let unmapped: Vec<&&str> = cases.difference(&mapped).collect();
    assert!(
        unmapped.is_empty(),
        "cases missing from the mapping: {unmapped:?}"
    );
}

#[test]
fn a_factory_that_gives_no_store_skips() {
    let none = factory(|| async { None::<(Arc<dyn LeaseStore>, ())> });
    let (name, f) = CASES[0];
    assert_eq!(run_case(name, f, &none), Outcome::Skipped);
}
