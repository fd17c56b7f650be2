//! The lease table's name: one validation for every backend, with the rules
//! that differ between databases as data.

use std::fmt;

/// What a backend accepts as the lease table's name, and how it quotes it.
///
/// Every backend formats the table name into its SQL (identifiers cannot
/// be bound parameters), so each accepts only plain identifiers: ASCII
/// letters, digits and underscores (and what [`TableRules`] adds), quoted
/// all the same. Nothing a caller passes at run time is formatted into SQL
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRules {
    /// Whether `schema.table` is accepted (one dot at most).
    pub schema: bool,
    /// The longest part, in bytes.
    pub max_bytes: usize,
    /// Whether `$` is accepted in a part (MySQL's identifiers).
    pub dollar: bool,
    /// Whether a part may start with a digit, as long as it is not all
    /// digits (MySQL's rule); otherwise it may not start with one.
    pub leading_digit: bool,
    /// A prefix reserved by the database (compared without case).
    pub reserved_prefix: Option<&'static str>,
    /// The quote character around each part: `"` or `` ` ``.
    pub quote: char,
}

/// A validated lease table name, with its quoted form.
///
/// ```
/// use lease_core::{TableName, TableRules};
///
/// const POSTGRES: TableRules = TableRules {
///     schema: true,
///     max_bytes: 63,
///     dollar: false,
///     leading_digit: false,
///     reserved_prefix: None,
///     quote: '"',
/// };
/// let table = TableName::parse("app.Leases", &POSTGRES)?;
/// assert_eq!(table.quoted(), "\"app\".\"Leases\"");
/// assert_eq!(table.name(), "app.Leases");
/// assert!(TableName::parse("leases; DROP TABLE x", &POSTGRES).is_err());
/// # Ok::<(), lease_core::TableNameError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct TableName {
    name: String,
    schema: Option<String>,
    table: String,
    quoted: String,
}

/// Why a table name was refused: the name, and the rule it breaks.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lease table name {name:?}: {reason}")]
pub struct TableNameError {
    /// The name that was refused.
    pub name: String,
    /// The rule it breaks.
    pub reason: &'static str,
}

impl std::fmt::Debug for TableNameError {
    /// The message, on one line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl TableName {
    /// Validates `name` under `rules`, and quotes it.
    ///
    /// # Errors
    ///
    /// [`TableNameError`] naming the rule `name` breaks.
    pub fn parse(name: &str, rules: &TableRules) -> Result<Self, TableNameError> {
        let invalid = |reason| TableNameError {
            name: name.to_owned(),
            reason,
        };
        let parts: Vec<&str> = name.split('.').collect();
        match parts.len() {
            1 => {}
            2 if rules.schema => {}
            2 => return Err(invalid("no schema: a plain table name, without a dot")),
            _ => return Err(invalid("at most one dot, between a schema and a table")),
        }
        for part in &parts {
            let Some(first) = part.bytes().next() else {
                return Err(invalid("a schema or table name is empty"));
            };
            if part.len() > rules.max_bytes {
                return Err(invalid(if rules.max_bytes == 64 {
                    "a schema or table name is longer than 64 bytes"
                } else {
                    "a schema or table name is longer than 63 bytes"
                }));
            }
            let allowed =
                |b: u8| b.is_ascii_alphanumeric() || b == b'_' || (rules.dollar && b == b'$');
            if !part.bytes().all(allowed) {
                return Err(invalid(if rules.dollar {
                    "only ASCII letters, digits, '_' and '$' are allowed"
                } else {
                    "only ASCII letters, digits and underscores are allowed"
                }));
            }
            if rules.leading_digit {
                if part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid("a schema or table name cannot be only digits"));
                }
            } else if first.is_ascii_digit() {
                return Err(invalid("a schema or table name starts with a digit"));
            }
            if let Some(prefix) = rules.reserved_prefix {
                if part
                    .get(..prefix.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
                {
                    return Err(invalid(
                        "the name starts with a prefix the database reserves",
                    ));
                }
            }
        }
        let q = rules.quote;
        let quoted = parts
            .iter()
            .map(|part| format!("{q}{part}{q}"))
            .collect::<Vec<_>>()
            .join(".");
        let (schema, table) = match parts.as_slice() {
            [schema, table] => (Some((*schema).to_owned()), (*table).to_owned()),
            _ => (None, name.to_owned()),
        };
        Ok(TableName {
            name: name.to_owned(),
            schema,
            table,
            quoted,
        })
    }

    /// The name as given.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema part, if the name has one.
    #[must_use]
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table part.
    #[must_use]
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The name quoted for SQL, each part in the rules' quote character.
    #[must_use]
    pub fn quoted(&self) -> &str {
        &self.quoted
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted)
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG: TableRules = TableRules {
        schema: true,
        max_bytes: 63,
        dollar: false,
        leading_digit: false,
        reserved_prefix: None,
        quote: '"',
    };
    const MYSQL: TableRules = TableRules {
        schema: true,
        max_bytes: 64,
        dollar: true,
        leading_digit: true,
        reserved_prefix: None,
        quote: '`',
    };
    const SQLITE: TableRules = TableRules {
        schema: false,
        max_bytes: 63,
        dollar: false,
        leading_digit: false,
        reserved_prefix: Some("sqlite_"),
        quote: '"',
    };

    #[test]
    fn each_backend_rule_accepts_and_refuses_what_it_should() {
        let long63 = "a".repeat(63);
        let long64 = "a".repeat(64);
        let cases: [(&str, bool, bool, bool); 14] = [
            // name, PostgreSQL, MySQL, SQLite
            ("gst_leases", true, true, true),
            ("app.leases", true, true, false),
            ("a.b.c", false, false, false),
            ("", false, false, false),
            ("app.", false, false, false),
            ("9leases", false, true, false),
            ("123", false, false, false),
            ("lea$es", false, true, false),
            ("leases; DROP TABLE x", false, false, false),
            ("lea\"ses", false, false, false),
            ("lea`ses", false, false, false),
            ("sqlite_leases", true, true, false),
            (&long63, true, true, true),
            (&long64, false, true, false),
        ];
        for (name, pg, mysql, sqlite) in cases {
            assert_eq!(
                TableName::parse(name, &PG).is_ok(),
                pg,
                "PostgreSQL: {name:?}"
            );
            assert_eq!(
                TableName::parse(name, &MYSQL).is_ok(),
                mysql,
                "MySQL: {name:?}"
            );
            assert_eq!(
                TableName::parse(name, &SQLITE).is_ok(),
                sqlite,
                "SQLite: {name:?}"
            );
        }
    }

    #[test]
    fn quoting_and_parts() {
        let t = TableName::parse("app.leases", &MYSQL).unwrap();
        assert_eq!(t.quoted(), "`app`.`leases`");
        assert_eq!(
            (t.schema(), t.table(), t.name()),
            (Some("app"), "leases", "app.leases")
        );
        let t = TableName::parse("leases", &SQLITE).unwrap();
        assert_eq!(t.quoted(), "\"leases\"");
        assert_eq!(t.schema(), None);
        let err = TableName::parse("a-b", &PG).unwrap_err();
        assert_eq!(err.name, "a-b");
        assert!(err.to_string().contains("only ASCII letters"), "{err}");
    }
}
