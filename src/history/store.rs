//! The SQLite file: schema, migrations, and every way a file can be wrong.
//!
//! One file holds every run: `runs` (one row per result, with its whole JSON document),
//! `facts` (the fingerprint, one row per fact) and `figures` (every typed figure with its unit,
//! direction, interval and raw samples), so `history check` reads a figure's series with one
//! query and never parses a document. The file says what it is twice: SQLite's
//! `application_id` header field holds [`APPLICATION_ID`], and `user_version` holds the schema
//! version. A file is opened only after both are checked, and nothing is written to a file that
//! fails a check: a corrupt file, another program's database, or one written by a newer cpulab
//! is reported in one line and left as it was.
//!
//! Two cpulab runs may record at once (a CI job and a shell): the file is in WAL mode, every
//! write is one `BEGIN IMMEDIATE` transaction, and a writer that finds the file locked waits up
//! to [`BUSY_TIMEOUT`]. The schema only moves forward: [`MIGRATIONS`] are applied in order, each
//! in the transaction that bumps `user_version`, so an older file is brought up to date the
//! first time this cpulab opens it for writing.

use super::fingerprint::{Facts, Fingerprint};
use crate::experiment::{Direction, Figure, Unit};
use crate::stats::MeanCi;
use anyhow::{Context, Result, anyhow, bail};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `cplb` in SQLite's header: this file is a cpulab history.
pub const APPLICATION_ID: i32 = 0x6370_6c62;

/// How long a writer waits for another to finish.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Schema migrations; `MIGRATIONS[i]` takes a file from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: runs, their fingerprint facts, their typed figures.
    "CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        time_unix_s INTEGER NOT NULL,
        kind TEXT NOT NULL,
        host_key TEXT NOT NULL,
        hardware_key TEXT NOT NULL,
        command_line TEXT NOT NULL,
        noisy INTEGER NOT NULL,
        document TEXT NOT NULL
    );
    CREATE TABLE facts (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE figures (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        unit TEXT NOT NULL,
        direction TEXT NOT NULL,
        value REAL NOT NULL,
        ci_low REAL,
        ci_high REAL,
        samples TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    );",
    // 2: a figure keeps its label (what it is, for people); runs are found by hardware and kind.
    "ALTER TABLE figures ADD COLUMN label TEXT NOT NULL DEFAULT '';
    CREATE INDEX runs_by_hardware ON runs (hardware_key, kind, time_unix_s);",
];

/// The schema version this cpulab writes.
pub const SCHEMA: u32 = MIGRATIONS.len() as u32;

/// An open history.
pub struct Store {
    conn: Connection,
    pub path: PathBuf,
}

/// A run to record.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub time_unix_s: i64,
    pub kind: String,
    pub fingerprint: Fingerprint,
    /// Already redacted.
    pub command_line: String,
    pub noisy: bool,
    pub figures: Vec<Figure>,
    pub document: serde_json::Value,
}

/// A stored run, without its document.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Run {
    pub id: i64,
    pub time_unix_s: i64,
    pub kind: String,
    pub host_key: String,
    pub hardware_key: String,
    pub command_line: String,
    pub noisy: bool,
}

/// Which runs to list.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub kind: Option<String>,
    pub host: Option<String>,
    pub hardware_key: Option<String>,
    pub since_unix_s: Option<i64>,
    pub until_unix_s: Option<i64>,
}

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

fn first_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?
        .take(SQLITE_MAGIC.len() as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// Creates the file (mode 0600) and its directory (0700) when missing.
fn create(path: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(anyhow!("cannot create {}: {e}", path.display())),
    }
}

/// How a history is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Recording: created and migrated as needed.
    Write,
    /// Reading, with SQLite's locks.
    Read,
    /// Reading a file that may not get a WAL index here, without locks.
    Immutable,
}

impl From<bool> for Access {
    fn from(write: bool) -> Self {
        if write { Access::Write } else { Access::Read }
    }
}

/// True when SQLite could not create the `-shm` WAL index a reader needs (the directory is
/// not writable, or the index cannot be initialised).
fn cannot_create_wal_index(e: &anyhow::Error) -> bool {
    use rusqlite::ffi::{SQLITE_READONLY_CANTINIT, SQLITE_READONLY_DIRECTORY};
    e.chain().any(|c| {
        c.downcast_ref::<rusqlite::Error>()
            .and_then(rusqlite::Error::sqlite_error)
            .is_some_and(|s| {
                [SQLITE_READONLY_CANTINIT, SQLITE_READONLY_DIRECTORY].contains(&s.extended_code)
            })
    })
}

/// `file:PATH?immutable=1`, with the characters a URI gives meaning to escaped.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' | b' ' => uri.push_str(&format!("%{b:02X}")),
            _ if b.is_ascii() => uri.push(*b as char),
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

impl Store {
    /// Opens the history at `path` for recording, creating it when missing and migrating an
    /// older schema forward.
    pub fn open(path: &Path) -> Result<Self> {
        if !path.exists() {
            create(path)?;
        }
        Self::open_with(path, true)
    }

    /// Opens an existing history for reading (and pruning); a missing file is an error.
    pub fn open_existing(path: &Path) -> Result<Self> {
        if !path.exists() {
            bail!(
                "no history at {} yet; measuring commands record there (or give --history PATH)",
                path.display()
            );
        }
        Self::open_with(path, true)
    }

    /// Opens an existing history for reading only (the exporter): it is never created,
    /// migrated or written, so an older schema is read as it is (its `runs` table is the same).
    ///
    /// A reader of a WAL file needs its `-shm` index; a user who may read the file but not
    /// create files beside it (a service with a read-only /var/lib) cannot make one when no
    /// writer is open. Then the file is read as immutable: without locks, which is sound while
    /// no writer has it open (no `-shm` exists), and at worst a read that races a writer fails
    /// and is tried again when the file changes.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        if !path.exists() {
            bail!("no history at {}", path.display());
        }
        match Self::open_with(path, Access::Read) {
            Err(e) if cannot_create_wal_index(&e) => Self::open_with(path, Access::Immutable),
            other => other,
        }
    }

    fn open_with(path: &Path, access: impl Into<Access>) -> Result<Self> {
        let access = access.into();
        let write = access == Access::Write;
        let head = first_bytes(path).with_context(|| format!("cannot read {}", path.display()))?;
        if !head.is_empty() && head != SQLITE_MAGIC {
            bail!(
                "{} is not a cpulab history (not an SQLite file); it was left untouched: \
                 give another --history PATH",
                path.display()
            );
        }
        let read_only = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match access {
            Access::Write => Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            ),
            Access::Read => Connection::open_with_flags(path, read_only),
            Access::Immutable => Connection::open_with_flags(
                immutable_uri(path),
                read_only | OpenFlags::SQLITE_OPEN_URI,
            ),
        }
        .with_context(|| format!("cannot open {}", path.display()))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let mut store = Self {
            conn,
            path: path.to_path_buf(),
        };
        store.check_and_migrate(write).map_err(|e| {
            let msg = format!("{e:#}");
            if msg.contains("malformed") || msg.contains("not a database") {
                anyhow!(
                    "{} is corrupt ({msg}); it was left untouched: move it aside or give another \
                     --history PATH",
                    path.display()
                )
            } else {
                e
            }
        })?;
        Ok(store)
    }

    fn header(&self) -> Result<(i32, u32, i64)> {
        let app: i32 = self
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version: u32 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let tables: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        Ok((app, version, tables))
    }

    fn check_and_migrate(&mut self, write: bool) -> Result<()> {
        let (app, version, tables) = self.header()?;
        let fresh = app == 0 && version == 0 && tables == 0;
        if !fresh && app != APPLICATION_ID {
            bail!(
                "{} is an SQLite database but not a cpulab history; it was left untouched: give \
                 another --history PATH",
                self.path.display()
            );
        }
        if version > SCHEMA {
            bail!(
                "{} was written by a newer cpulab (history schema {version}; this one reads up \
                 to {SCHEMA}); it was left untouched: use the newer cpulab",
                self.path.display()
            );
        }
        if version < SCHEMA && write {
            self.migrate()?;
        }
        if write {
            self.conn.execute_batch("PRAGMA foreign_keys = ON")?;
        }
        Ok(())
    }

    fn migrate(&mut self) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Read again under the write lock: another cpulab may have migrated meanwhile.
        let version: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let app: i32 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        if app == 0 {
            tx.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql)
                .with_context(|| format!("history schema migration to version {}", i + 1))?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))?;
        }
        tx.commit()?;
        // WAL lets readers and one writer work at once; it is recorded in the file.
        let _: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        Ok(())
    }

    /// Records one run; returns its id.
    pub fn insert(&mut self, run: &NewRun) -> Result<i64> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO runs (time_unix_s, kind, host_key, hardware_key, command_line, noisy, document)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                run.time_unix_s,
                run.kind,
                run.fingerprint.host_key,
                run.fingerprint.hardware_key,
                run.command_line,
                run.noisy,
                run.document.to_string()
            ],
        )?;
        let id = tx.last_insert_rowid();
        for (k, v) in &run.fingerprint.facts {
            tx.execute(
                "INSERT INTO facts (run_id, name, value) VALUES (?1, ?2, ?3)",
                params![id, k, v],
            )?;
        }
        for f in &run.figures {
            tx.execute(
                "INSERT OR REPLACE INTO figures
                 (run_id, name, label, unit, direction, value, ci_low, ci_high, samples)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    id,
                    f.name,
                    f.label,
                    enum_text(&f.unit),
                    enum_text(&f.direction),
                    f.value,
                    f.ci.as_ref().map(|c| c.ci95_low),
                    f.ci.as_ref().map(|c| c.ci95_high),
                    serde_json::to_string(&f.samples)?
                ],
            )?;
        }
        tx.commit()?;
        Ok(id)
    }

    /// Runs matching `filter`, oldest first.
    pub fn list(&self, filter: &Filter) -> Result<Vec<Run>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, time_unix_s, kind, host_key, hardware_key, command_line, noisy FROM runs
             WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR host_key = ?2)
               AND (?3 IS NULL OR hardware_key = ?3)
               AND (?4 IS NULL OR time_unix_s >= ?4) AND (?5 IS NULL OR time_unix_s <= ?5)
             ORDER BY time_unix_s, id",
        )?;
        let rows = stmt.query_map(
            params![
                filter.kind,
                filter.host,
                filter.hardware_key,
                filter.since_unix_s,
                filter.until_unix_s
            ],
            |r| {
                Ok(Run {
                    id: r.get(0)?,
                    time_unix_s: r.get(1)?,
                    kind: r.get(2)?,
                    host_key: r.get(3)?,
                    hardware_key: r.get(4)?,
                    command_line: r.get(5)?,
                    noisy: r.get(6)?,
                })
            },
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One run, when it exists.
    pub fn run(&self, id: i64) -> Result<Option<Run>> {
        Ok(self
            .list(&Filter::default())?
            .into_iter()
            .find(|r| r.id == id))
    }

    /// The newest run matching `filter`, when there is one; a file that holds no table yet (just
    /// created by a writer that has not migrated it) holds no run.
    pub fn newest(&self, filter: &Filter) -> Result<Option<Run>> {
        let tables: i64 = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'runs'",
            [],
            |r| r.get(0),
        )?;
        if tables == 0 {
            return Ok(None);
        }
        Ok(self.list(filter)?.pop())
    }

    /// A run's whole JSON document.
    pub fn document(&self, id: i64) -> Result<Option<serde_json::Value>> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT document FROM runs WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?;
        text.map(|t| serde_json::from_str(&t).context("a stored document is not JSON"))
            .transpose()
    }

    /// A run's fingerprint facts.
    pub fn facts(&self, id: i64) -> Result<Facts> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, value FROM facts WHERE run_id = ?1 ORDER BY name")?;
        let rows = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// A run's typed figures, in name order.
    pub fn figures(&self, id: i64) -> Result<Vec<Figure>> {
        let mut stmt = self.conn.prepare(
            "SELECT name, label, unit, direction, value, samples FROM figures WHERE run_id = ?1
             ORDER BY name",
        )?;
        let rows = stmt.query_map([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, f64>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, label, unit, direction, value, samples) = row?;
            let unit: Unit = from_text(&unit).unwrap_or(Unit::Other);
            let direction: Direction = from_text(&direction).unwrap_or(Direction::Neither);
            let samples: Vec<f64> = serde_json::from_str(&samples).unwrap_or_default();
            let ci = (samples.len() >= 2).then(|| MeanCi::of(&samples)).flatten();
            out.push(Figure {
                name,
                label,
                unit,
                direction,
                value,
                ci,
                samples,
            });
        }
        Ok(out)
    }

    /// Deletes the runs listed; returns how many went.
    pub fn delete(&mut self, ids: &[i64]) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut n = 0;
        for id in ids {
            n += tx.execute("DELETE FROM runs WHERE id = ?1", [id])?;
        }
        tx.commit()?;
        Ok(n)
    }
}

fn enum_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

fn from_text<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn run(kind: &str, t: i64, v: f64) -> NewRun {
        NewRun {
            time_unix_s: t,
            kind: kind.into(),
            fingerprint: Fingerprint {
                host_key: "h".into(),
                hardware_key: "hw".into(),
                facts: [("kernel".to_string(), "6.1".to_string())].into(),
            },
            command_line: "cpulab x".into(),
            noisy: false,
            figures: vec![
                Figure::from_samples(
                    "rtt_ns",
                    "rtt",
                    Unit::Nanoseconds,
                    Direction::LowerIsBetter,
                    vec![v, v + 1.0],
                )
                .unwrap(),
            ],
            document: serde_json::json!({"kind": kind}),
        }
    }

    #[test]
    fn a_new_file_is_0600_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/history.sqlite");
        let mut s = Store::open(&p).unwrap();
        let id = s.insert(&run("pingpong", 10, 5.0)).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let r = s.run(id).unwrap().unwrap();
        assert_eq!(r.kind, "pingpong");
        let f = s.figures(id).unwrap();
        assert_eq!(f[0].samples, vec![5.0, 6.0]);
        assert_eq!(f[0].direction, Direction::LowerIsBetter);
        assert_eq!(f[0].label, "rtt");
        assert_eq!(s.facts(id).unwrap()["kernel"], "6.1");
        assert_eq!(s.delete(&[id]).unwrap(), 1);
        assert!(
            s.figures(id).unwrap().is_empty(),
            "figures go with their run"
        );
    }

    #[test]
    fn an_older_schema_is_migrated_forward_and_keeps_its_runs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.sqlite");
        {
            // A version-1 file, as the first history cpulab wrote it.
            let c = Connection::open(&p).unwrap();
            c.execute_batch(MIGRATIONS[0]).unwrap();
            c.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;
                 INSERT INTO runs VALUES (1, 5, 'doctor', 'h', 'hw', 'cpulab doctor', 0, '{{}}');
                 INSERT INTO figures VALUES (1, 'rtt_ns', 'nanoseconds', 'lower-is-better', 3.0, NULL, NULL, '[3.0]');"
            ))
            .unwrap();
        }
        let s = Store::open(&p).unwrap();
        let v: u32 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA);
        let f = s.figures(1).unwrap();
        assert_eq!(f[0].value, 3.0);
        assert_eq!(f[0].label, "");
        assert_eq!(s.list(&Filter::default()).unwrap().len(), 1);
    }

    #[test]
    fn wrong_files_are_refused_and_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        type Make = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Make, &str)> = vec![
            (
                "text.sqlite",
                Box::new(|p: &Path| std::fs::write(p, "hello, not a database").unwrap()),
                "not a cpulab history",
            ),
            (
                "corrupt.sqlite",
                Box::new(|p: &Path| {
                    let mut b = SQLITE_MAGIC.to_vec();
                    b.extend(std::iter::repeat_n(0xAB, 4000));
                    std::fs::write(p, b).unwrap()
                }),
                "corrupt",
            ),
            (
                "other.sqlite",
                Box::new(|p: &Path| {
                    Connection::open(p)
                        .unwrap()
                        .execute_batch("CREATE TABLE t (x)")
                        .unwrap()
                }),
                "not a cpulab history",
            ),
            (
                "newer.sqlite",
                Box::new(|p: &Path| {
                    Connection::open(p)
                        .unwrap()
                        .execute_batch(&format!(
                            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 99; CREATE TABLE runs (x)"
                        ))
                        .unwrap()
                }),
                "newer cpulab",
            ),
        ];
        for (name, make, want) in cases {
            let p = dir.path().join(name);
            make(&p);
            let before = std::fs::read(&p).unwrap();
            let e = format!("{:#}", Store::open(&p).err().expect(name));
            assert!(e.contains(want), "{name}: {e}");
            assert!(!e.contains('\n'), "{e}");
            assert_eq!(std::fs::read(&p).unwrap(), before, "{name} was changed");
        }
    }
}
