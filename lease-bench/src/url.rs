//! Which backend a URL names, and the same URL through a proxy.

/// A database the lease protocol runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:` URLs.
    Sqlite,
    /// `postgres://` and `postgresql://` URLs.
    Postgres,
    /// `mysql://` and `mariadb://` URLs.
    MySql,
}

impl Backend {
    /// The backend a URL names, by its scheme.
    #[must_use]
    pub fn of(url: &str) -> Option<Backend> {
        let scheme = url.split_once(':')?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            "mysql" | "mariadb" => Some(Backend::MySql),
            _ => None,
        }
    }

    /// A short name for tables and logs.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mariadb",
        }
    }
}

/// The `host:port` a server URL points at (port defaulted per backend), or
/// `None` for a URL without a network address: lease-conformance's
/// [`server_of`](lease_conformance::network::server_of) with the backend's
/// default port.
#[must_use]
pub fn host_port(url: &str) -> Option<String> {
    let default_port = match Backend::of(url)? {
        Backend::Postgres => 5432,
        Backend::MySql => 3306,
        Backend::Sqlite => return None,
    };
    lease_conformance::network::server_of(url, default_port)
}

/// `url` with its `host:port` replaced by `addr` (a proxy), and, for MySQL,
/// the UNIX socket turned off so that the driver does go through it.
#[must_use]
pub fn through(url: &str, addr: &str) -> Option<String> {
    let backend = Backend::of(url)?;
    let mut out = lease_conformance::network::url_via(url, addr.parse().ok()?)?;
    if backend == Backend::MySql {
        out.push(if out.contains('?') { '&' } else { '?' });
        out.push_str("prefer_socket=false");
    }
    Some(out)
}

/// The file an `sqlite:` URL names (`sqlite://PATH` or `sqlite:PATH`), or
/// `None` for an in-memory database.
#[must_use]
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.get(7..)?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    (rest != ":memory:" && !rest.is_empty()).then(|| std::path::PathBuf::from(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_files() {
        assert_eq!(
            sqlite_path("sqlite:///tmp/a.db"),
            Some(std::path::PathBuf::from("/tmp/a.db"))
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("sqlite://"), None);
    }

    #[test]
    fn backends_by_scheme() {
        assert_eq!(Backend::of("sqlite:///tmp/x.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::of("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(Backend::of("PostgreSQL://h/db"), Some(Backend::Postgres));
        assert_eq!(Backend::of("mariadb://h/db"), Some(Backend::MySql));
        assert_eq!(Backend::of("redis://h"), None);
    }

    #[test]
    fn host_and_port() {
        assert_eq!(
            host_port("postgres://postgres@127.0.0.1:5432/test").as_deref(),
            Some("127.0.0.1:5432")
        );
        assert_eq!(
            host_port("mysql://root:pw@db/test").as_deref(),
            Some("db:3306")
        );
        assert_eq!(host_port("postgres://h?x=1").as_deref(), Some("h:5432"));
        assert_eq!(host_port("sqlite:///x.db"), None);
    }

    #[test]
    fn urls_through_a_proxy() {
        assert_eq!(
            through("postgres://postgres@127.0.0.1:5432/test", "127.0.0.1:4000").as_deref(),
            Some("postgres://postgres@127.0.0.1:4000/test")
        );
        assert_eq!(
            through("mysql://root@127.0.0.1:3306/test", "127.0.0.1:4000").as_deref(),
            Some("mysql://root@127.0.0.1:4000/test?prefer_socket=false")
        );
        assert_eq!(
            through("mariadb://u:p@db/test?pool_max=4", "127.0.0.1:9").as_deref(),
            Some("mariadb://u:p@127.0.0.1:9/test?pool_max=4&prefer_socket=false")
        );
    }
}
