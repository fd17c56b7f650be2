//! Placeholder: the mysql backend lands with its own issue.
