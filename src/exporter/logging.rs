//! The exporter's log: one line per event on stderr (journald keeps it under the unit), at
//! `--log.level` and in `--log.format`, as Prometheus exporters spell both: go-kit's logfmt
//! (`ts=... level=warn msg="..."`) or one JSON object a line. Messages go through the `log`
//! crate's macros; this is its one logger, installed once by [`init`].

use std::io::Write;
use std::str::FromStr;

/// `--log.level`: the least severe level written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

/// The spellings `--log.level` accepts, least severe first.
pub const LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];

/// The spellings `--log.format` accepts.
pub const FORMATS: [&str; 2] = ["logfmt", "json"];

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "debug" => Ok(Level::Debug),
            "info" => Ok(Level::Info),
            "warn" => Ok(Level::Warn),
            "error" => Ok(Level::Error),
            _ => Err(format!(
                "--log.level `{s}` is not a level; give one of {}",
                LEVELS.join(", ")
            )),
        }
    }
}

impl Level {
    fn filter(self) -> log::LevelFilter {
        match self {
            Level::Debug => log::LevelFilter::Debug,
            Level::Info => log::LevelFilter::Info,
            Level::Warn => log::LevelFilter::Warn,
            Level::Error => log::LevelFilter::Error,
        }
    }
}

/// `--log.format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Logfmt,
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "logfmt" => Ok(LogFormat::Logfmt),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!(
                "--log.format `{s}` is not a format; give logfmt or json"
            )),
        }
    }
}

/// How a level is written (Prometheus's go-kit spelling).
fn level_word(l: log::Level) -> &'static str {
    match l {
        log::Level::Error => "error",
        log::Level::Warn => "warn",
        log::Level::Info => "info",
        log::Level::Debug | log::Level::Trace => "debug",
    }
}

/// A logfmt value: bare when it is a plain word, else quoted with `"`, `\` and line breaks
/// escaped.
fn logfmt_value(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=' && c != '\\');
    if plain {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One log line, without its newline (pure).
pub fn line(format: LogFormat, ts: &str, level: log::Level, msg: &str) -> String {
    let level = level_word(level);
    match format {
        LogFormat::Logfmt => format!(
            "ts={} level={level} msg={}",
            logfmt_value(ts),
            logfmt_value(msg)
        ),
        // Written by hand so the keys keep logfmt's order; each value is a JSON string.
        LogFormat::Json => {
            let q = |v: &str| serde_json::Value::from(v).to_string();
            format!(
                "{{\"ts\":{},\"level\":{},\"msg\":{}}}",
                q(ts),
                q(level),
                q(msg)
            )
        }
    }
}

struct Logger {
    format: LogFormat,
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let ts = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let text = line(self.format, &ts, r.level(), &r.args().to_string());
        // One write per line, so lines of two threads never interleave; a closed stderr is
        // not the exporter's failure.
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{text}\n").as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger (once per process; a second call only sets the level).
pub fn init(level: Level, format: LogFormat) {
    let _ = log::set_boxed_logger(Box::new(Logger { format }));
    log::set_max_level(level.filter());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logfmt_lines_are_go_kits() {
        assert_eq!(
            line(
                LogFormat::Logfmt,
                "2026-11-27T06:12:00.123Z",
                log::Level::Warn,
                "a \"fact\" changed: x=1 -> 2"
            ),
            r#"ts=2026-11-27T06:12:00.123Z level=warn msg="a \"fact\" changed: x=1 -> 2""#
        );
        assert_eq!(
            line(LogFormat::Logfmt, "t", log::Level::Info, "serving"),
            "ts=t level=info msg=serving"
        );
        // A message over two lines stays one log line; an empty one is "".
        assert_eq!(
            line(LogFormat::Logfmt, "t", log::Level::Error, "a\nb\\c"),
            r#"ts=t level=error msg="a\nb\\c""#
        );
        assert_eq!(
            line(LogFormat::Logfmt, "t", log::Level::Debug, ""),
            r#"ts=t level=debug msg="""#
        );
    }

    #[test]
    fn json_lines_are_one_object_each() {
        let l = line(LogFormat::Json, "t", log::Level::Info, "a \"b\"\nc");
        assert!(!l.contains('\n'));
        assert!(l.starts_with(r#"{"ts":"t","level":"info","msg":"#), "{l}");
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["ts"], "t");
        assert_eq!(v["level"], "info");
        assert_eq!(v["msg"], "a \"b\"\nc");
    }

    #[test]
    fn levels_and_formats_take_only_their_spellings() {
        for (i, s) in LEVELS.iter().enumerate() {
            let l: Level = s.parse().unwrap();
            assert_eq!(l as usize, i);
        }
        assert!(
            "warning"
                .parse::<Level>()
                .unwrap_err()
                .contains("debug, info, warn, error")
        );
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("text".parse::<LogFormat>().is_err());
        assert!(Level::Debug.filter() > Level::Error.filter());
    }
}
