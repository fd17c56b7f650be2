//! Round trips counted on the wire: what a client sends, parsed into the
//! protocol's messages, chunk by chunk as a proxy sees them
//! ([`lease_conformance::proxy::Proxy::start_observed`]).
//!
//! A round trip is a wait for the server. The client sends requests that
//! want an answer (PostgreSQL: `Sync` and simple `Query`; MySQL: every
//! command but `COM_STMT_CLOSE` and `COM_QUIT`), and requests it sends
//! together, without waiting between them (pipelined), reach the proxy in
//! one read. So the count is of the chunks in which at least one request
//! that wants an answer ends: one per round trip, however many requests it
//! carries. A chunk is at most one read of the proxy's buffer; a request
//! split over several chunks counts in the one where it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::url::Backend;

/// The round trips seen so far, shared by the observers of every
/// connection.
#[derive(Debug, Default)]
pub struct RoundTrips(AtomicU64);

impl RoundTrips {
    /// The count so far.
    #[must_use]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Parses what one connection's client sends and counts its round trips.
#[derive(Debug)]
pub struct Observer {
    backend: Backend,
    /// PostgreSQL's startup message (and an SSL or GSS request) has no type
    /// byte.
    startup: bool,
    pending: Vec<u8>,
    count: Arc<RoundTrips>,
}

impl Observer {
    /// An observer of a new connection to a `backend` server, counting into
    /// `count`.
    #[must_use]
    pub fn new(backend: Backend, count: Arc<RoundTrips>) -> Observer {
        Observer {
            backend,
            startup: backend == Backend::Postgres,
            pending: Vec::new(),
            count,
        }
    }

    /// One chunk of what the client sent.
    pub fn chunk(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let mut answered = false;
        while let Some((len, wants_answer)) = self.next_message() {
            answered |= wants_answer;
            let _ = self.pending.drain(..len);
        }
        if answered {
            let _ = self.count.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The length of the first whole message pending, and whether it wants
    /// an answer; `None` until one is whole.
    fn next_message(&mut self) -> Option<(usize, bool)> {
        match self.backend {
            Backend::Postgres => {
                let at = usize::from(!self.startup);
                let len = self.pending.get(at..at + 4)?;
                let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
                let total = at + len;
                if self.pending.len() < total {
                    return None;
                }
                let wants = if self.startup {
                    // The startup message, or an SSLRequest / GSSENCRequest
                    // answered before the real startup: not a statement's
                    // round trip; a real startup ends the typeless messages.
                    let code = self.pending.get(4..8)?;
                    let code = u32::from_be_bytes(code.try_into().ok()?);
                    // 80877103: SSLRequest, 80877104: GSSENCRequest.
                    if code != 80_877_103 && code != 80_877_104 {
                        self.startup = false;
                    }
                    false
                } else {
                    matches!(self.pending.first(), Some(b'S' | b'Q'))
                };
                Some((total.max(1), wants))
            }
            Backend::MySql => {
                let head = self.pending.get(..4)?;
                let len =
                    usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
                let total = 4 + len;
                if self.pending.len() < total {
                    return None;
                }
                // A command starts a sequence (id 0); the handshake response
                // and the authentication's answers do not (id >= 1).
                let command = (head[3] == 0 && len > 0).then(|| self.pending[4]);
                // 0x19 COM_STMT_CLOSE and 0x01 COM_QUIT get no answer.
                let wants = matches!(command, Some(c) if c != 0x19 && c != 0x01);
                Some((total, wants))
            }
            Backend::Sqlite => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn pg_startup() -> Vec<u8> {
        let mut body = 196_608u32.to_be_bytes().to_vec(); // protocol 3.0
        body.extend_from_slice(b"user\0postgres\0\0");
        let mut m = (body.len() as u32 + 4).to_be_bytes().to_vec();
        m.extend_from_slice(&body);
        m
    }

    fn my(seq: u8, body: &[u8]) -> Vec<u8> {
        let len = body.len();
        let mut m = vec![len as u8, (len >> 8) as u8, (len >> 16) as u8, seq];
        m.extend_from_slice(body);
        m
    }

    fn count(backend: Backend, chunks: &[Vec<u8>]) -> u64 {
        let trips = Arc::new(RoundTrips::default());
        let mut o = Observer::new(backend, trips.clone());
        for c in chunks {
            o.chunk(c);
        }
        trips.get()
    }

    /// The startup is no round trip; each Sync or Query sent on its own is
    /// one; Parse, Bind, Describe and Execute before a Sync are the same
    /// round trip as that Sync.
    #[test]
    fn postgres_counts_syncs_and_queries() {
        let mut ssl = 8u32.to_be_bytes().to_vec();
        ssl.extend_from_slice(&80_877_103u32.to_be_bytes());
        let extended = [
            pg(b'P', b"\0SELECT 1\0\0\0"),
            pg(b'B', b"\0\0\0\0\0\0\0\0"),
            pg(b'E', b"\0\0\0\0\0"),
            pg(b'S', b""),
        ]
        .concat();
        let chunks = vec![
            ssl,
            pg_startup(),
            pg(b'p', b"secret\0"),
            extended.clone(),
            pg(b'Q', b"BEGIN\0"),
        ];
        assert_eq!(count(Backend::Postgres, &chunks), 2);
    }

    /// Requests sent together (pipelined) are one round trip; a message
    /// split over two chunks counts in the chunk where it ends.
    #[test]
    fn pipelined_requests_are_one_round_trip_and_split_messages_count_once() {
        let begin_and_verify = [
            pg(b'Q', b"BEGIN\0"),
            pg(b'B', b"\0\0\0\0\0\0\0\0"),
            pg(b'E', b"\0\0\0\0\0"),
            pg(b'S', b""),
        ]
        .concat();
        let big = pg(b'Q', &vec![b'x'; 40_000]);
        let (head, tail) = big.split_at(16_384);
        let chunks = vec![pg_startup(), begin_and_verify, head.to_vec(), tail.to_vec()];
        assert_eq!(count(Backend::Postgres, &chunks), 2);
    }

    /// MySQL: each command is a round trip but COM_STMT_CLOSE (no answer);
    /// the handshake response (sequence 1) is none.
    #[test]
    fn mysql_counts_commands_that_get_an_answer() {
        let chunks = vec![
            my(1, b"handshake response"),
            my(0, &[0x16, b'S']), // COM_STMT_PREPARE
            [my(0, &[0x19, 1, 0, 0, 0]), my(0, &[0x17, 1, 0, 0, 0])].concat(), // close + execute
            my(0, &[0x03, b'C', b'O', b'M', b'M', b'I', b'T']), // COM_QUERY
            my(0, &[0x19, 2, 0, 0, 0]), // a close alone
        ];
        assert_eq!(count(Backend::MySql, &chunks), 3);
    }
}
