//! Constant SQL that each connection prepares once and reuses.
//!
//! `diesel::sql_query` marks every statement unsafe to cache (its text
//! could be built at run time), so each execution prepares it anew: one
//! round trip and one implicit transaction to parse it (`Parse`, `Sync`),
//! another to run it. For the statements a worker runs periodically
//! whatever its load (the status heartbeat flush, the worker heartbeat, the
//! clock check) that doubled PostgreSQL's commits. [`static_sql`] takes
//! only `&'static str`, text fixed at compile time, so caching it by its
//! text (diesel's cache key for queries without a static type id) is safe:
//! after its first use on a connection it costs one round trip and one
//! commit.

use std::marker::PhantomData;

use diesel::{
    QueryResult,
    pg::Pg,
    query_builder::{AstPass, Query, QueryFragment, QueryId},
    serialize::ToSql,
    sql_types::{HasSqlType, Untyped},
};

/// A statement whose text is `sql`, with `$1`, `$2`, ... bound in order by
/// [`StaticSql::bind`], as with `sql_query`.
pub(crate) fn static_sql<'a>(sql: &'static str) -> StaticSql<'a> {
    StaticSql {
        sql,
        binds: Vec::new(),
    }
}

/// See [`static_sql`].
pub(crate) struct StaticSql<'a> {
    sql: &'static str,
    binds: Vec<Box<dyn QueryFragment<Pg> + Send + 'a>>,
}

/// One bound value; writes its placeholder where it is walked.
struct Bind<ST, V> {
    value: V,
    sql_type: PhantomData<fn() -> ST>,
}

impl<ST, V> QueryFragment<Pg> for Bind<ST, V>
where
    Pg: HasSqlType<ST>,
    V: ToSql<ST, Pg>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_bind_param::<ST, V>(&self.value)
    }
}

impl<'a> StaticSql<'a> {
    /// Binds the next parameter (`$1` first), of SQL type `ST`.
    pub(crate) fn bind<ST, V>(mut self, value: V) -> Self
    where
        Pg: HasSqlType<ST>,
        V: ToSql<ST, Pg> + Send + 'a,
        ST: 'a,
    {
        self.binds.push(Box::new(Bind::<ST, V> {
            value,
            sql_type: PhantomData,
        }));
        self
    }
}

impl QueryFragment<Pg> for StaticSql<'_> {
    /// The text with each `$N` replaced by bind N, which diesel numbers in
    /// the order they occur; the text and the bind types are the same on
    /// every execution, so the statement cache keeps one entry. (Unlike
    /// `SqlQuery`, no `unsafe_to_cache_prepared`.)
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let mut rest = self.sql;
        while let Some(at) = rest.find('$') {
            out.push_sql(&rest[..at]);
            let after = &rest[at + 1..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                out.push_sql("$");
                rest = after;
                continue;
            }
            let bind = after[..digits]
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| self.binds.get(i))
                .ok_or_else(|| {
                    diesel::result::Error::QueryBuilderError(
                        format!(
                            "${} has no bound value ({} bound)",
                            &after[..digits],
                            self.binds.len()
                        )
                        .into(),
                    )
                })?;
            bind.walk_ast(out.reborrow())?;
            rest = &after[digits..];
        }
        out.push_sql(rest);
        Ok(())
    }
}

impl QueryId for StaticSql<'_> {
    // No static id: the statement cache keys it by its text and bind types.
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for StaticSql<'_> {
    type SqlType = Untyped;
}

#[cfg(test)]
mod tests {
    use diesel::{
        debug_query,
        sql_types::{Integer, Text},
    };

    use super::*;

    #[test]
    fn placeholders_are_renumbered_in_the_order_they_occur_with_their_own_values() {
        let q = static_sql("SELECT $2, $1 || '$', $2")
            .bind::<Text, _>("one")
            .bind::<Integer, _>(2);
        assert_eq!(
            debug_query::<Pg, _>(&q).to_string(),
            "SELECT $1, $2 || '$', $3 -- binds: [2, \"one\", 2]"
        );
    }

    #[test]
    fn the_statement_may_be_cached_by_its_text() {
        let q = static_sql("SELECT $1").bind::<Integer, _>(1);
        assert_eq!(q.is_safe_to_cache_prepared(&Pg), Ok(true));
        let q = diesel::sql_query("SELECT $1").bind::<Integer, _>(1);
        assert_eq!(q.is_safe_to_cache_prepared(&Pg), Ok(false));
    }

    #[test]
    fn a_placeholder_without_a_value_is_an_error() {
        let q = static_sql("SELECT $1, $2").bind::<Integer, _>(1);
        let error = q.to_sql(&mut diesel::pg::PgQueryBuilder::default(), &Pg);
        assert!(
            matches!(&error, Err(diesel::result::Error::QueryBuilderError(e)) if e.to_string().contains("$2 has no bound value")),
            "{error:?}"
        );
    }
}
