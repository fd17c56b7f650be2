//! The network scenarios have teeth, without a database: the reference store
//! reached over TCP (every statement waits for a byte echoed through the
//! proxy, so pausing or cutting the proxy reaches it) passes them, and broken
//! variants fail them with the message that names their fault.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail loudly"
)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use lease_conformance::intercept::{Intercept, Intercepted};
use lease_conformance::network;
use lease_conformance::proxy::Proxy;
use lease_conformance::reference::{Fault, MemoryStore};
use lease_core::{BoxError, LeaseStore, Leases, Op};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

/// Echoes every byte back, on every connection, until dropped.
struct Echo {
    addr: SocketAddr,
    _tasks: JoinSet<()>,
}

async fn echo_server() -> Echo {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut tasks = JoinSet::new();
    let _ = tasks.spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = connections.spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Echo {
        addr,
        _tasks: tasks,
    }
}

/// Before each statement, a byte there and back over one connection to
/// `addr`; a connection that failed is dropped, and the next statement
/// connects again, unless `never_reconnects`.
#[derive(Debug)]
struct OverTcp {
    addr: SocketAddr,
    conn: Mutex<Option<TcpStream>>,
    connected: AtomicBool,
    never_reconnects: bool,
}

#[async_trait]
impl Intercept for OverTcp {
    async fn before(&self, _op: Op) -> Result<(), BoxError> {
        let mut slot = self.conn.lock().await;
        // Taken out for the round trip: a call dropped halfway (its bound
        // passed) drops the connection with it.
        let mut stream = match slot.take() {
            Some(stream) => stream,
            None if self.never_reconnects && self.connected.load(Ordering::SeqCst) => {
                return Err("the connection was lost, and this store never connects again".into());
            }
            None => {
                let stream = TcpStream::connect(self.addr).await?;
                self.connected.store(true, Ordering::SeqCst);
                stream
            }
        };
        stream.write_all(b"?").await?;
        let mut byte = [0_u8; 1];
        let _ = stream.read_exact(&mut byte).await?;
        *slot = Some(stream);
        Ok(())
    }
}

/// A reference store, `proxied` through the proxy, `direct` without it.
fn stores(memory: MemoryStore, proxy: &Proxy, never_reconnects: bool) -> (Leases, Leases) {
    let memory: Arc<dyn LeaseStore> = Arc::new(memory);
    let over_tcp = OverTcp {
        addr: proxy.addr(),
        conn: Mutex::new(None),
        connected: AtomicBool::new(false),
        never_reconnects,
    };
    let proxied = Leases::new(Intercepted::new(memory.clone(), over_tcp));
    (proxied, Leases::from_arc(memory))
}

/// Runs `scenario` on a task of its own and returns its panic message.
async fn panic_of(scenario: impl Future<Output = ()> + Send + 'static) -> String {
    let e = tokio::spawn(scenario)
        .await
        .expect_err("the scenario should have failed");
    let payload = e.into_panic();
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => (*payload.downcast::<&'static str>().unwrap()).to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_store_over_tcp_steps_down_before_the_name_is_free() {
    let echo = echo_server().await;
    let proxy = Proxy::start(echo.addr).await.unwrap();
    let (proxied, direct) = stores(MemoryStore::new(), &proxy, false);
    let report =
        network::steps_down_before_the_name_is_free("reference over TCP", proxied, direct, &proxy)
            .await;
    assert!(report.margin >= report.required);
    assert!(report.freed_within >= report.margin);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_store_over_tcp_shrugs_off_cut_connections() {
    let echo = echo_server().await;
    let proxy = Proxy::start(echo.addr).await.unwrap();
    let (proxied, direct) = stores(MemoryStore::new(), &proxy, false);
    network::connections_cut_under_the_holder_cost_it_nothing(proxied, direct, &proxy).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_that_bypasses_the_proxy_fails_at_once() {
    let echo = echo_server().await;
    let proxy = Arc::new(Proxy::start(echo.addr).await.unwrap());
    let memory: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let (proxied, direct) = (Leases::from_arc(memory.clone()), Leases::from_arc(memory));
    let p = proxy.clone();
    let message = panic_of(async move {
        let _ = network::steps_down_before_the_name_is_free("bypass", proxied, direct, &p).await;
    })
    .await;
    assert!(
        message.contains("went through no connection of the proxy"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_that_do_not_extend_fail_the_step_down() {
    let echo = echo_server().await;
    let proxy = Arc::new(Proxy::start(echo.addr).await.unwrap());
    let (proxied, direct) = stores(
        MemoryStore::with_fault(Fault::RenewDoesNotExtend),
        &proxy,
        false,
    );
    let p = proxy.clone();
    let message = panic_of(async move {
        let _ = network::steps_down_before_the_name_is_free("broken", proxied, direct, &p).await;
    })
    .await;
    assert!(
        message.contains("renew must set expires_at_ms = now + lease_ms"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_that_never_reconnects_fails_the_cuts() {
    let echo = echo_server().await;
    let proxy = Arc::new(Proxy::start(echo.addr).await.unwrap());
    let (proxied, direct) = stores(MemoryStore::new(), &proxy, true);
    let p = proxy.clone();
    let message = panic_of(async move {
        network::connections_cut_under_the_holder_cost_it_nothing(proxied, direct, &p).await;
    })
    .await;
    assert!(message.contains("should have reconnected"), "{message}");
}
