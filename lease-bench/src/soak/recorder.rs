//! What a contender writes to the history, and the store that records the
//! claims the capabilities make.
//!
//! The lock, the leader and the scheduler claim their names themselves; the
//! soak cannot write `try` before each claim from outside. So their store is
//! wrapped in a `RecordingStore`: every claim it forwards (`claim`,
//! `claim_instant`, `claim_rerun`) is written as an attempt before it is sent,
//! with a lower bound on the database's clock, and its outcome after it
//! returned: refused, failed (unknown: the claim may have taken effect), or
//! claimed, remembered by name and term so that the work that runs under it
//! writes its tenure (`claim`, then `stop`) under the attempt's number. A
//! `finish` that recorded a round's end while its holder still held the name
//! is written as `finished`. The checker then judges the capabilities'
//! names by the same rules as the raw leases'.

use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use lease_core::{
    BoxError, ClaimRequest, DbErrorKind, FinishRequest, Finished, ForwardingStore, InstantClaim,
    LeaseStore, Token,
};
use tokio::time::{Instant, timeout};

use super::CLOCK_READ_BOUND;
use crate::clock::DbClock;
use crate::history::Event;

/// Writes one event to standard output, the orchestrator's pipe.
pub(crate) fn emit(event: &Event) {
    let mut out = std::io::stdout().lock();
    // A closed pipe means the orchestrator is gone: nothing left to tell.
    let _ = writeln!(out, "{}", event.to_line());
    let _ = out.flush();
}

/// A contender's recording: its name, its attempts' numbers, its calibration
/// of the database's clock, and the claims its capabilities won.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) instance: String,
    pub(crate) clock: DbClock,
    seq: AtomicU64,
    won: Mutex<Won>,
}

/// Attempts that claimed, by what the capabilities see of them.
#[derive(Debug, Default)]
struct Won {
    /// By name and term: the work knows its term.
    by_term: HashMap<(String, u64), u64>,
    /// By holder token: `finish` names the holder.
    by_holder: HashMap<String, u64>,
}

impl Recorder {
    pub(crate) fn new(instance: &str) -> Self {
        Recorder {
            instance: instance.to_owned(),
            clock: DbClock::new(),
            seq: AtomicU64::new(1),
            won: Mutex::default(),
        }
    }

    /// A fresh attempt number.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    /// The attempt that claimed `name` with `term`, if this process's did.
    pub(crate) fn claimed(&self, name: &str, term: u64) -> Option<u64> {
        self.won
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_term
            .get(&(name.to_owned(), term))
            .copied()
    }

    fn won(&self, seq: u64, name: &str, term: u64, holder: &str) {
        let mut won = self.won.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = won.by_term.insert((name.to_owned(), term), seq);
        let _ = won.by_holder.insert(holder.to_owned(), seq);
    }

    fn by_holder(&self, holder: &str) -> Option<u64> {
        self.won
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_holder
            .get(holder)
            .copied()
    }

    fn settled(&self, seq: u64, refused: bool) {
        let instance = self.instance.clone();
        emit(&if refused {
            Event::Refused { instance, seq }
        } else {
            Event::Failed { instance, seq }
        });
    }
}

/// No bound on the database's clock could be had: the claim is not sent.
#[derive(Debug)]
struct NoClockBound;

impl fmt::Display for NoClockBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no recent reading of the database's clock: the claim was not sent")
    }
}

impl std::error::Error for NoClockBound {}

/// A store that writes the claims it forwards to the history (see the
/// [module docs](self)); every other statement is forwarded as it is.
#[derive(Debug)]
pub(crate) struct RecordingStore {
    inner: Arc<dyn LeaseStore>,
    rec: Arc<Recorder>,
}

impl RecordingStore {
    pub(crate) fn new(inner: Arc<dyn LeaseStore>, rec: Arc<Recorder>) -> Self {
        RecordingStore { inner, rec }
    }

    /// Writes the attempt at `name`, with a lower bound on when the claim
    /// runs: the calibration's, or a fresh read of the database's clock
    /// (the claim is sent after the read returned). Without either, the
    /// claim is not sent at all.
    async fn attempt(&self, name: &str) -> Result<u64, BoxError> {
        let sent_ms = match self.rec.clock.lower(Instant::now()) {
            Some(ms) => ms,
            None => {
                let sent = Instant::now();
                match timeout(CLOCK_READ_BOUND, self.inner.now_ms()).await {
                    Ok(Ok(now)) => {
                        self.rec.clock.observe(sent, Instant::now(), now);
                        now
                    }
                    _ => return Err(Box::new(NoClockBound)),
                }
            }
        };
        let seq = self.rec.next_seq();
        emit(&Event::Try {
            name: name.to_owned(),
            instance: self.rec.instance.clone(),
            seq,
            sent_ms,
        });
        Ok(seq)
    }

    fn settle<T>(&self, seq: u64, out: &Result<T, BoxError>, won: impl FnOnce(&T) -> bool) {
        match out {
            Ok(v) if won(v) => {}
            Ok(_) => self.rec.settled(seq, true),
            Err(_) => self.rec.settled(seq, false),
        }
    }
}

#[async_trait]
impl ForwardingStore for RecordingStore {
    fn inner(&self) -> &dyn LeaseStore {
        &*self.inner
    }

    async fn claim(&self, claim: ClaimRequest<'_>) -> Result<Option<u64>, BoxError> {
        let ClaimRequest { name, token, .. } = claim;
        let seq = self.attempt(name).await?;
        let out = self.inner.claim(claim).await;
        self.settle(seq, &out, |claimed| match claimed {
            Some(term) => {
                self.rec.won(seq, name, *term, token.expose());
                true
            }
            None => false,
        });
        out
    }

    async fn claim_instant(
        &self,
        claim: ClaimRequest<'_>,
        slot_ms: i64,
    ) -> Result<InstantClaim, BoxError> {
        let ClaimRequest { name, token, .. } = claim;
        let seq = self.attempt(name).await?;
        let out = self.inner.claim_instant(claim, slot_ms).await;
        self.settle(seq, &out, |claimed| match claimed {
            InstantClaim::Claimed { term, .. } => {
                self.rec.won(seq, name, *term, token.expose());
                true
            }
            InstantClaim::Refused => false,
        });
        out
    }

    async fn finish(&self, finish: FinishRequest<'_>) -> Result<Finished, BoxError> {
        let holder = finish.token.map(Token::expose);
        let out = self.inner.finish(finish).await;
        // Only an end recorded while the holder still held the name is sure
        // to come before any second claim of the instant: one recorded
        // without the lease may come after a rerun was claimed.
        if let (Ok(Finished::Released), Some(seq)) =
            (&out, holder.and_then(|h| self.rec.by_holder(h)))
        {
            emit(&Event::Finished {
                instance: self.rec.instance.clone(),
                seq,
            });
        }
        out
    }

    async fn claim_rerun(&self, claim: ClaimRequest<'_>, term: u64) -> Result<bool, BoxError> {
        let ClaimRequest { name, token, .. } = claim;
        let seq = self.attempt(name).await?;
        let out = self.inner.claim_rerun(claim, term).await;
        self.settle(seq, &out, |&claimed| {
            if claimed {
                self.rec.won(seq, name, term + 1, token.expose());
            }
            claimed
        });
        out
    }

    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> DbErrorKind {
        if error.is::<NoClockBound>() {
            // As good as a database out of reach: try again later.
            DbErrorKind::Connection
        } else {
            self.inner.classify(error)
        }
    }
}
