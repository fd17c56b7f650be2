//! TLS against a real TLS-enabled server: the test starts a private MariaDB
//! (`mariadb-install-db` + `mariadbd`, in a temporary directory, on a free
//! port) with a certificate from a CA of its own, made with `openssl`. The
//! server's certificate names `localhost` only. Without those programs the
//! test prints a note and passes: the refusal paths are tested against the
//! shared server in `tests/store.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lease_core::{ClaimRequest, LeaseStore, Token};
use lease_mysql::mysql_async::SslOpts;
use lease_mysql::mysql_async::prelude::Queryable;
use lease_mysql::{MySqlError, MySqlStore};

/// A private server, killed (by its own pid) when dropped.
struct Server {
    child: Child,
    port: u16,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn found(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run a setup command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn certificates(dir: &Path) {
    let openssl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=lease-mysql test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

async fn start() -> Option<Server> {
    let missing: Vec<_> = ["mariadb-install-db", "mariadbd", "openssl"]
        .into_iter()
        .filter(|p| !found(p) && !Path::new(&format!("/usr/sbin/{p}")).exists())
        .collect();
    if !missing.is_empty() {
        eprintln!("skipped: no TLS-enabled server can be started here (missing {missing:?})");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    certificates(dir.path());
    run(Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg("--user=root")
        .arg(format!("--datadir={}", data.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mariadbd = if found("mariadbd") {
        "mariadbd".to_owned()
    } else {
        "/usr/sbin/mariadbd".to_owned()
    };
    let p = |f: &str| dir.path().join(f).display().to_string();
    let child = Command::new(mariadbd)
        .arg("--no-defaults")
        .arg("--user=root")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--socket={}", p("mysqld.sock")))
        .arg(format!("--pid-file={}", p("mysqld.pid")))
        .arg(format!("--ssl-ca={}", p("ca.pem")))
        .arg(format!("--ssl-cert={}", p("server.pem")))
        .arg(format!("--ssl-key={}", p("server.key")))
        .arg("--innodb-buffer-pool-size=16M")
        .arg("--skip-log-bin")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mariadbd");
    let server = Server {
        child,
        port,
        ca: dir.path().join("ca.pem"),
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let plain = format!("mysql://root@127.0.0.1:{port}/mysql?prefer_socket=false");
    loop {
        match MySqlStore::connect(&plain).await {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => panic!("the TLS test server did not start: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Some(server)
}

async fn cipher(store: &MySqlStore) -> String {
    let mut conn = store.pool().get_conn().await.unwrap();
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    row.map(|(_, v)| v).unwrap_or_default()
}

fn ca_only(server: &Server) -> SslOpts {
    SslOpts::default()
        .with_root_certs(vec![server.ca.clone().into()])
        .with_disable_built_in_roots(true)
}

#[tokio::test]
async fn tls_connections_are_encrypted_and_certificates_checked() {
    let Some(server) = start().await else { return };
    let port = server.port;
    let url = |host: &str, params: &str| {
        format!("mysql://root@{host}:{port}/mysql?prefer_socket=false{params}")
    };

    // The CA trusted, the name matching: encrypted, and the protocol runs.
    let store = MySqlStore::builder(&url("localhost", ""))
        .unwrap()
        .with_table("lm_tls")
        .with_tls(ca_only(&server))
        .connect()
        .await
        .unwrap();
    assert!(store.tls_required());
    let c = cipher(&store).await;
    assert!(!c.is_empty(), "the session is encrypted");
    eprintln!("TLS cipher: {c}");
    store.migrate().await.unwrap();
    assert_eq!(
        store
            .claim(ClaimRequest {
                name: "tls",
                token: Token::new("h"),
                instance: "i",
                lease_ms: 1_000
            })
            .await
            .unwrap(),
        Some(1)
    );
    assert!(format!("{store:?}").contains("tls: true"));

    // The certificate names localhost, not 127.0.0.1: refused...
    let err = MySqlStore::builder(&url("127.0.0.1", ""))
        .unwrap()
        .with_tls(ca_only(&server))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, MySqlError::Connect { .. }), "{err:?}");
    eprintln!(
        "wrong name: {err} ({:?})",
        std::error::Error::source(&err).map(ToString::to_string)
    );
    // mysql_async 0.37's skip of the name check (`verify_identity=false`)
    // does not work with rustls 0.23: it looks for a message rustls no longer
    // prints. Shown here so that a fixed driver is noticed.
    let skipped = MySqlStore::builder(&url("127.0.0.1", ""))
        .unwrap()
        .with_tls(ca_only(&server).with_danger_skip_domain_validation(true))
        .connect()
        .await;
    assert!(
        skipped.is_err(),
        "verify_identity=false works now: update the README"
    );
    // What works: checking the certificate against the name it carries.
    let store = MySqlStore::builder(&url("127.0.0.1", ""))
        .unwrap()
        .with_tls(ca_only(&server).with_danger_tls_hostname_override(Some("localhost")))
        .connect()
        .await
        .unwrap();
    assert!(!cipher(&store).await.is_empty());

    // A CA nobody trusts (the built-in roots only): refused...
    let err = MySqlStore::connect(&url("localhost", "&require_ssl=true"))
        .await
        .unwrap_err();
    assert!(matches!(err, MySqlError::Connect { .. }), "{err:?}");
    eprintln!(
        "unknown CA: {err} ({:?})",
        std::error::Error::source(&err).map(ToString::to_string)
    );
    // ... unless the URL says not to check it at all.
    let store = MySqlStore::connect(&url(
        "localhost",
        "&require_ssl=true&verify_ca=false&verify_identity=false",
    ))
    .await
    .unwrap();
    assert!(!cipher(&store).await.is_empty());

    // Without TLS asked for, the connection is in the clear.
    let plain = MySqlStore::connect(&url("127.0.0.1", "")).await.unwrap();
    assert!(!plain.tls_required());
    assert!(cipher(&plain).await.is_empty());
}
