//! An in-process TCP proxy that can stall and cut connections: the database
//! going out of reach, without any external tool.
//!
//! Put it between a store and its server, connect the store to
//! [`Proxy::addr`], and the test decides when the network fails:
//!
//! - [`pause`](Proxy::pause): no byte is forwarded either way, and every
//!   connection stays open, as across a network partition that drops packets
//!   without resetting anything: statements hang, nothing errors.
//! - [`resume`](Proxy::resume): bytes flow again, those held back included.
//! - [`cut`](Proxy::cut): every open connection is closed at once (both sides
//!   see it end), as when a server restarts; new connections are accepted.
//!
//! [`start_observed`](Proxy::start_observed) shows a test every byte a client
//! sends (to count a wire protocol's round trips, say), on an observer of
//! each connection's own. [`start_intercepted`](Proxy::start_intercepted)
//! lets that observer also lose the answer to what a chunk asked
//! ([`Verdict::LoseTheAnswer`]): the server gets the chunk and answers, the
//! client never hears, and the connection closes. That is a reply lost on
//! the way back: a `COMMIT` the server carried out, whose client cannot know
//! it.
//!
//! Dropping the proxy (or [`shutdown`](Proxy::shutdown)) stops accepting and
//! closes every connection: every task it spawned is owned by it.
//!
//! A driver that prefers a UNIX socket (mysql_async does by default) bypasses
//! the proxy: turn that off (`prefer_socket=false`), or the test tests nothing.
//!
//! ```
//! # async fn example() -> std::io::Result<()> {
//! use lease_conformance::proxy::Proxy;
//!
//! let proxy = Proxy::start("127.0.0.1:5432").await?;
//! let url = format!("postgres://postgres@{}/test", proxy.addr());
//! // ... connect a store to `url`, claim, hold ...
//! proxy.pause(); // the database is out of reach: renewals hang
//! // ... the holder steps down at its local deadline ...
//! proxy.resume();
//! # drop(url);
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use lease_core::CancellationToken;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs, lookup_host};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// What one connection's client sends, shown chunk by chunk, and what to do
/// with it.
type Observer = Box<dyn FnMut(&[u8]) -> Verdict + Send>;

/// Makes the observer of each new connection: see [`Proxy::start_intercepted`].
type Observe = Arc<dyn Fn() -> Observer + Send + Sync>;

/// What the proxy does with a chunk a client sent: see
/// [`Proxy::start_intercepted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Forward it, as every chunk is.
    Forward,
    /// Forward it, then lose the server's answer: nothing the server sends
    /// from then on reaches the client, and the connection closes, both
    /// sides, as soon as the server's first bytes arrive (so the server has
    /// done what the chunk asked before it sees the connection end).
    LoseTheAnswer,
}

/// A TCP proxy on `127.0.0.1`, forwarding every connection to one target.
/// See the [module docs](self).
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    paused: watch::Sender<bool>,
    /// Cancelled by [`cut`](Proxy::cut): ends the connections open then.
    generation: Arc<Mutex<CancellationToken>>,
    shutdown: CancellationToken,
    accepted: Arc<AtomicU64>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on `127.0.0.1` (a free port) forwarding to `target`.
    /// The target is resolved once, now; it is connected to for each
    /// connection the proxy accepts.
    ///
    /// # Errors
    ///
    /// When `target` does not resolve, or the proxy cannot listen.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the listener.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub async fn start(target: impl ToSocketAddrs) -> io::Result<Proxy> {
        Self::start_observed(target, || |_: &[u8]| {}).await
    }

    /// As [`start`](Self::start), with an observer of what clients send:
    /// `observe()` is called once for each connection the proxy accepts,
    /// and the observer it returns is given every chunk of bytes the client
    /// sends on that connection, in order, just before they are forwarded.
    /// Chunks follow the reads, not the protocol's messages: an observer
    /// that parses messages keeps what it has not parsed yet.
    ///
    /// ```
    /// # async fn example() -> std::io::Result<()> {
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use lease_conformance::proxy::Proxy;
    ///
    /// let sent = Arc::new(AtomicUsize::new(0));
    /// let counter = sent.clone();
    /// let proxy = Proxy::start_observed("127.0.0.1:5432", move || {
    ///     let counter = counter.clone();
    ///     move |bytes: &[u8]| {
    ///         counter.fetch_add(bytes.len(), Ordering::Relaxed);
    ///     }
    /// })
    /// .await?;
    /// # drop(proxy);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the listener.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub async fn start_observed<F, O>(target: impl ToSocketAddrs, observe: F) -> io::Result<Proxy>
    where
        F: Fn() -> O + Send + Sync + 'static,
        O: FnMut(&[u8]) + Send + 'static,
    {
        Self::start_intercepted(target, move || {
            let mut observer = observe();
            move |bytes: &[u8]| {
                observer(bytes);
                Verdict::Forward
            }
        })
        .await
    }

    /// As [`start_observed`](Self::start_observed), the observer also
    /// saying what to do with each chunk: [`Verdict::Forward`] it, or
    /// forward it and [lose the answer](Verdict::LoseTheAnswer).
    ///
    /// ```
    /// # async fn example() -> std::io::Result<()> {
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use lease_conformance::proxy::{Proxy, Verdict};
    ///
    /// // The first COMMIT any connection sends is carried out by the
    /// // server; its client never hears of it.
    /// let armed = Arc::new(AtomicBool::new(true));
    /// let proxy = Proxy::start_intercepted("127.0.0.1:5432", move || {
    ///     let armed = armed.clone();
    ///     move |bytes: &[u8]| {
    ///         let commit = bytes.windows(6).any(|w| w == b"COMMIT");
    ///         if commit && armed.swap(false, Ordering::SeqCst) {
    ///             Verdict::LoseTheAnswer
    ///         } else {
    ///             Verdict::Forward
    ///         }
    ///     }
    /// })
    /// .await?;
    /// # drop(proxy);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the listener.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub async fn start_intercepted<F, O>(
        target: impl ToSocketAddrs,
        observe: F,
    ) -> io::Result<Proxy>
    where
        F: Fn() -> O + Send + Sync + 'static,
        O: FnMut(&[u8]) -> Verdict + Send + 'static,
    {
        let observe: Observe = Arc::new(move || Box::new(observe()));
        let target = lookup_host(target).await?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the target resolved to no address")
        })?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (paused, _) = watch::channel(false);
        let generation = Arc::new(Mutex::new(CancellationToken::new()));
        let shutdown = CancellationToken::new();
        let accepted = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            target,
            paused.clone(),
            generation.clone(),
            shutdown.clone(),
            accepted.clone(),
            observe,
        ));
        Ok(Proxy {
            addr,
            target,
            paused,
            generation,
            shutdown,
            accepted,
            accept: Some(accept),
        })
    }

    /// The address to connect to instead of the target.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    #[must_use]
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Stops forwarding bytes, both ways, on every connection, open or yet to
    /// come; the connections stay open. Bytes read meanwhile are held back
    /// until [`resume`](Proxy::resume).
    pub fn pause(&self) {
        let _ = self.paused.send_replace(true);
    }

    /// Forwards bytes again, those held back first.
    pub fn resume(&self) {
        let _ = self.paused.send_replace(false);
    }

    /// How many connections the proxy has accepted so far: a test shows
    /// with it that a client reconnected after a [`cut`](Proxy::cut).
    #[must_use]
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Whether the proxy is paused.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Closes every connection open now, both towards the client and
    /// towards the target. Connections made afterwards are forwarded as
    /// usual (unless the proxy is paused).
    pub fn cut(&self) {
        let mut current = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        current.cancel();
        *current = CancellationToken::new();
    }

    /// Stops accepting, closes every connection, and returns once the
    /// proxy's tasks have ended.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the tasks signalled to end; they end at
    /// their next turn on the runtime.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    paused: watch::Sender<bool>,
    generation: Arc<Mutex<CancellationToken>>,
    shutdown: CancellationToken,
    count: Arc<AtomicU64>,
    observe: Observe,
) {
    // Dropped with the loop: aborts every connection's tasks.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok((client, _)) = accepted else {
            // A failed accept (the client gave up, or no file descriptor
            // left): the listener stays usable.
            continue;
        };
        let _ = count.fetch_add(1, Ordering::SeqCst);
        let cut = generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let _ = connections.spawn(connection(
            client,
            target,
            paused.subscribe(),
            cut,
            observe(),
        ));
    }
}

/// Forwards one connection until either side closes it or it is cut.
async fn connection(
    client: TcpStream,
    target: SocketAddr,
    paused: watch::Receiver<bool>,
    cut: CancellationToken,
    observer: Observer,
) {
    let server = tokio::select! {
        () = cut.cancelled() => return,
        server = TcpStream::connect(target) => server,
    };
    let Ok(server) = server else {
        // The target refused: closing the client's connection says so.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Set by the observer's `LoseTheAnswer`; cancelled once the answer
    // arrived: the connection ends.
    let lose = Arc::new(AtomicBool::new(false));
    let lost = CancellationToken::new();
    tokio::select! {
        () = cut.cancelled() => {}
        () = lost.cancelled() => {}
        () = async {
            tokio::join!(
                pump(client_read, server_write, paused.clone(), Side::Client { observer, lose: lose.clone() }),
                pump(server_read, client_write, paused, Side::Server { lose, lost: lost.clone() }),
            );
        } => {}
    }
    // Both halves of both sockets are dropped here: the connections close.
}

/// Which way a [`pump`] copies, and what it does on the way.
enum Side {
    /// The client's bytes, shown to the observer, which may ask to lose the
    /// answer.
    Client {
        observer: Observer,
        lose: Arc<AtomicBool>,
    },
    /// The server's bytes, dropped (and the connection ended) once the
    /// answer is to be lost.
    Server {
        lose: Arc<AtomicBool>,
        lost: CancellationToken,
    },
}

/// Copies bytes from `from` to `to`, never while paused, as `side` says.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
    mut side: Side,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Bytes read just as the proxy paused are held back until it resumes.
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let chunk = &buf[..n];
        match &mut side {
            Side::Client { observer, lose } => {
                if observer(chunk) == Verdict::LoseTheAnswer {
                    // Before the chunk goes: its answer must not get through.
                    lose.store(true, Ordering::SeqCst);
                }
            }
            Side::Server { lose, lost } => {
                if lose.load(Ordering::SeqCst) {
                    lost.cancel();
                    return;
                }
            }
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::time::timeout;

    use super::*;

    /// An echo server; returns its address.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                drop(tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if socket.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }));
            }
        }));
        addr
    }

    async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        stream.write_all(msg).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        let _ = timeout(Duration::from_secs(5), stream.read_exact(&mut buf))
            .await
            .expect("an answer through the proxy")
            .unwrap();
        buf
    }

    #[tokio::test]
    async fn forwards_both_ways() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");
        assert_eq!(round_trip(&mut stream, b"pong").await, b"pong");
    }

    #[tokio::test]
    async fn pause_holds_bytes_back_and_keeps_the_connection_open_until_resume() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"before").await, b"before");

        proxy.pause();
        assert!(proxy.is_paused());
        stream.write_all(b"held").await.unwrap();
        let mut buf = [0u8; 4];
        assert!(
            timeout(Duration::from_millis(300), stream.read_exact(&mut buf))
                .await
                .is_err(),
            "nothing may come back while paused"
        );

        proxy.resume();
        let _ = timeout(Duration::from_secs(5), stream.read_exact(&mut buf))
            .await
            .expect("the held bytes after resume")
            .unwrap();
        assert_eq!(&buf, b"held");
        assert_eq!(round_trip(&mut stream, b"after").await, b"after");
    }

    #[tokio::test]
    async fn an_observer_per_connection_sees_what_its_client_sends() {
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let connections = seen.clone();
        let proxy = Proxy::start_observed(echo_server().await, move || {
            let mut all = connections.lock().unwrap();
            all.push(Vec::new());
            let index = all.len() - 1;
            let connections = connections.clone();
            move |bytes: &[u8]| connections.lock().unwrap()[index].extend_from_slice(bytes)
        })
        .await
        .unwrap();
        let mut one = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut one, b"ab").await, b"ab");
        assert_eq!(round_trip(&mut one, b"cd").await, b"cd");
        let mut two = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut two, b"xyz").await, b"xyz");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![b"abcd".to_vec(), b"xyz".to_vec()]);
    }

    #[tokio::test]
    async fn a_lost_answer_reaches_the_server_and_never_the_client() {
        let (upstream_tx, mut upstream) = tokio::sync::mpsc::unbounded_channel();
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let target = listener.local_addr().unwrap();
        // A server that says what it got, and answers "done".
        drop(tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let upstream_tx = upstream_tx.clone();
                drop(tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        let _ = upstream_tx.send(buf[..n].to_vec());
                        if socket.write_all(b"done").await.is_err() {
                            return;
                        }
                    }
                }));
            }
        }));
        let proxy = Proxy::start_intercepted(target, || {
            |bytes: &[u8]| {
                if bytes == b"COMMIT" {
                    Verdict::LoseTheAnswer
                } else {
                    Verdict::Forward
                }
            }
        })
        .await
        .unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"WORK").await, b"done");
        stream.write_all(b"COMMIT").await.unwrap();
        let mut buf = [0u8; 8];
        let read = timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the connection must end, not hang");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "the answer got through: {read:?}"
        );
        assert_eq!(upstream.recv().await.unwrap(), b"WORK");
        assert_eq!(
            upstream.recv().await.unwrap(),
            b"COMMIT",
            "the server got it"
        );
    }

    #[tokio::test]
    async fn a_connection_made_while_paused_is_held_too() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        proxy.pause();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        stream.write_all(b"early").await.unwrap();
        let mut buf = [0u8; 5];
        assert!(
            timeout(Duration::from_millis(300), stream.read_exact(&mut buf))
                .await
                .is_err()
        );
        proxy.resume();
        let _ = timeout(Duration::from_secs(5), stream.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"early");
    }

    #[tokio::test]
    async fn cut_closes_open_connections_and_accepts_new_ones() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"one").await, b"one");

        proxy.cut();
        let mut buf = [0u8; 8];
        let read = timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the cut connection must end, not hang");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "a cut connection must end: {read:?}"
        );

        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut again, b"two").await, b"two");
        assert_eq!(proxy.accepted(), 2);
    }

    #[tokio::test]
    async fn cut_while_paused_closes_the_held_connections() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"x").await, b"x");
        proxy.pause();
        proxy.cut();
        let mut buf = [0u8; 1];
        let read = timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the cut connection must end even while paused");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }

    #[tokio::test]
    async fn shutdown_closes_everything() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let addr = proxy.addr();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"x").await, b"x");
        proxy.shutdown().await;
        let mut buf = [0u8; 1];
        let read = timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the connection must end with the proxy");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "nothing listens after shutdown"
        );
    }
}
