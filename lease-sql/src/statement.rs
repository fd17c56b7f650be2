//! A statement written once with named roles, rendered per dialect, and
//! bound by role.
//!
//! A [`Template`] is the SQL of one statement with `{table}` (the quoted
//! lease table), `{now}` (the dialect's clock in UTC milliseconds) and a
//! marker per value, `:name`, `:token`, `:lease_ms`, ... (see [`Param`]),
//! and the order its values take in the dialect's numbered placeholders.
//! Rendering it for a dialect gives a [`Statement`]: the text with the
//! dialect's placeholders (`$1::text`, `?`, `?1`) and the [`Param`] each
//! placeholder binds, in bind order. A call gives its values as [`Args`],
//! one named, typed field per role, and [`Statement::values`] puts them in
//! that order, refusing a role the call does not give and a value the
//! statement does not bind. The text and the bind order come from one
//! source, so they cannot drift apart, and two values of one type (the
//! instant and the lease length, both `i64`) cannot trade places.

use std::fmt;

use lease_core::Token;

/// The role of one value a statement binds.
///
/// Each has a marker in a [`Template`] (in brackets below) and one SQL type
/// (see [`Param::sql_type`]).
///
/// ```
/// use lease_sql::{Param, SqlType};
///
/// assert_eq!(Param::LeaseMs.marker(), "lease_ms");
/// assert_eq!(Param::Token.sql_type(), SqlType::Text);
/// assert_eq!(Param::NameAt(3).to_string(), ":name[3]");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Param {
    /// The lease's name (`:name`).
    Name,
    /// The holder's token, the tenure's credential (`:token`; the SQL
    /// column is `holder`). NULL where the call knows it lost the lease.
    Token,
    /// The claiming process's instance (`:instance`).
    Instance,
    /// The lease length in milliseconds (`:lease_ms`).
    LeaseMs,
    /// The instant claimed or finished, in UTC milliseconds (`:instant`;
    /// the column is `slot_ms`).
    InstantMs,
    /// The latest instant a finished round covers (`:passed`).
    PassedMs,
    /// A term read before (`:term`).
    Term,
    /// Every name of a batch, as one array (`:names`, PostgreSQL).
    Names,
    /// Every token of a batch, as one array (`:tokens`, PostgreSQL).
    Tokens,
    /// The `i`-th name of a batch (`:name[i]`).
    NameAt(usize),
    /// The `i`-th token of a batch (`:token[i]`).
    TokenAt(usize),
    /// A prefix of names (`:prefix`).
    Prefix,
    /// How many rows at most (`:limit`).
    Limit,
    /// The bound on a guarded transaction's idle time, in milliseconds as
    /// text (`:idle_ms`, PostgreSQL).
    IdleMs,
    /// The advisory lock `migrate` takes (`:key`, PostgreSQL).
    LockKey,
    /// The quoted (and maybe qualified) table, as text (`:relation`,
    /// PostgreSQL's catalog look-up).
    Relation,
    /// The table's schema, NULL for the connection's own (`:schema`,
    /// MySQL's `information_schema`).
    Schema,
    /// The table's own name, unquoted (`:table_name`, MySQL's
    /// `information_schema`).
    TableName,
}

/// The SQL type a [`Param`] binds as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlType {
    /// Text (PostgreSQL `text`).
    Text,
    /// A signed 64-bit integer (PostgreSQL `bigint`).
    BigInt,
    /// An array of text (PostgreSQL `text[]`).
    TextArray,
}

impl SqlType {
    /// PostgreSQL's name of the type, as a cast writes it.
    #[must_use]
    pub fn postgres(self) -> &'static str {
        match self {
            SqlType::Text => "text",
            SqlType::BigInt => "bigint",
            SqlType::TextArray => "text[]",
        }
    }
}

/// The roles with a plain marker, and their markers.
const MARKERS: [(Param, &str); 16] = [
    (Param::Name, "name"),
    (Param::Token, "token"),
    (Param::Instance, "instance"),
    (Param::LeaseMs, "lease_ms"),
    (Param::InstantMs, "instant"),
    (Param::PassedMs, "passed"),
    (Param::Term, "term"),
    (Param::Names, "names"),
    (Param::Tokens, "tokens"),
    (Param::Prefix, "prefix"),
    (Param::Limit, "limit"),
    (Param::IdleMs, "idle_ms"),
    (Param::LockKey, "key"),
    (Param::Relation, "relation"),
    (Param::Schema, "schema"),
    (Param::TableName, "table_name"),
];

impl Param {
    /// The marker's name in a [`Template`], without the colon (and, for
    /// [`NameAt`](Param::NameAt) and [`TokenAt`](Param::TokenAt), without
    /// the index).
    #[must_use]
    pub fn marker(self) -> &'static str {
        match self {
            Param::NameAt(_) => "name",
            Param::TokenAt(_) => "token",
            _ => MARKERS
                .iter()
                .find(|(param, _)| *param == self)
                .map_or("", |(_, marker)| *marker),
        }
    }

    /// The SQL type the role binds as.
    #[must_use]
    pub fn sql_type(self) -> SqlType {
        match self {
            Param::LeaseMs
            | Param::InstantMs
            | Param::PassedMs
            | Param::Term
            | Param::Limit
            | Param::LockKey => SqlType::BigInt,
            Param::Names | Param::Tokens => SqlType::TextArray,
            Param::Name
            | Param::Token
            | Param::Instance
            | Param::NameAt(_)
            | Param::TokenAt(_)
            | Param::Prefix
            | Param::IdleMs
            | Param::Relation
            | Param::Schema
            | Param::TableName => SqlType::Text,
        }
    }

    /// The role of a marker, `index` the number in brackets after it.
    fn from_marker(marker: &str, index: Option<usize>) -> Option<Param> {
        match (marker, index) {
            ("name", Some(i)) => Some(Param::NameAt(i)),
            ("token", Some(i)) => Some(Param::TokenAt(i)),
            (_, Some(_)) => None,
            (marker, None) => MARKERS
                .iter()
                .find(|(_, m)| *m == marker)
                .map(|(param, _)| *param),
        }
    }

    /// The role whose field of [`Args`] gives the value: a batch's
    /// element is in its batch.
    fn field(self) -> Param {
        match self {
            Param::NameAt(_) => Param::Names,
            Param::TokenAt(_) => Param::Tokens,
            other => other,
        }
    }
}

impl fmt::Display for Param {
    /// The marker as a template writes it: `:name`, `:token[2]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Param::NameAt(i) | Param::TokenAt(i) => write!(f, ":{}[{i}]", self.marker()),
            _ => write!(f, ":{}", self.marker()),
        }
    }
}

/// One statement as written once: SQL with `{table}`, `{now}` and a marker
/// per value (`:name`, ...), and the order of its values in numbered
/// placeholders (`$1`, `?1`: PostgreSQL's and SQLite's; MySQL's `?` bind in
/// the order they stand). A marker the order leaves out is numbered after
/// it, so a statement always binds what it says; each dialect's tests
/// check that the order names every marker, and nothing else.
///
/// ```
/// use lease_sql::{Param, Template};
///
/// let release = Template {
///     sql: "UPDATE {table} SET expires_at_ms = 0 WHERE name = :name AND holder = :token",
///     params: &[Param::Name, Param::Token],
/// };
/// assert_eq!(release.markers(), [Param::Name, Param::Token]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Template<'a> {
    /// The SQL.
    pub sql: &'a str,
    /// The values in the order they are numbered.
    pub params: &'a [Param],
}

impl Template<'_> {
    /// Every marker of the SQL, in the order they stand (repeats included).
    #[must_use]
    pub fn markers(&self) -> Vec<Param> {
        let mut found = Vec::new();
        let _ = scan(self.sql, |param| {
            found.push(param);
            String::new()
        });
        found
    }

    /// Panics unless the order names every marker of the SQL once, and
    /// nothing else: each dialect's tests run it on each of its templates.
    #[cfg(test)]
    pub(crate) fn assert_tidy(&self) {
        let mut used: Vec<Param> = Vec::new();
        for marker in self.markers() {
            if !used.contains(&marker) {
                used.push(marker);
            }
        }
        let mut declared = self.params.to_vec();
        declared.sort_by_key(Param::to_string);
        let before = declared.len();
        declared.dedup();
        assert_eq!(before, declared.len(), "a role named twice: {}", self.sql);
        used.sort_by_key(Param::to_string);
        assert_eq!(declared, used, "{}", self.sql);
    }
}

/// How a dialect writes a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholders {
    /// `$n::type`: numbered, with the role's type cast.
    Dollar,
    /// `?`: in the order they stand, a value used twice bound twice.
    Question,
    /// `?n`: numbered.
    NumberedQuestion,
}

/// Replaces every marker of `sql` with what `emit` makes of its role.
fn scan(sql: &str, mut emit: impl FnMut(Param) -> String) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    let mut rest = sql;
    while let Some(at) = rest.find(':') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(cast) = after.strip_prefix(':') {
            // A cast (`::bigint`), never a marker.
            out.push_str("::");
            rest = cast;
            continue;
        }
        let len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        let (marker, tail) = after.split_at(len);
        let (index, tail) = bracketed(tail);
        match Param::from_marker(marker, index).filter(|_| len > 0) {
            Some(param) => {
                out.push_str(&emit(param));
                rest = tail;
            }
            None => {
                out.push(':');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `[n]` at the start of `s`: the number, and what follows.
fn bracketed(s: &str) -> (Option<usize>, &str) {
    let Some(inner) = s.strip_prefix('[') else {
        return (None, s);
    };
    let Some(end) = inner.find(']') else {
        return (None, s);
    };
    match inner[..end].parse() {
        Ok(n) => (Some(n), &inner[end + 1..]),
        Err(_) => (None, s),
    }
}

/// A statement rendered for a dialect: the text the driver sends, and the
/// role of each value it binds, in bind order.
///
/// ```
/// use lease_sql::{Args, Param};
/// use lease_core::Token;
///
/// let statements = lease_sql::sqlite::Statements::new(lease_sql::sqlite::table("t")?);
/// let release = &statements.release;
/// assert_eq!(release.text(), "UPDATE \"t\" SET expires_at_ms = 0 WHERE name = ?1 AND holder = ?2");
/// assert_eq!(release.params(), [Param::Name, Param::Token]);
/// let args = Args::new().name("job").token(Token::new("secret"));
/// assert_eq!(release.values(&args)?.len(), 2);
/// // A role the call does not give, or a value the statement does not bind:
/// assert!(release.values(&Args::new().name("job")).is_err());
/// assert!(release.values(&args.lease_ms(1_000)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    text: String,
    params: Vec<Param>,
}

impl Statement {
    /// `template` for `placeholders`, with `table` (quoted) and `now` (the
    /// dialect's clock) formatted in.
    pub(crate) fn render(
        template: &Template<'_>,
        placeholders: Placeholders,
        table: &str,
        now: &str,
    ) -> Statement {
        let sql = template.sql.replace("{table}", table).replace("{now}", now);
        let mut params = template.params.to_vec();
        let mut stood = Vec::new();
        let text = scan(&sql, |param| {
            let number = match params.iter().position(|p| *p == param) {
                Some(i) => i + 1,
                None => {
                    params.push(param);
                    params.len()
                }
            };
            stood.push(param);
            match placeholders {
                Placeholders::Dollar => format!("${number}::{}", param.sql_type().postgres()),
                Placeholders::Question => "?".to_owned(),
                Placeholders::NumberedQuestion => format!("?{number}"),
            }
        });
        if placeholders == Placeholders::Question {
            params = stood;
        }
        Statement { text, params }
    }

    /// A statement that binds nothing (DDL, a clock read).
    pub(crate) fn plain(text: String) -> Statement {
        Statement {
            text,
            params: Vec::new(),
        }
    }

    /// The text, with the dialect's placeholders.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The role of each value, in the order they bind.
    #[must_use]
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// `args` in bind order: one [`Value`] per [`params`](Self::params).
    ///
    /// # Errors
    ///
    /// [`BindError::Missing`] when the statement binds a role `args` does
    /// not give; [`BindError::Unused`] when `args` gives a value the
    /// statement does not bind (a value meant for another role).
    pub fn values<'a>(&self, args: &Args<'a>) -> Result<Vec<Value<'a>>, BindError> {
        for field in args.given() {
            if !self.params.iter().any(|p| p.field() == field) {
                return Err(BindError::Unused {
                    param: field,
                    statement: self.text.clone(),
                });
            }
        }
        self.params
            .iter()
            .map(|param| {
                args.value(*param).ok_or_else(|| BindError::Missing {
                    param: *param,
                    statement: self.text.clone(),
                })
            })
            .collect()
    }
}

/// Why [`Statement::values`] refused a call's [`Args`]: a mistake in the
/// code that calls the statement, never in the data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The statement binds a role the call does not give.
    #[error("the statement binds {param}, which the call does not give: {statement}")]
    Missing {
        /// The role.
        param: Param,
        /// The statement's text.
        statement: String,
    },
    /// The call gives a value the statement does not bind.
    #[error("the call gives {param}, which the statement does not bind: {statement}")]
    Unused {
        /// The role of the value.
        param: Param,
        /// The statement's text.
        statement: String,
    },
}

/// The values of one call, each in the field of its role: a call names
/// what it gives (`.lease_ms(..)`, `.instant_ms(..)`), so two values of one
/// type cannot trade places. Its `Debug` shows tokens as [`Token`]'s does:
/// nothing secret.
///
/// ```
/// use lease_core::Token;
/// use lease_sql::Args;
///
/// let args = Args::new()
///     .name("cron:report")
///     .token(Token::new("t0k3n"))
///     .instant_ms(1_700_000_000_000)
///     .lease_ms(15_000);
/// assert!(!format!("{args:?}").contains("t0k3n"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[must_use]
pub struct Args<'a> {
    name: Option<&'a str>,
    token: Option<Option<Token<'a>>>,
    instance: Option<&'a str>,
    lease_ms: Option<i64>,
    instant_ms: Option<i64>,
    passed_ms: Option<i64>,
    term: Option<u64>,
    names: Option<&'a [&'a str]>,
    tokens: Option<&'a [Token<'a>]>,
    prefix: Option<&'a str>,
    limit: Option<i64>,
    idle_ms: Option<&'a str>,
    lock_key: Option<i64>,
    relation: Option<&'a str>,
    schema: Option<Option<&'a str>>,
    table_name: Option<&'a str>,
}

impl<'a> Args<'a> {
    /// No value yet.
    pub fn new() -> Self {
        Args::default()
    }

    /// The lease's name ([`Param::Name`]).
    pub fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }

    /// The holder's token ([`Param::Token`]).
    pub fn token(mut self, token: Token<'a>) -> Self {
        self.token = Some(Some(token));
        self
    }

    /// The holder's token, or NULL ([`Param::Token`]).
    pub fn token_or_null(mut self, token: Option<Token<'a>>) -> Self {
        self.token = Some(token);
        self
    }

    /// The claiming process ([`Param::Instance`]).
    pub fn instance(mut self, instance: &'a str) -> Self {
        self.instance = Some(instance);
        self
    }

    /// The lease length ([`Param::LeaseMs`]).
    pub fn lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = Some(lease_ms);
        self
    }

    /// The instant ([`Param::InstantMs`]).
    pub fn instant_ms(mut self, instant_ms: i64) -> Self {
        self.instant_ms = Some(instant_ms);
        self
    }

    /// The latest instant a round covers ([`Param::PassedMs`]).
    pub fn passed_ms(mut self, passed_ms: i64) -> Self {
        self.passed_ms = Some(passed_ms);
        self
    }

    /// A term ([`Param::Term`]).
    pub fn term(mut self, term: u64) -> Self {
        self.term = Some(term);
        self
    }

    /// The names of a batch ([`Param::Names`], [`Param::NameAt`]).
    pub fn names(mut self, names: &'a [&'a str]) -> Self {
        self.names = Some(names);
        self
    }

    /// The tokens of a batch ([`Param::Tokens`], [`Param::TokenAt`]).
    pub fn tokens(mut self, tokens: &'a [Token<'a>]) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// A prefix of names ([`Param::Prefix`]).
    pub fn prefix(mut self, prefix: &'a str) -> Self {
        self.prefix = Some(prefix);
        self
    }

    /// How many rows at most ([`Param::Limit`]).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(i64::from(limit));
        self
    }

    /// The idle bound of a guarded transaction ([`Param::IdleMs`]).
    pub fn idle_ms(mut self, idle_ms: &'a str) -> Self {
        self.idle_ms = Some(idle_ms);
        self
    }

    /// The advisory lock's key ([`Param::LockKey`]).
    pub fn lock_key(mut self, key: i64) -> Self {
        self.lock_key = Some(key);
        self
    }

    /// The quoted table as text ([`Param::Relation`]).
    pub fn relation(mut self, relation: &'a str) -> Self {
        self.relation = Some(relation);
        self
    }

    /// The table's schema, `None` for the connection's own
    /// ([`Param::Schema`]).
    pub fn schema(mut self, schema: Option<&'a str>) -> Self {
        self.schema = Some(schema);
        self
    }

    /// The table's own name ([`Param::TableName`]).
    pub fn table_name(mut self, table: &'a str) -> Self {
        self.table_name = Some(table);
        self
    }

    /// The roles of the fields given (a batch's as [`Param::Names`] and
    /// [`Param::Tokens`]).
    fn given(&self) -> impl Iterator<Item = Param> + use<> {
        [
            (self.name.is_some(), Param::Name),
            (self.token.is_some(), Param::Token),
            (self.instance.is_some(), Param::Instance),
            (self.lease_ms.is_some(), Param::LeaseMs),
            (self.instant_ms.is_some(), Param::InstantMs),
            (self.passed_ms.is_some(), Param::PassedMs),
            (self.term.is_some(), Param::Term),
            (self.names.is_some(), Param::Names),
            (self.tokens.is_some(), Param::Tokens),
            (self.prefix.is_some(), Param::Prefix),
            (self.limit.is_some(), Param::Limit),
            (self.idle_ms.is_some(), Param::IdleMs),
            (self.lock_key.is_some(), Param::LockKey),
            (self.relation.is_some(), Param::Relation),
            (self.schema.is_some(), Param::Schema),
            (self.table_name.is_some(), Param::TableName),
        ]
        .into_iter()
        .filter_map(|(given, param)| given.then_some(param))
    }

    /// The value of `param`, if given.
    fn value(&self, param: Param) -> Option<Value<'a>> {
        Some(match param {
            Param::Name => Value::Text(self.name?),
            Param::Token => match self.token? {
                Some(token) => Value::Token(token),
                None => Value::NullToken,
            },
            Param::Instance => Value::Text(self.instance?),
            Param::LeaseMs => Value::Int(self.lease_ms?),
            Param::InstantMs => Value::Int(self.instant_ms?),
            Param::PassedMs => Value::Int(self.passed_ms?),
            Param::Term => Value::Term(self.term?),
            Param::Names => Value::Texts(self.names?),
            Param::Tokens => Value::Tokens(self.tokens?),
            Param::NameAt(i) => Value::Text(self.names?.get(i)?),
            Param::TokenAt(i) => Value::Token(*self.tokens?.get(i)?),
            Param::Prefix => Value::Text(self.prefix?),
            Param::Limit => Value::Int(self.limit?),
            Param::IdleMs => Value::Text(self.idle_ms?),
            Param::LockKey => Value::Int(self.lock_key?),
            Param::Relation => Value::Text(self.relation?),
            Param::Schema => match self.schema? {
                Some(schema) => Value::Text(schema),
                None => Value::NullText,
            },
            Param::TableName => Value::Text(self.table_name?),
        })
    }
}

/// One value to bind, as a driver's bind function receives it
/// ([`Statement::values`]). Tokens stay [`Token`]s, so that a driver that
/// logs its parameters can keep them out of its logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Value<'a> {
    /// Text.
    Text(&'a str),
    /// A NULL of type text.
    NullText,
    /// A token, bound as text ([`Token::expose`]).
    Token(Token<'a>),
    /// A NULL token.
    NullToken,
    /// A signed 64-bit integer.
    Int(i64),
    /// A term: an unsigned 64-bit integer, which PostgreSQL and SQLite
    /// store as a signed one (see [`term_param`](crate::term_param)).
    Term(u64),
    /// An array of text.
    Texts(&'a [&'a str]),
    /// An array of tokens, bound as text.
    Tokens(&'a [Token<'a>]),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(sql: &'static str, params: &'static [Param]) -> Template<'static> {
        Template { sql, params }
    }

    #[test]
    fn markers_render_as_each_dialect_writes_placeholders() {
        let t = template(
            "SELECT {now} FROM {table} WHERE a = :name AND b = :lease_ms::bigint \
             AND c = :name AND d = ':x' AND e = :nope AND f = x::text",
            &[Param::LeaseMs, Param::Name],
        );
        let pg = Statement::render(&t, Placeholders::Dollar, "\"t\"", "NOW");
        assert_eq!(
            pg.text(),
            "SELECT NOW FROM \"t\" WHERE a = $2::text AND b = $1::bigint::bigint \
             AND c = $2::text AND d = ':x' AND e = :nope AND f = x::text"
        );
        assert_eq!(pg.params(), [Param::LeaseMs, Param::Name]);
        let sqlite = Statement::render(&t, Placeholders::NumberedQuestion, "\"t\"", "N");
        assert!(
            sqlite
                .text()
                .contains("a = ?2 AND b = ?1::bigint AND c = ?2")
        );
        let mysql = Statement::render(&t, Placeholders::Question, "`t`", "N");
        assert!(mysql.text().contains("a = ? AND b = ?::bigint AND c = ?"));
        assert_eq!(mysql.params(), [Param::Name, Param::LeaseMs, Param::Name]);
    }

    #[test]
    fn a_marker_the_order_leaves_out_is_numbered_after_it() {
        let t = template("SELECT :term, :name", &[Param::Name]);
        let s = Statement::render(&t, Placeholders::NumberedQuestion, "", "");
        assert_eq!(s.text(), "SELECT ?2, ?1");
        assert_eq!(s.params(), [Param::Name, Param::Term]);
        assert_eq!(t.markers(), [Param::Term, Param::Name]);
    }

    #[test]
    fn indexed_markers_bind_the_batch_s_elements() {
        let t = template("(:name[0], :token[0]), (:name[1], :token[1])", &[]);
        let s = Statement::render(&t, Placeholders::Question, "", "");
        assert_eq!(s.text(), "(?, ?), (?, ?)");
        let tokens = [Token::new("a"), Token::new("b")];
        let names = ["n0", "n1"];
        let values = s
            .values(&Args::new().names(&names).tokens(&tokens))
            .unwrap();
        assert_eq!(
            values,
            [
                Value::Text("n0"),
                Value::Token(tokens[0]),
                Value::Text("n1"),
                Value::Token(tokens[1]),
            ]
        );
        let short = s.values(&Args::new().names(&names[..1]).tokens(&tokens));
        assert!(matches!(
            short,
            Err(BindError::Missing {
                param: Param::NameAt(1),
                ..
            })
        ));
    }

    #[test]
    fn values_refuse_a_missing_role_and_a_value_bound_nowhere() {
        let t = template(
            "UPDATE x SET a = :instant WHERE b = :lease_ms AND c = :token",
            &[Param::InstantMs, Param::LeaseMs, Param::Token],
        );
        let s = Statement::render(&t, Placeholders::Dollar, "", "");
        let ok = Args::new().lease_ms(5).instant_ms(7).token_or_null(None);
        assert_eq!(
            s.values(&ok).unwrap(),
            [Value::Int(7), Value::Int(5), Value::NullToken]
        );
        assert!(matches!(
            s.values(&Args::new().lease_ms(5).token_or_null(None)),
            Err(BindError::Missing {
                param: Param::InstantMs,
                ..
            })
        ));
        let err = s.values(&ok.passed_ms(7)).unwrap_err();
        assert!(
            matches!(
                err,
                BindError::Unused {
                    param: Param::PassedMs,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn every_role_has_one_marker_that_reads_back() {
        for (param, marker) in MARKERS {
            assert_eq!(param.marker(), marker);
            assert_eq!(Param::from_marker(marker, None), Some(param));
            assert_eq!(param.to_string(), format!(":{marker}"));
        }
        assert_eq!(Param::from_marker("name", Some(4)), Some(Param::NameAt(4)));
        assert_eq!(Param::from_marker("term", Some(4)), None);
    }
}
