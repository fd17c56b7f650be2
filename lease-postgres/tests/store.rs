//! The store against a real PostgreSQL (`LEASE_TEST_POSTGRES_URL`): secrets
//! kept out of every output, concurrent migrations, TLS modes, and the round
//! trips of every operation, counted on the wire.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "tests fail loudly and print their figures"
)]

mod common;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lease_conformance::proxy::Proxy;
use lease_core::{
    CancellationToken, ClaimRequest, FinishRequest, Finished, InstantClaim, LeaseContext,
    LeaseStore, Leases, Token,
};
use lease_postgres::tokio_postgres::config::Host;
use lease_postgres::{PostgresError, PostgresStore, SslMode};
use lease_testkit::chain;
use rustls::RootCertStore;

/// The parts of the test URL, to point it elsewhere.
struct Parts {
    user: String,
    password: Option<String>,
    dbname: String,
    host: String,
    port: u16,
}

fn parts(url: &str) -> Parts {
    let config: lease_postgres::tokio_postgres::Config = url.parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    Parts {
        user: config.get_user().unwrap_or("postgres").to_owned(),
        password: config
            .get_password()
            .map(|p| String::from_utf8(p.to_vec()).unwrap()),
        dbname: config.get_dbname().unwrap_or("postgres").to_owned(),
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The test server's URL, sent to `host:port` with `params`.
fn url_to(p: &Parts, host: &str, port: u16, params: &str) -> String {
    let auth = match &p.password {
        Some(pw) => format!("{}:{}", encode(&p.user), encode(pw)),
        None => encode(&p.user),
    };
    format!("postgres://{auth}@{host}:{port}/{}?{params}", p.dbname)
}

// ---------------------------------------------------------------- secrets

/// A tracing subscriber that keeps every event and span field as text.
#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        span.record(&mut Fields(&mut self.0.lock().unwrap()));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        event.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn the_password_never_appears_in_debug_display_errors_or_logs() {
    const SECRET: &str = "pw-S3cr3t-do-not-print";
    let Some(url) = common::url() else { return };
    let p = parts(&url);
    let with_secret = Parts {
        password: Some(SECRET.to_owned()),
        ..p
    };
    let recorder = Recorder::default();
    lease_testkit::logs::every_callsite_interesting();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let mut shown = String::new();

    // A server that answers (the local one may trust and ignore the password).
    let good = url_to(
        &with_secret,
        &with_secret.host,
        with_secret.port,
        "sslmode=prefer",
    );
    let builder = PostgresStore::builder(&good)
        .unwrap()
        .with_table(common::unique_table());
    let _ = write!(shown, "{builder:?}");
    match builder.connect().await {
        Ok(store) => {
            let _ = write!(shown, "{store:?} {:?}", store.pool().status());
            let leases = Leases::new(store.clone());
            leases.migrate().await.unwrap();
            let h = leases.claim("secret-test").await.unwrap().unwrap();
            let ctx = LeaseContext::new(h.clone(), CancellationToken::new());
            let _ = write!(shown, "{leases:?} {h:?} {ctx:?}");
            h.release().await.unwrap();
            common::drop_table(&store).await;
        }
        Err(e) => shown.push_str(&chain(&e)),
    }

    // A port nothing listens on, and malformed URLs.
    let closed = url_to(&with_secret, "127.0.0.1", 1, "connect_timeout=2");
    let err = PostgresStore::connect(&closed).await.unwrap_err();
    assert!(matches!(err, PostgresError::Connect { .. }), "{err:?}");
    assert!(
        err.to_string().contains("127.0.0.1:1"),
        "a connection error names the server it tried: {err}"
    );
    shown.push_str(&chain(&err));
    for bad in [
        url_to(&with_secret, "127.0.0.1", 1, "sslmode=bogus"),
        url_to(&with_secret, "127.0.0.1", 1, "nonsense=1"),
        format!("mysql://u:{SECRET}@h/d"),
    ] {
        let err = PostgresStore::builder(&bad).unwrap_err();
        assert!(matches!(err, PostgresError::InvalidUrl { .. }), "{err:?}");
        shown.push_str(&chain(&err));
    }
    // A store whose every statement fails: the errors the coordinator logs.
    let store = PostgresStore::builder(&closed).unwrap().build().unwrap();
    let _ = write!(shown, "{store:?}");
    let err = Leases::new(store).claim("x").await.unwrap_err();
    shown.push_str(&chain(&err));

    let logged = recorder.0.lock().unwrap().clone();
    assert!(!shown.contains(SECRET), "the password was shown: {shown}");
    assert!(
        !logged.contains(SECRET),
        "the password was logged: {logged}"
    );
    assert!(shown.contains("PostgresStore"), "{shown}");
}

// ---------------------------------------------------------------- bounds

/// The connections' `statement_timeout`, read back from the server.
async fn server_statement_timeout(store: &PostgresStore) -> String {
    let client = store.pool().get().await.unwrap();
    let row = client
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap();
    row.get(0)
}

/// The server-side statement bound follows the coordinator's timings: half
/// its local deadline (5 s by default), so a statement the coordinator gave
/// up on stops on the server too.
#[tokio::test]
async fn the_statement_timeout_is_derived_from_the_timings() {
    let Some(url) = common::url() else { return };
    let default = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(server_statement_timeout(&default).await, "5s");
    let timings = lease_core::Timings::builder()
        .lease(std::time::Duration::from_secs(6))
        .renew(std::time::Duration::from_secs(1))
        .deadline(std::time::Duration::from_secs(4))
        // Within the 2 s step-down margin, as the timings now require.
        .grace(std::time::Duration::from_secs(1))
        .build()
        .unwrap();
    let tight = PostgresStore::builder(&url)
        .unwrap()
        .with_timings(&timings)
        .connect()
        .await
        .unwrap();
    assert_eq!(server_statement_timeout(&tight).await, "2s");
    // An explicit bound set after the timings wins.
    let explicit = PostgresStore::builder(&url)
        .unwrap()
        .with_timings(&timings)
        .with_statement_timeout(Some(std::time::Duration::from_millis(1500)))
        .connect()
        .await
        .unwrap();
    assert_eq!(server_statement_timeout(&explicit).await, "1500ms");
    // What each store tells a coordinator its bounds came from (issue 23,
    // item 9): the timings, unless a bound was set by hand.
    assert_eq!(
        LeaseStore::timings(&default),
        Some(lease_core::Timings::default())
    );
    assert_eq!(LeaseStore::timings(&tight), Some(timings));
    assert_eq!(LeaseStore::timings(&explicit), None);
    assert_eq!(Leases::new(tight).timings(), &timings);
}

// ---------------------------------------------------------------- migrate

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_replicas_migrating_a_missing_table_at_once_all_succeed() {
    let Some(url) = common::url() else { return };
    for _round in 0..3 {
        let table = common::unique_table();
        let mut replicas = Vec::new();
        for _ in 0..8 {
            // Each replica its own store and pool, as separate processes.
            replicas.push(
                PostgresStore::builder(&url)
                    .unwrap()
                    .with_table(&table)
                    .with_pool_size(1)
                    .connect()
                    .await
                    .unwrap(),
            );
        }
        common::sweep(&replicas[0]).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(replicas.len()));
        let mut tasks = tokio::task::JoinSet::new();
        for store in replicas.clone() {
            let barrier = barrier.clone();
            let _ = tasks.spawn(async move {
                let _ = barrier.wait().await;
                store.migrate().await
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap().expect("every concurrent migrate succeeds");
        }
        // And again, now that the table exists.
        replicas[3].migrate().await.unwrap();
        let term = replicas[5]
            .claim(ClaimRequest {
                name: "after",
                token: Token::new("h"),
                instance: "i",
                lease_ms: 15_000,
            })
            .await
            .unwrap();
        assert_eq!(term, Some(1));
        common::drop_table(&replicas[0]).await;
    }
}

// ---------------------------------------------------------------- TLS

async fn ssl_in_use(store: &PostgresStore) -> bool {
    let client = store.pool().get().await.unwrap();
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The server's certificate, when it uses a file this process can read.
async fn server_certificate(store: &PostgresStore) -> Option<RootCertStore> {
    let client = store.pool().get().await.unwrap();
    let path: String = client
        .query_one("SHOW ssl_cert_file", &[])
        .await
        .unwrap()
        .get(0);
    let pem = std::fs::read(&path).ok()?;
    let mut roots = RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.ok()?).ok()?;
    }
    Some(roots)
}

async fn connect(url: &str, roots: Option<RootCertStore>) -> Result<PostgresStore, PostgresError> {
    let mut builder = PostgresStore::builder(url).unwrap().with_pool_size(1);
    if let Some(roots) = roots {
        builder = builder.with_root_certificates(roots);
    }
    builder.connect().await
}

#[tokio::test]
async fn tls_modes_against_the_local_server() {
    let Some(url) = common::url() else { return };
    let p = parts(&url);
    let plain = connect(&url_to(&p, &p.host, p.port, "sslmode=disable"), None)
        .await
        .unwrap();
    assert!(!ssl_in_use(&plain).await, "sslmode=disable used TLS");
    let client = plain.pool().get().await.unwrap();
    let ssl: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    drop(client);
    assert_eq!(
        ssl, "on",
        "the test server has ssl=off, so TLS cannot be tested: set ssl = on (with \
         ssl_cert_file/ssl_key_file, e.g. Debian's snakeoil pair) in postgresql.conf and reload"
    );

    // require: any certificate, the local self-signed one included.
    let store = connect(&url_to(&p, &p.host, p.port, "sslmode=require"), None)
        .await
        .expect("sslmode=require connects to a self-signed server");
    assert!(ssl_in_use(&store).await);
    // The protocol runs over it.
    let store = PostgresStore::builder(&url_to(&p, &p.host, p.port, "sslmode=require"))
        .unwrap()
        .with_table(common::unique_table())
        .connect()
        .await
        .unwrap();
    store.migrate().await.unwrap();
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "tls",
                token: Token::new("h"),
                instance: "i",
                lease_ms: 15_000
            })
            .await
            .unwrap(),
        Some(1)
    );
    common::drop_table(&store).await;

    // prefer (the default): TLS, since the server offers it.
    let store = connect(&url_to(&p, &p.host, p.port, "application_name=t"), None)
        .await
        .unwrap();
    assert!(ssl_in_use(&store).await, "sslmode=prefer did not use TLS");

    // verify-full: nothing to trust, or only the public roots: refused.
    for (roots, what) in [
        (Some(RootCertStore::empty()), "an empty root store"),
        (None, "the webpki roots"),
    ] {
        let err = connect(&url_to(&p, &p.host, p.port, "sslmode=verify-full"), roots)
            .await
            .err()
            .unwrap_or_else(|| panic!("verify-full with {what} accepted a self-signed server"));
        assert!(matches!(err, PostgresError::Connect { .. }), "{err:?}");
        let why = chain(&err);
        assert!(
            why.contains("certificate") || why.contains("Certificate"),
            "{why}"
        );
    }
    let err = connect(
        &url_to(&p, &p.host, p.port, "sslmode=verify-ca"),
        Some(RootCertStore::empty()),
    )
    .await
    .expect_err("verify-ca with an empty root store refuses");
    assert!(matches!(err, PostgresError::Connect { .. }), "{err:?}");

    // Trusting the server's own certificate, when readable here.
    let Some(own) = server_certificate(&plain).await else {
        eprintln!(
            "the server's certificate file is not readable here: verify-* positive checks skipped"
        );
        return;
    };
    // verify-ca checks the chain, not the name: connects to an address the
    // certificate does not name.
    let store = connect(
        &url_to(&p, "127.0.0.1", p.port, "sslmode=verify-ca"),
        Some(own.clone()),
    )
    .await
    .expect("verify-ca with the server's certificate as root");
    assert!(ssl_in_use(&store).await);
    // verify-full checks the name too: Debian's snakeoil names `localhost`
    // (or the machine's host name), not 127.0.0.1.
    let by_address = connect(
        &url_to(&p, "127.0.0.1", p.port, "sslmode=verify-full"),
        Some(own.clone()),
    )
    .await;
    assert!(
        by_address.is_err(),
        "verify-full accepted a certificate for another name"
    );
    // ... and connects when the host is the certificate's name, here with
    // the root given by the URL's sslrootcert.
    let cert_file: String = plain
        .pool()
        .get()
        .await
        .unwrap()
        .query_one("SHOW ssl_cert_file", &[])
        .await
        .unwrap()
        .get(0);
    let named = url_to(
        &p,
        "localhost",
        p.port,
        &format!(
            "sslmode=verify-full&hostaddr=127.0.0.1&sslrootcert={}",
            encode(&cert_file)
        ),
    );
    match connect(&named, None).await {
        Ok(store) => assert!(ssl_in_use(&store).await),
        Err(e) => {
            let why = chain(&e);
            // A certificate made for the machine's host name, not localhost.
            assert!(
                why.contains("NotValidForName"),
                "verify-full to localhost: {why}"
            );
            eprintln!("the server's certificate does not name localhost: {why}");
        }
    }
    let _ = SslMode::VerifyFull;
}

// ---------------------------------------------------------------- round trips

/// Counts, on the wire, the messages that end a round trip: `Sync` (`S`,
/// the extended protocol) and `Query` (`Q`, the simple protocol), and the
/// `Parse` messages (`P`) that prepare statements.
#[derive(Default)]
struct Counts {
    round_trips: AtomicU64,
    parses: AtomicU64,
}

/// A proxy in front of the server that counts what the client sends; the
/// proxy's port.
async fn counting_proxy(server: (String, u16)) -> (Proxy, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let shared = counts.clone();
    let proxy = Proxy::start_observed((server.0.as_str(), server.1), move || {
        let counts = shared.clone();
        // The startup message has no type byte.
        let mut startup = true;
        let mut pending: Vec<u8> = Vec::new();
        move |bytes: &[u8]| {
            pending.extend_from_slice(bytes);
            loop {
                let len_at = usize::from(!startup);
                if pending.len() < len_at + 4 {
                    break;
                }
                let len =
                    u32::from_be_bytes(pending[len_at..len_at + 4].try_into().unwrap()) as usize;
                let total = len + len_at;
                if pending.len() < total {
                    break;
                }
                if !startup {
                    match pending[0] {
                        b'S' | b'Q' => {
                            let _ = counts.round_trips.fetch_add(1, Ordering::SeqCst);
                        }
                        b'P' => {
                            let _ = counts.parses.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => {}
                    }
                }
                startup = false;
                let _ = pending.drain(..total);
            }
        }
    })
    .await
    .unwrap();
    (proxy, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_one_round_trip() {
    let Some(url) = common::url() else { return };
    let p = parts(&url);
    let (proxy, counts) = counting_proxy((p.host.clone(), p.port)).await;
    let port = proxy.addr().port();
    // One connection, so that what is prepared once stays prepared; no TLS,
    // so that the proxy reads the messages.
    let store = PostgresStore::builder(&url_to(&p, "127.0.0.1", port, "sslmode=disable"))
        .unwrap()
        .with_table(common::unique_table())
        .with_pool_size(1)
        .connect()
        .await
        .unwrap();
    common::sweep(&store).await;
    store.migrate().await.unwrap();
    let s = &store;

    // Every operation, in an order that exercises each outcome. Run twice:
    // the first pass prepares each statement on the connection, the second
    // is measured.
    #[derive(Debug)]
    struct Figure {
        op: &'static str,
        first: u64,
        steady: u64,
        parses: u64,
    }
    let mut figures: Vec<Figure> = Vec::new();
    for pass in 0..2 {
        let n = |label: &str| format!("{label}-{pass}");
        let mut step = |op: &'static str, before: (u64, u64)| {
            let trips = counts.round_trips.load(Ordering::SeqCst) - before.0;
            let parses = counts.parses.load(Ordering::SeqCst) - before.1;
            if pass == 0 {
                figures.push(Figure {
                    op,
                    first: trips,
                    steady: 0,
                    parses: 0,
                });
            } else if let Some(f) = figures.iter_mut().find(|f| f.op == op) {
                f.steady = trips;
                f.parses = parses;
            }
        };
        let mark = || {
            (
                counts.round_trips.load(Ordering::SeqCst),
                counts.parses.load(Ordering::SeqCst),
            )
        };

        let m = mark();
        assert_eq!(
            s.claim(ClaimRequest {
                name: &n("a"),
                token: Token::new("h1"),
                instance: "i",
                lease_ms: 15_000
            })
            .await
            .unwrap(),
            Some(1)
        );
        step("claim (new name)", m);
        let m = mark();
        assert_eq!(
            s.claim(ClaimRequest {
                name: &n("a"),
                token: Token::new("h2"),
                instance: "i",
                lease_ms: 15_000
            })
            .await
            .unwrap(),
            None
        );
        step("claim (held: refused)", m);
        let m = mark();
        assert!(
            s.renew(&n("a"), Token::new("h1"), 15_000)
                .await
                .unwrap()
                .is_some()
        );
        step("renew", m);
        let m = mark();
        assert_eq!(s.verify(&n("a"), Token::new("h1")).await.unwrap(), Some(1));
        step("verify", m);
        let m = mark();
        assert!(s.release(&n("a"), Token::new("h1")).await.unwrap());
        step("release", m);
        let m = mark();
        assert_eq!(
            s.claim(ClaimRequest {
                name: &n("a"),
                token: Token::new("h3"),
                instance: "i",
                lease_ms: 15_000
            })
            .await
            .unwrap(),
            Some(2)
        );
        step("claim (released: takeover)", m);

        let m = mark();
        let c = s
            .claim_instant(
                ClaimRequest {
                    name: &n("s"),
                    token: Token::new("h1"),
                    instance: "i",
                    lease_ms: 15_000,
                },
                1_000,
            )
            .await
            .unwrap();
        assert!(
            matches!(
                c,
                InstantClaim::Claimed {
                    term: 1,
                    superseded: None
                }
            ),
            "{c:?}"
        );
        step("claim_instant (new name)", m);
        assert!(s.release(&n("s"), Token::new("h1")).await.unwrap());
        let m = mark();
        let c = s
            .claim_instant(
                ClaimRequest {
                    name: &n("s"),
                    token: Token::new("h2"),
                    instance: "i",
                    lease_ms: 15_000,
                },
                2_000,
            )
            .await
            .unwrap();
        assert!(
            matches!(&c, InstantClaim::Claimed { term: 2, superseded: Some(sup) } if sup.instant.as_millis() == 1_000),
            "{c:?}"
        );
        step("claim_instant (gives an instant up)", m);
        let m = mark();
        let c = s
            .claim_instant(
                ClaimRequest {
                    name: &n("s"),
                    token: Token::new("h3"),
                    instance: "i",
                    lease_ms: 15_000,
                },
                3_000,
            )
            .await
            .unwrap();
        assert_eq!(c, InstantClaim::Refused);
        step("claim_instant (held: refused)", m);
        let m = mark();
        let f = s
            .finish(FinishRequest {
                name: &n("s"),
                token: Some(Token::new("h2")),
                instant_ms: 2_000,
                passed_ms: 2_000,
            })
            .await
            .unwrap();
        assert_eq!(f, Finished::Released);
        step("finish (holder)", m);

        assert!(matches!(
            s.claim_instant(
                ClaimRequest {
                    name: &n("u"),
                    token: Token::new("h1"),
                    instance: "i",
                    lease_ms: 15_000
                },
                5_000
            )
            .await
            .unwrap(),
            InstantClaim::Claimed { .. }
        ));
        assert!(s.release(&n("u"), Token::new("h1")).await.unwrap());
        let names: Vec<String> = (0..50)
            .map(|i| n(&format!("other{i}")))
            .chain([n("u")])
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let m = mark();
        let found = s.find_unfinished(&names).await.unwrap();
        assert_eq!(found.len(), 1);
        step("find_unfinished (51 names)", m);
        let m = mark();
        assert!(
            s.claim_rerun(
                ClaimRequest {
                    name: &n("u"),
                    token: Token::new("h2"),
                    instance: "i",
                    lease_ms: 15_000
                },
                found[0].term()
            )
            .await
            .unwrap()
        );
        step("claim_rerun", m);
        let m = mark();
        let f = s
            .finish(FinishRequest {
                name: &n("u"),
                token: None,
                instant_ms: 5_000,
                passed_ms: 5_000,
            })
            .await
            .unwrap();
        assert_eq!(f, Finished::RecordedWithoutLease);
        step("finish (known lost)", m);
        let m = mark();
        assert_eq!(s.last_instant(&n("u")).await.unwrap(), Some(5_000));
        step("last_instant", m);
        let m = mark();
        assert!(s.now_ms().await.unwrap() > 1_700_000_000_000);
        step("now_ms", m);
        let m = mark();
        s.migrate().await.unwrap();
        step("migrate (table exists)", m);

        // The guarded transaction: BEGIN, verify, one statement, COMMIT.
        let h = Leases::new(store.clone())
            .claim(&n("g"))
            .await
            .unwrap()
            .unwrap();
        let ctx = LeaseContext::new(h.clone(), CancellationToken::new());
        let m = mark();
        store
            .transaction(&ctx, |tx| {
                Box::pin(async move {
                    let one = tx.prepare_cached("SELECT 1").await?;
                    tx.query_one(&one, &[]).await.map(|_| ())
                })
            })
            .await
            .unwrap();
        step("transaction (work of one statement)", m);
        h.release().await.unwrap();
    }

    let mut table = String::from(
        "\n| operation | round trips | first use on a connection |\n| --- | --- | --- |\n",
    );
    for f in &figures {
        let _ = writeln!(table, "| {} | {} | {} |", f.op, f.steady, f.first);
    }
    println!("{table}");
    for f in &figures {
        let expected = if f.op.starts_with("transaction") {
            4
        } else {
            1
        };
        assert_eq!(
            f.steady, expected,
            "{} took {} round trips: {figures:?}",
            f.op, f.steady
        );
        if !f.op.starts_with("transaction") {
            assert_eq!(f.parses, 0, "{} prepared again: {figures:?}", f.op);
        }
    }
    common::drop_table(&store).await;
}
