//! The exporter's own process, as every Prometheus client library publishes it (`process_*`,
//! the names and meanings of client_golang's process collector): CPU time, resident and virtual
//! memory, open and most file descriptors, start time. Parsed from `/proc/self/stat`,
//! `/proc/self/limits` and `/proc/stat`'s `btime` by the `procfs-core` crate (pure parsers on
//! text); read from a `proc` directory handed in, so a test can give it literal files.
//!
//! A figure that cannot be read is `None` (published as no series) and its error is returned by
//! kind ([`ErrorKind`]), never a 0.

use procfs_core::FromRead;
use procfs_core::process::{LimitValue, Limits, Stat};
use std::path::Path;

/// Why a reading failed, as `cpulab_exporter_read_errors_total{kind}` says it: a short fixed
/// vocabulary, never the error's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// The file or directory does not exist (a feature this kernel lacks, a process gone).
    NotFound,
    /// The exporter may not read it.
    Permission,
    /// It was read but its text is not what the parser expects.
    Parse,
    /// Any other I/O failure.
    Io,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Permission => "permission",
            ErrorKind::Parse => "parse",
            ErrorKind::Io => "io",
        }
    }

    /// The kind of an I/O error.
    pub fn of_io(e: &std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::Permission,
            std::io::ErrorKind::InvalidData => ErrorKind::Parse,
            _ => ErrorKind::Io,
        }
    }
}

/// A reading that failed: its kind, for the counter, and what failed, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    pub kind: ErrorKind,
    pub detail: String,
}

impl ReadError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, e: &std::io::Error) -> Self {
        Self {
            kind: ErrorKind::of_io(e),
            detail: format!("{}: {e}", path.display()),
        }
    }

    /// Text at `path` the parser did not take.
    pub fn parse(path: &Path) -> Self {
        Self {
            kind: ErrorKind::Parse,
            detail: format!("{}: unexpected content", path.display()),
        }
    }
}

/// Reads a whole file.
pub fn read_text(path: &Path) -> Result<String, ReadError> {
    std::fs::read_to_string(path).map_err(|e| ReadError::io(path, &e))
}

/// Reads a file and parses it with a pure parser.
fn read_parsed<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ErrorKind>,
) -> Result<T, ReadError> {
    let text = read_text(path)?;
    parse(&text).map_err(|_| ReadError::parse(path))
}

/// The figures of `process_*`; `None` where not read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessFigures {
    /// `process_cpu_seconds_total`: user and system CPU time.
    pub cpu_seconds: Option<f64>,
    /// `process_resident_memory_bytes`.
    pub resident_bytes: Option<u64>,
    /// `process_virtual_memory_bytes`.
    pub virtual_bytes: Option<u64>,
    /// `process_open_fds`.
    pub open_fds: Option<u64>,
    /// `process_max_fds`: the soft limit on open files (absent when unlimited).
    pub max_fds: Option<u64>,
    /// `process_start_time_seconds`: since the Unix epoch.
    pub start_time_s: Option<f64>,
}

/// What `/proc/PID/stat` gives (pure): CPU seconds, resident and virtual bytes, and the start
/// as seconds after boot.
#[derive(Clone, Debug, PartialEq)]
pub struct StatFigures {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub start_after_boot_s: f64,
}

/// Parses `/proc/PID/stat` with the clock's ticks per second and the page size (pure).
pub fn parse_stat(text: &str, ticks_per_s: u64, page_bytes: u64) -> Result<StatFigures, ErrorKind> {
    let s = Stat::from_read(text.as_bytes()).map_err(|_| ErrorKind::Parse)?;
    // A unit the system did not give (sysconf failed, read as 0) makes the reading an error:
    // with a page size of 0 the resident memory would read as 0 bytes.
    if ticks_per_s == 0 || page_bytes == 0 {
        return Err(ErrorKind::Parse);
    }
    let ticks = ticks_per_s as f64;
    Ok(StatFigures {
        cpu_seconds: (s.utime + s.stime) as f64 / ticks,
        resident_bytes: s.rss.saturating_mul(page_bytes),
        virtual_bytes: s.vsize,
        start_after_boot_s: s.starttime as f64 / ticks,
    })
}

/// The soft limit on open files of `/proc/PID/limits` (pure): `Ok(None)` when unlimited.
pub fn parse_max_fds(text: &str) -> Result<Option<u64>, ErrorKind> {
    let l = Limits::from_read(text.as_bytes()).map_err(|_| ErrorKind::Parse)?;
    Ok(match l.max_open_files.soft_limit {
        LimitValue::Value(n) => Some(n),
        LimitValue::Unlimited => None,
    })
}

/// The boot time of `/proc/stat` (`btime`, seconds since the epoch; pure).
pub fn parse_btime(text: &str) -> Result<u64, ErrorKind> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(ErrorKind::Parse)
}

/// The clock ticks per second and the page size of this system; 0 where sysconf gave none
/// ([`parse_stat`] then refuses the reading rather than report 0).
pub fn system_units() -> (u64, u64) {
    // SAFETY: sysconf only reads configuration values.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (
        u64::try_from(ticks).unwrap_or(0),
        u64::try_from(page).unwrap_or(0),
    )
}

/// Reads the process whose directory is `proc_pid` (`/proc/self`), with `proc_stat` for the boot
/// time: its figures and every reading's error.
pub fn read(
    proc_pid: &Path,
    proc_stat: &Path,
    units: (u64, u64),
) -> (ProcessFigures, Vec<ReadError>) {
    let mut errors = Vec::new();
    let mut out = ProcessFigures::default();
    match read_parsed(&proc_pid.join("stat"), |t| parse_stat(t, units.0, units.1)) {
        Ok(s) => {
            out.cpu_seconds = Some(s.cpu_seconds);
            out.resident_bytes = Some(s.resident_bytes);
            out.virtual_bytes = Some(s.virtual_bytes);
            match read_parsed(proc_stat, parse_btime) {
                Ok(b) => out.start_time_s = Some(b as f64 + s.start_after_boot_s),
                Err(e) => errors.push(e),
            }
        }
        Err(e) => errors.push(e),
    }
    let fd = proc_pid.join("fd");
    match std::fs::read_dir(&fd) {
        Ok(rd) => out.open_fds = Some(rd.count() as u64),
        Err(e) => errors.push(ReadError::io(&fd, &e)),
    }
    match read_parsed(&proc_pid.join("limits"), parse_max_fds) {
        Ok(n) => out.max_fds = n,
        Err(e) => errors.push(e),
    }
    (out, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `/proc/self/stat` of `cat` (Linux 6.x), with a command name holding a space and a
    /// parenthesis, which the parser must take from the last `)`.
    const STAT: &str = "12345 (cpu lab) x) S 1 12345 12345 34816 12345 4194304 120 0 0 0 \
        250 150 0 0 20 0 3 0 9000 22593536 1234 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 \
        17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max file size             unlimited            unlimited            bytes     \n\
Max data size             unlimited            unlimited            bytes     \n\
Max stack size            8388608              unlimited            bytes     \n\
Max core file size        0                    unlimited            bytes     \n\
Max resident set          unlimited            unlimited            bytes     \n\
Max processes             31635                31635                processes \n\
Max open files            1024                 524288               files     \n\
Max locked memory         8388608              8388608              bytes     \n\
Max address space         unlimited            unlimited            bytes     \n\
Max file locks            unlimited            unlimited            locks     \n\
Max pending signals       31635                31635                signals   \n\
Max msgqueue size         819200               819200               bytes     \n\
Max nice priority         0                    0                    \n\
Max realtime priority     0                    0                    \n\
Max realtime timeout      unlimited            unlimited            us        \n";

    #[test]
    fn stat_gives_cpu_time_memory_and_start_in_the_units_of_the_system() {
        let s = parse_stat(STAT, 100, 4096).unwrap();
        // utime 250 + stime 150 ticks at 100 a second.
        assert_eq!(s.cpu_seconds, 4.0);
        assert_eq!(s.resident_bytes, 1234 * 4096);
        assert_eq!(s.virtual_bytes, 22_593_536);
        assert_eq!(s.start_after_boot_s, 90.0);
        // Another tick rate and page size change the figures, not the fields read.
        let t = parse_stat(STAT, 250, 16384).unwrap();
        assert_eq!(t.cpu_seconds, 1.6);
        assert_eq!(t.resident_bytes, 1234 * 16384);
    }

    #[test]
    fn a_stat_that_is_not_one_is_a_parse_error() {
        assert_eq!(parse_stat("", 100, 4096), Err(ErrorKind::Parse));
        assert_eq!(
            parse_stat("12345 (cat) S 1 2", 100, 4096),
            Err(ErrorKind::Parse)
        );
        assert_eq!(parse_stat(STAT, 0, 4096), Err(ErrorKind::Parse));
        assert_eq!(parse_stat(STAT, 100, 0), Err(ErrorKind::Parse));
    }

    #[test]
    fn limits_give_the_soft_open_files_limit() {
        assert_eq!(parse_max_fds(LIMITS), Ok(Some(1024)));
        let unlimited = LIMITS.replace(
            "Max open files            1024                 524288",
            "Max open files            unlimited            unlimited",
        );
        assert_eq!(parse_max_fds(&unlimited), Ok(None));
        assert_eq!(
            parse_max_fds("Limit Soft\nMax open files lots many files\n"),
            Err(ErrorKind::Parse)
        );
    }

    #[test]
    fn btime_is_read_from_proc_stat() {
        let text = "cpu  1 2 3 4 5 6 7 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\nintr 5\nctxt 99\nbtime 1764200000\nprocesses 10\n";
        assert_eq!(parse_btime(text), Ok(1_764_200_000));
        assert_eq!(parse_btime("cpu 1 2 3\n"), Err(ErrorKind::Parse));
        assert_eq!(parse_btime("btime soon\n"), Err(ErrorKind::Parse));
    }

    #[test]
    fn a_tree_of_literal_files_is_read_and_a_missing_file_is_absent_not_zero() {
        let d = tempfile::tempdir().unwrap();
        let pid = d.path().join("self");
        std::fs::create_dir_all(pid.join("fd")).unwrap();
        for n in ["0", "1", "2"] {
            std::fs::write(pid.join("fd").join(n), "").unwrap();
        }
        std::fs::write(pid.join("stat"), STAT).unwrap();
        std::fs::write(pid.join("limits"), LIMITS).unwrap();
        std::fs::write(d.path().join("stat"), "btime 1000\n").unwrap();
        let (f, errors) = read(&pid, &d.path().join("stat"), (100, 4096));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(f.cpu_seconds, Some(4.0));
        assert_eq!(f.open_fds, Some(3));
        assert_eq!(f.max_fds, Some(1024));
        assert_eq!(f.start_time_s, Some(1090.0));
        // No limits file and a boot time that does not parse: those figures are absent, and
        // their errors counted by kind; the rest is still read.
        std::fs::remove_file(pid.join("limits")).unwrap();
        std::fs::write(d.path().join("stat"), "btime x\n").unwrap();
        let (f, errors) = read(&pid, &d.path().join("stat"), (100, 4096));
        let mut kinds: Vec<ErrorKind> = errors.iter().map(|e| e.kind).collect();
        kinds.sort();
        assert_eq!(kinds, [ErrorKind::NotFound, ErrorKind::Parse]);
        assert!(
            errors.iter().any(|e| e.detail.contains("limits")),
            "{errors:?}"
        );
        assert_eq!((f.max_fds, f.start_time_s), (None, None));
        assert_eq!(f.resident_bytes, Some(1234 * 4096));
    }

    #[test]
    fn this_process_reads_whole_and_plausibly() {
        // This process's CPU time as getrusage gives it, in seconds.
        let rusage = || {
            // SAFETY: getrusage writes the struct it is given and nothing else.
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
            let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            s(u.ru_utime) + s(u.ru_stime)
        };
        let before = rusage();
        let (f, errors) = read(
            Path::new("/proc/self"),
            Path::new("/proc/stat"),
            system_units(),
        );
        assert!(errors.is_empty(), "{errors:?}");
        // Physics: a running process holds memory, its resident set fits in its address space,
        // stdin/stdout/stderr or at least one descriptor is open, within the limit, and it
        // started before now.
        let (rss, vsz) = (f.resident_bytes.unwrap(), f.virtual_bytes.unwrap());
        assert!(rss > 0 && rss <= vsz, "{rss} {vsz}");
        let open = f.open_fds.unwrap();
        assert!(
            open >= 1 && f.max_fds.is_none_or(|m| open <= m),
            "{open} {:?}",
            f.max_fds
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = f.start_time_s.unwrap();
        assert!(start <= now + 1.0 && start > 1e9, "{start} {now}");
        // The CPU time read from /proc is this process's, as getrusage brackets it (within the
        // clock tick /proc/PID/stat counts in, and one more for rounding).
        let (cpu, after) = (f.cpu_seconds.unwrap(), rusage());
        assert!(
            cpu >= before - 0.02 && cpu <= after + 0.02,
            "{before} <= {cpu} <= {after}"
        );
    }
}
