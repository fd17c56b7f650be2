//! [`Token`]: a holder token bound as a statement parameter, kept out of
//! the driver's logs.

use std::error::Error;
use std::fmt;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// A holder token as a statement parameter, encoded exactly as the `&str`
/// it wraps.
///
/// tokio-postgres logs every statement it executes with its parameters'
/// `Debug` output (the `log` crate, target `tokio_postgres::query`, debug
/// level). The token is the tenure's credential: whoever has it can renew
/// or release the lease. So its `Debug` shows a placeholder.
#[derive(Clone, Copy)]
pub(crate) struct Token<'a>(pub(crate) &'a str);

impl fmt::Debug for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<holder token>")
    }
}

impl ToSql for Token<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_token_and_encoding_keeps_it() {
        let token = Token("t0k3n-secret");
        assert_eq!(
            format!("{token:?} {:?}", [token]),
            "<holder token> [<holder token>]"
        );
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        token.to_sql(&Type::TEXT, &mut a).unwrap();
        "t0k3n-secret".to_sql(&Type::TEXT, &mut b).unwrap();
        assert_eq!(a, b);
    }
}
