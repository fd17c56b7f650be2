//! The flow against a scripted driver, on paused time: every step, every
//! race with the context, every error and how it is counted.

use std::future::pending;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

use super::{GuardDriver, drive};
use crate::error::{BoxError, DbErrorKind, LostCause};
use crate::guard::{BoxFuture, GuardError};
use crate::guard_statement::GuardParams;
use crate::metrics::names;
use crate::metrics::testing::Recorded;
use crate::state::EndCause;
use crate::testing::Table;
use crate::{LeaseContext, Leases};

/// What a step of the scripted driver does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Succeeds at once.
    Ok,
    /// The database refuses it.
    Refused,
    /// The connection fails: no answer.
    Unanswered,
    /// Never answers.
    Hang,
}

/// The script: what each step does, and the term the guard finds.
#[derive(Debug, Clone, Copy)]
struct Script {
    connect: Act,
    open: Act,
    /// The term the guard finds; `None`: no row.
    found: Option<u64>,
    commit: Act,
    rollback: Act,
}

impl Script {
    /// Everything succeeds, the guard finding the term `term`.
    fn held(term: u64) -> Self {
        Script {
            connect: Act::Ok,
            open: Act::Ok,
            found: Some(term),
            commit: Act::Ok,
            rollback: Act::Ok,
        }
    }
}

#[derive(Debug)]
struct Failure {
    refused: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.refused {
            "refused"
        } else {
            "connection reset"
        })
    }
}

impl std::error::Error for Failure {}

/// A driver that plays a [`Script`] and writes down what the flow asked of
/// it.
struct Scripted {
    script: Script,
    log: Arc<Mutex<Vec<&'static str>>>,
}

impl Scripted {
    fn new(script: Script) -> Self {
        Scripted {
            script,
            log: Arc::default(),
        }
    }

    fn note(&self, what: &'static str) {
        self.log.lock().unwrap().push(what);
    }

    fn log(&self) -> Vec<&'static str> {
        self.log.lock().unwrap().clone()
    }

    async fn act(&self, act: Act) -> Result<(), Failure> {
        match act {
            Act::Ok => Ok(()),
            Act::Refused => Err(Failure { refused: true }),
            Act::Unanswered => Err(Failure { refused: false }),
            Act::Hang => pending().await,
        }
    }
}

impl GuardDriver for Scripted {
    type Conn = ();
    type Tx<'c> = Vec<&'static str>;
    type Error = Failure;

    async fn connect(&self) -> Result<(), Failure> {
        self.note("connect");
        self.act(self.script.connect).await
    }

    async fn open(
        &self,
        _conn: &mut (),
        params: GuardParams<'_>,
    ) -> Result<(Vec<&'static str>, Option<u64>), Failure> {
        assert_eq!(params.name, "job");
        self.note("open");
        self.act(self.script.open).await?;
        Ok((Vec::new(), self.script.found))
    }

    async fn commit<'c>(&self, tx: Vec<&'static str>) -> Result<(), Failure> {
        self.note("commit");
        self.act(self.script.commit).await?;
        self.log.lock().unwrap().extend(tx);
        Ok(())
    }

    async fn rollback<'c>(&self, _tx: Vec<&'static str>) -> Result<(), Failure> {
        self.note("rollback");
        self.act(self.script.rollback).await
    }

    async fn committed(&self, _conn: &mut ()) {
        self.note("committed");
    }

    fn abandon(&self, _conn: ()) {
        self.note("abandon");
    }

    fn classify(&self, error: &Failure) -> DbErrorKind {
        if error.refused {
            DbErrorKind::Other
        } else {
            DbErrorKind::Connection
        }
    }

    fn refused(&self, error: &Failure) -> bool {
        error.refused
    }
}

/// A context on a lease claimed in memory (term 1).
async fn context() -> LeaseContext {
    let leases = Leases::new(Table::new());
    let handle = leases.claim("job").await.unwrap().unwrap();
    LeaseContext::new(handle, CancellationToken::new())
}

/// A work that writes one statement and returns `Ok(1)`.
fn write<'a>(tx: &'a mut Vec<&'static str>) -> BoxFuture<'a, Result<u32, &'static str>> {
    Box::pin(async move {
        tx.push("INSERT");
        Ok(1)
    })
}

/// Runs `f` on a paused current-thread runtime with a recorder of its own.
fn recorded<F: Future<Output = ()>>(f: impl FnOnce() -> F) -> Recorded {
    let recorder = Recorded::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(f()));
    recorder
}

fn counted(rec: &Recorded) -> [u64; 3] {
    ["committed", "failed", "unknown"]
        .map(|outcome| rec.counter(names::GUARDED_TRANSACTIONS, &[("outcome", outcome)]))
}

#[test]
fn a_held_lease_commits_the_work() {
    let rec = recorded(|| async {
        let ctx = context().await;
        let driver = Scripted::new(Script::held(1));
        assert_eq!(drive(&ctx, &driver, write).await.unwrap(), 1);
        assert_eq!(
            driver.log(),
            ["connect", "open", "commit", "INSERT", "committed"]
        );
    });
    assert_eq!(counted(&rec), [1, 0, 0]);
}

#[test]
fn an_ended_context_sends_nothing() {
    let rec = recorded(|| async {
        let ctx = context().await;
        ctx.end(EndCause::Stopped);
        let driver = Scripted::new(Script::held(1));
        let err = drive(&ctx, &driver, write).await.unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Ended {
                    cause: Some(EndCause::Stopped),
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(driver.log().is_empty(), "{:?}", driver.log());
    });
    assert_eq!(counted(&rec), [0, 1, 0]);
}

#[test]
fn a_row_of_another_term_or_none_is_refused_and_the_work_never_runs() {
    let _ = recorded(|| async {
        let ctx = context().await;
        for found in [Some(2), Some(0), None] {
            let driver = Scripted::new(Script {
                found,
                ..Script::held(1)
            });
            let err = drive(
                &ctx,
                &driver,
                |_tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                    panic!("the work ran under a lease found {found:?}")
                },
            )
            .await
            .unwrap_err();
            assert!(
                matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::NotHolder)),
                "{err:?}"
            );
            assert_eq!(driver.log(), ["connect", "open", "rollback"]);
        }
    });
}

#[test]
fn the_works_error_rolls_back() {
    let _ = recorded(|| async {
        let ctx = context().await;
        let driver = Scripted::new(Script::held(1));
        let err = drive(
            &ctx,
            &driver,
            |tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                Box::pin(async move {
                    tx.push("INSERT");
                    Err("gave up")
                })
            },
        )
        .await
        .unwrap_err();
        assert_eq!(err.into_work(), Some("gave up"));
        assert_eq!(driver.log(), ["connect", "open", "rollback"]);

        // A rollback that fails leaves the connection to be abandoned; the
        // work's error is still what the caller gets.
        for rollback in [Act::Unanswered, Act::Hang] {
            let driver = Scripted::new(Script {
                rollback,
                ..Script::held(1)
            });
            let err = drive(
                &ctx,
                &driver,
                |_tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                    Box::pin(async { Err("gave up") })
                },
            )
            .await
            .unwrap_err();
            assert_eq!(err.into_work(), Some("gave up"));
            assert_eq!(driver.log(), ["connect", "open", "rollback", "abandon"]);
        }
    });
}

#[test]
fn the_context_ending_abandons_the_connection_at_every_step() {
    let _ = recorded(|| async {
        for step in ["connect", "open", "work"] {
            let ctx = context().await;
            let ender = ctx.clone();
            drop(tokio::spawn(async move {
                sleep(Duration::from_secs(1)).await;
                ender.end(EndCause::Lost(LostCause::DeadlineExceeded));
            }));
            let driver = Scripted::new(Script {
                connect: if step == "connect" {
                    Act::Hang
                } else {
                    Act::Ok
                },
                open: if step == "open" { Act::Hang } else { Act::Ok },
                ..Script::held(1)
            });
            let hang = step == "work";
            let err = drive(
                &ctx,
                &driver,
                move |tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                    Box::pin(async move {
                        tx.push("INSERT");
                        if hang {
                            pending::<()>().await;
                        }
                        Ok(())
                    })
                },
            )
            .await
            .unwrap_err();
            assert!(
                matches!(&err, GuardError::Lost(e) if e.lost_cause() == Some(LostCause::DeadlineExceeded)),
                "{step}: {err:?}"
            );
            let expected: &[&str] = match step {
                // No connection yet: nothing to abandon.
                "connect" => &["connect"],
                "open" => &["connect", "open", "abandon"],
                _ => &["connect", "open", "abandon"],
            };
            assert_eq!(driver.log(), expected, "{step}");
        }
    });
}

#[test]
fn a_context_that_ends_as_the_work_returns_rolls_back() {
    let _ = recorded(|| async {
        let ctx = context().await;
        let driver = Scripted::new(Script::held(1));
        let ender = ctx.clone();
        let err = drive(
            &ctx,
            &driver,
            move |_tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                Box::pin(async move {
                    ender.end(EndCause::ParentCancelled);
                    Ok(())
                })
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, GuardError::Ended { .. }), "{err:?}");
        assert_eq!(driver.log(), ["connect", "open", "rollback"]);
    });
}

#[test]
fn failures_before_commit_are_database_errors_of_their_kind() {
    let rec = recorded(|| async {
        let ctx = context().await;
        let driver = Scripted::new(Script {
            connect: Act::Unanswered,
            ..Script::held(1)
        });
        let err = drive(&ctx, &driver, write).await.unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Database {
                    kind: DbErrorKind::Connection,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_retryable(), "nothing was sent: retrying is safe");
        assert_eq!(driver.log(), ["connect"]);

        // An opening the database refused settles the connection; one it
        // did not answer abandons it.
        for (open, expected) in [
            (Act::Refused, &["connect", "open"][..]),
            (Act::Unanswered, &["connect", "open", "abandon"][..]),
        ] {
            let driver = Scripted::new(Script {
                open,
                ..Script::held(1)
            });
            let err = drive(&ctx, &driver, write).await.unwrap_err();
            assert!(matches!(err, GuardError::Database { .. }), "{err:?}");
            assert_eq!(driver.log(), expected);
        }
    });
    assert_eq!(counted(&rec), [0, 3, 0]);
}

#[test]
fn a_commit_the_database_refused_committed_nothing() {
    let rec = recorded(|| async {
        let ctx = context().await;
        let driver = Scripted::new(Script {
            commit: Act::Refused,
            ..Script::held(1)
        });
        let err = drive(&ctx, &driver, write).await.unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Database {
                    kind: DbErrorKind::Other,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.is_outcome_unknown());
        assert_eq!(driver.log(), ["connect", "open", "commit"]);
    });
    assert_eq!(counted(&rec), [0, 1, 0]);
}

/// Issue 23, item 11: once `COMMIT` was sent, an error that is not the
/// database's refusal says the outcome is unknown, is not retryable, is
/// counted as `unknown`, logged as a warning, and abandons the connection.
#[test]
fn a_commit_whose_answer_is_lost_has_an_unknown_outcome() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    lease_testkit::logs::every_callsite_interesting();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rec = recorded(|| async {
        let ctx = context().await;
        for commit in [Act::Unanswered, Act::Hang] {
            let driver = Scripted::new(Script {
                commit,
                ..Script::held(1)
            });
            let err = drive(&ctx, &driver, write).await.unwrap_err();
            assert!(err.is_outcome_unknown(), "{err:?}");
            assert!(!err.is_retryable(), "{err:?}");
            assert!(!err.is_lost(), "{err:?}");
            assert!(
                err.to_string().contains("may or may not have committed"),
                "{err}"
            );
            assert_eq!(driver.log(), ["connect", "open", "commit", "abandon"]);
        }
    });
    assert_eq!(counted(&rec), [0, 0, 2]);
    let text = logs.text();
    assert_eq!(
        text.matches("WARN").count(),
        2,
        "one warning for each unknown outcome: {text}"
    );
    assert!(
        text.contains("outcome unknown") && text.contains("name=\"job\""),
        "{text}"
    );
    assert!(!text.contains("not committed"), "{text}");
}

#[test]
fn a_panicking_work_abandons_the_connection_and_reaches_the_caller() {
    let _ = recorded(|| async {
        let ctx = context().await;
        let driver = Arc::new(Scripted::new(Script::held(1)));
        let joined = {
            let (ctx, driver) = (ctx.clone(), driver.clone());
            tokio::spawn(async move {
                drive(
                    &ctx,
                    &*driver,
                    |_tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                        Box::pin(async { panic!("in the work") })
                    },
                )
                .await
            })
            .await
        };
        assert!(joined.unwrap_err().is_panic());
        assert_eq!(driver.log(), ["connect", "open", "abandon"]);
    });
}

#[test]
fn a_dropped_call_abandons_the_connection() {
    let _ = recorded(|| async {
        let ctx = context().await;
        let driver = Scripted::new(Script::held(1));
        let call = drive(
            &ctx,
            &driver,
            |_tx: &mut Vec<&'static str>| -> BoxFuture<'_, Result<(), &'static str>> {
                Box::pin(pending())
            },
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(1), call)
                .await
                .is_err()
        );
        assert_eq!(driver.log(), ["connect", "open", "abandon"]);
    });
}

/// Formatted log output, as a subscriber writes it.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[test]
fn unknown_outcomes_box_and_display_as_their_own() {
    let err: GuardError<BoxError> = GuardError::OutcomeUnknown {
        name: "job".to_owned(),
        source: "connection reset".into(),
    };
    assert!(!err.is_retryable());
    let boxed = err.into_boxed();
    assert!(boxed.get().is_outcome_unknown());
    assert!(std::error::Error::source(&boxed).is_some());
    assert_eq!(
        format!("{boxed:?}"),
        "guarded transaction under lease \"job\": COMMIT was sent and its answer lost; \
         it may or may not have committed: connection reset"
    );
}
