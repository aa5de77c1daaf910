//! The registry's SQL, written once for both databases: values bound to a statement's `?N`
//! ([`Param`]), rows read back as owned cells ([`Row`]), a transaction ([`Tx`]) and a database
//! ([`Backend`]). `registry.rs` holds every statement and the logic around it; `sqlite.rs` and
//! `postgres.rs` only carry them to their database, so the two stores cannot drift apart.
//!
//! The statements are in the dialect both databases share (the doc search, which differs, is
//! each backend's [`Tx::search_docs`]): `?N` placeholders (PostgreSQL's adapter
//! rewrites them to `$N`), `ON CONFLICT`, `RETURNING`, and a `rowid` column where insertion
//! order breaks ties (SQLite's own, PostgreSQL's an identity column of that name).

use cairn_core::ids::{AttemptToken, RunId};
use cairn_core::store::StoreError;

/// A value bound to a statement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Param<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

/// What can be bound to a statement.
pub trait ToParam {
    fn to_param(&self) -> Param<'_>;
}

impl ToParam for str {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}

impl ToParam for String {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}

impl ToParam for AttemptToken {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self.as_str())
    }
}

impl ToParam for RunId {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self.as_str())
    }
}

impl ToParam for i64 {
    fn to_param(&self) -> Param<'_> {
        Param::Int(*self)
    }
}

impl ToParam for u32 {
    fn to_param(&self) -> Param<'_> {
        Param::Int(i64::from(*self))
    }
}

impl ToParam for f64 {
    fn to_param(&self) -> Param<'_> {
        Param::Real(*self)
    }
}

impl<T: ToParam + ?Sized> ToParam for &T {
    fn to_param(&self) -> Param<'_> {
        (**self).to_param()
    }
}

impl<T: ToParam> ToParam for Option<T> {
    fn to_param(&self) -> Param<'_> {
        self.as_ref().map_or(Param::Null, ToParam::to_param)
    }
}

/// The parameters of a statement, `?1` first.
macro_rules! params {
    ($($p:expr),* $(,)?) => {
        &[$($crate::sql::ToParam::to_param(&$p)),*][..]
    };
}
pub(crate) use params;

/// One column of a row read back.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

/// A row read back, its columns in the statement's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Cell>);

impl Row {
    /// Column `i` as `T`; a missing column or another type is a record this cairn cannot read.
    pub fn get<T: FromCell>(&self, i: usize) -> Result<T, StoreError> {
        let cell = self.0.get(i).ok_or_else(|| StoreError::Corrupt(format!("a row has no column {i}")))?;
        T::from_cell(cell).ok_or_else(|| {
            StoreError::Corrupt(format!("column {i} holds {cell:?}, where {} was expected", std::any::type_name::<T>()))
        })
    }
}

/// What a [`Cell`] can be read as.
pub trait FromCell: Sized {
    fn from_cell(cell: &Cell) -> Option<Self>;
}

impl FromCell for i64 {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl FromCell for u32 {
    fn from_cell(cell: &Cell) -> Option<Self> {
        i64::from_cell(cell).and_then(|i| u32::try_from(i).ok())
    }
}

impl FromCell for f64 {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Real(f) => Some(*f),
            Cell::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}

impl FromCell for String {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromCell for AttemptToken {
    fn from_cell(cell: &Cell) -> Option<Self> {
        String::from_cell(cell).map(AttemptToken)
    }
}

/// A run id read from a row: the id of a run the registry holds, taken as it is stored.
impl FromCell for RunId {
    fn from_cell(cell: &Cell) -> Option<Self> {
        String::from_cell(cell).map(RunId::lookup)
    }
}

impl<T: FromCell> FromCell for Option<T> {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Null => Some(None),
            c => T::from_cell(c).map(Some),
        }
    }
}

/// One transaction (or, for a read, one connection in autocommit).
pub trait Tx {
    /// Runs a statement; how many rows it changed.
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError>;
    /// Every row a statement returns.
    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError>;
    /// Takes a run's writes for the rest of this transaction, so its events are numbered in the
    /// order their transactions commit (SQLite has one writer at a time: nothing to take), and
    /// returns its lease row, `(lease_owner, lease_epoch)`, when `lease` asks for it (PostgreSQL
    /// always reads it) or `None` for a run that does not exist.
    fn lock_run(&mut self, run_id: &str, lease: bool) -> Result<Option<(Option<String>, i64)>, StoreError>;
    /// A claim's lock of a run's row: like [`Tx::lock_run`], but a row another transaction holds
    /// is skipped (`FOR UPDATE SKIP LOCKED`), not waited for: `RunBusy`. `None`: no such run.
    fn claim_run(&mut self, run_id: &str) -> Result<Option<(Option<String>, i64)>, StoreError>;
    /// The doc search, in the database's own full-text index: `query` in SQLite FTS5's syntax;
    /// rows of name, version, title, snippet (matches between `\u{1}` and `\u{2}`) and score
    /// (higher is better), best first. A query the index cannot read is `InvalidDocQuery`.
    fn search_docs(&mut self, query: &str, limit: i64) -> Result<Vec<Row>, StoreError>;

    /// The first row a statement returns, if any.
    fn query_opt(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The row a statement returns.
    fn query_one(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Row, StoreError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| StoreError::Database(format!("a statement returned no row: {}", first_line(sql))))
    }
}

fn first_line(sql: &str) -> &str {
    sql.lines().next().unwrap_or(sql)
}

/// How durable a write must be when its transaction returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On disk (fsync'd): evidence, and whatever a process may act on after a crash.
    Full,
    /// Committed, surviving a crash of Cairn but not necessarily of the machine (a process's
    /// identity, progress events): no fsync of its own.
    Relaxed,
}

/// Which connection a read uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The connection that also writes.
    Main,
    /// The one event followers poll after every commit, which never waits for a writer.
    Follower,
}

/// A database the registry lives in.
pub trait Backend: Send + Sync + 'static {
    /// Runs `f` in one write transaction and commits it. A backend whose transactions can
    /// conflict with other writers' (PostgreSQL's, under `SERIALIZABLE`) runs `f` again on a
    /// conflict, so `f` must only touch the database.
    fn write<T>(
        &self,
        durability: Durability,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;

    /// Runs `f` on a connection, outside any write.
    fn read<T>(&self, reader: Reader, f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>)
    -> Result<T, StoreError>;

    /// The database's own integrity check, run without writing (SQLite: on the read-only
    /// connection), or why this database has none Cairn can run.
    fn integrity(&self) -> Result<cairn_core::doctor::Integrity, StoreError>;

    /// The highest event number this database ever issued, where it issues them without holes
    /// (SQLite's `AUTOINCREMENT`: a rolled-back insert gives its number back); `None` where
    /// numbers may skip by design (PostgreSQL's identity columns).
    fn events_issued(&self) -> Result<Option<i64>, StoreError>;

    /// A consistent copy of the database into the new file `dest`, checked; its size in bytes.
    fn backup_to(&self, dest: &std::path::Path) -> Result<u64, StoreError>;
}

/// `sql` with its `?N` placeholders as `$N` (PostgreSQL's), leaving quoted text alone.
pub fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quoted_text() {
        assert_eq!(numbered_placeholders("a = ?1 AND b IN (?2, ?10)"), "a = $1 AND b IN ($2, $10)");
        assert_eq!(
            numbered_placeholders("x = '?1' AND y = ?2 AND z = 'it''s ?3'"),
            "x = '?1' AND y = $2 AND z = 'it''s ?3'"
        );
        assert_eq!(numbered_placeholders("a = ? AND b = ?x"), "a = ? AND b = ?x");
    }

    #[test]
    fn cells_are_read_as_their_types_and_nothing_else() {
        let row = Row(vec![Cell::Int(7), Cell::Null, Cell::Text("t".into()), Cell::Real(1.5), Cell::Int(-1)]);
        assert_eq!(row.get::<i64>(0).unwrap(), 7);
        assert_eq!(row.get::<u32>(0).unwrap(), 7);
        assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
        assert_eq!(row.get::<String>(2).unwrap(), "t");
        assert_eq!(row.get::<f64>(3).unwrap(), 1.5);
        assert!(matches!(row.get::<u32>(4), Err(StoreError::Corrupt(_))));
        assert!(matches!(row.get::<i64>(2), Err(StoreError::Corrupt(_))));
        assert!(matches!(row.get::<String>(1), Err(StoreError::Corrupt(_))));
        assert!(matches!(row.get::<i64>(9), Err(StoreError::Corrupt(_))));
    }
}
