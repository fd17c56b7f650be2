//! Placeholder: the postgres backend lands with its own issue.
