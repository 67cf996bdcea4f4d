//! A command a remedy runs, as data: an argument vector whose words are text or typed
//! placeholders, quoted once (by `shell-words`) only when it is printed.
//!
//! A command line that holds `<value before>` as text runs: pasted into a shell it writes the
//! placeholder into the kernel. So a value the generator cannot know (a libvirt domain, the
//! host's CPUs) is a [`Word::Placeholder`], which the JSON shows as `{"placeholder": "..."}`
//! and the text prints only on a commented-out line. A command with one has no `line` in the
//! JSON: there is nothing to run until the operator supplies the value.
//!
//! Where a command needs the shell (a redirection, a command's output compared), the script is
//! a constant and every value is a positional argument (`sh -c 'SCRIPT' sh VALUE PATH`), so no
//! value is ever parsed as shell text.

use serde::{Serialize, Serializer};

/// One word of a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Word {
    /// Literal text, passed as one argument.
    Text(String),
    /// A value the operator must supply, described: `"the libvirt domain of this guest"`.
    Placeholder { placeholder: String },
}

impl Word {
    pub fn placeholder(what: impl Into<String>) -> Self {
        Self::Placeholder {
            placeholder: what.into(),
        }
    }
}

impl From<&str> for Word {
    fn from(s: &str) -> Self {
        Self::Text(s.to_string())
    }
}

impl From<String> for Word {
    fn from(s: String) -> Self {
        Self::Text(s)
    }
}

impl From<&String> for Word {
    fn from(s: &String) -> Self {
        Self::Text(s.clone())
    }
}

/// One command: its argument vector, run without a shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub argv: Vec<Word>,
}

impl Command {
    pub fn new<W: Into<Word>>(words: impl IntoIterator<Item = W>) -> Self {
        Self {
            argv: words.into_iter().map(Into::into).collect(),
        }
    }

    /// `sh -c SCRIPT sh ARGS...`: a constant script, its values as `$1`, `$2`, ...
    pub fn sh<W: Into<Word>>(script: &str, args: impl IntoIterator<Item = W>) -> Self {
        let mut argv: Vec<Word> = vec!["sh".into(), "-c".into(), script.into(), "sh".into()];
        argv.extend(args.into_iter().map(Into::into));
        Self { argv }
    }

    /// Writes `value` and a newline into `path` (a sysfs or `/proc/sys` file).
    pub fn write_value(value: impl Into<Word>, path: &str) -> Self {
        Self::sh(
            r#"printf '%s\n' "$1" > "$2""#,
            [value.into(), Word::from(path)],
        )
    }

    /// Copies what `from` holds into `saved`, unless `saved` exists: the value before the
    /// first apply is kept however often apply runs.
    pub fn save(from: &str, saved: &str) -> Self {
        Self::sh(r#"test -e "$2" || cat -- "$1" > "$2""#, [from, saved])
    }

    /// Writes the value [`Command::save`] kept back into `to`, then removes the saved file;
    /// fails (and keeps it) when there is none to put back.
    pub fn restore(saved: &str, to: &str) -> Self {
        // Read first: a redirection would empty `to` before a missing `saved` is noticed.
        Self::sh(
            r#"v=$(cat -- "$1") && printf '%s\n' "$v" > "$2" && rm -f -- "$1""#,
            [saved, to],
        )
    }

    /// Exits 0 when a line of `path` is exactly `value` (a fixed string, not a pattern).
    pub fn file_is(path: &str, value: impl Into<Word>) -> Self {
        Self::new([
            Word::from("grep"),
            "-Fxq".into(),
            "--".into(),
            value.into(),
            path.into(),
        ])
    }

    /// Exits 0 when the output of `argv` is exactly `value`.
    pub fn output_is<W: Into<Word>>(
        value: impl Into<Word>,
        argv: impl IntoIterator<Item = W>,
    ) -> Self {
        let mut args = vec![value.into()];
        args.extend(argv.into_iter().map(Into::into));
        Self::sh(r#"want=$1; shift; test "$("$@")" = "$want""#, args)
    }

    /// The placeholders among its words.
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.argv.iter().filter_map(|w| match w {
            Word::Placeholder { placeholder } => Some(placeholder.as_str()),
            Word::Text(_) => None,
        })
    }

    /// Its arguments when every one is known; `None` while a placeholder stands.
    pub fn runnable(&self) -> Option<Vec<&str>> {
        self.argv
            .iter()
            .map(|w| match w {
                Word::Text(t) => Some(t.as_str()),
                Word::Placeholder { .. } => None,
            })
            .collect()
    }

    /// The line for a POSIX shell, each word quoted once; `None` while a placeholder stands.
    pub fn line(&self) -> Option<String> {
        self.runnable().map(shell_words::join)
    }

    /// How the text and the README print it: the line, or, with a placeholder, the line
    /// commented out with each placeholder as `<what it is>`, so a pasted block runs nothing
    /// that holds one.
    pub fn shown(&self) -> String {
        match self.line() {
            Some(l) => l,
            None => {
                let words: Vec<String> = self
                    .argv
                    .iter()
                    .map(|w| match w {
                        Word::Text(t) => shell_words::quote(t).into_owned(),
                        Word::Placeholder { placeholder } => format!("<{placeholder}>"),
                    })
                    .collect();
                format!("# PLACEHOLDER, replace each <...>: {}", words.join(" "))
            }
        }
    }
}

impl Serialize for Command {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            argv: &'a [Word],
            #[serde(skip_serializing_if = "Option::is_none")]
            line: Option<String>,
        }
        Shown {
            argv: &self.argv,
            line: self.line(),
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_command_is_one_quoted_line_and_a_placeholder_runs_nothing() {
        let c = Command::new(["docker", "update", "--cpuset-cpus", "0-3", "my box"]);
        assert_eq!(
            c.line().unwrap(),
            "docker update --cpuset-cpus 0-3 'my box'"
        );
        assert_eq!(
            shell_words::split(&c.line().unwrap()).unwrap(),
            c.runnable().unwrap()
        );
        let p = Command::new([
            Word::from("virsh"),
            "vcpupin".into(),
            Word::placeholder("the libvirt domain"),
        ]);
        assert_eq!(p.line(), None);
        assert_eq!(p.runnable(), None);
        assert_eq!(p.placeholders().collect::<Vec<_>>(), ["the libvirt domain"]);
        assert_eq!(
            p.shown(),
            "# PLACEHOLDER, replace each <...>: virsh vcpupin <the libvirt domain>"
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"argv": ["virsh", "vcpupin", {"placeholder": "the libvirt domain"}]})
        );
        assert_eq!(serde_json::to_value(&c).unwrap()["line"], c.line().unwrap());
    }

    /// Runs `c` (no placeholder) and says whether it exited 0.
    fn runs(c: &Command) -> bool {
        let argv = c.runnable().unwrap();
        std::process::Command::new(argv[0])
            .args(&argv[1..])
            .status()
            .unwrap()
            .success()
    }

    #[test]
    fn a_fixed_string_is_compared_whole_never_as_a_pattern() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("v");
        let path = f.to_str().unwrap();
        std::fs::write(&f, "100\n").unwrap();
        // As a regular expression `1.0` would match `100`.
        assert!(!runs(&Command::file_is(path, "1.0")));
        assert!(!runs(&Command::file_is(path, "10")));
        assert!(runs(&Command::file_is(path, "100")));
        assert!(!runs(&Command::output_is("1.0", ["cat", path])));
        assert!(runs(&Command::output_is("100", ["cat", path])));
    }

    #[test]
    fn save_keeps_the_first_value_and_restore_puts_it_back_once() {
        let d = tempfile::tempdir().unwrap();
        let (f, saved) = (d.path().join("v"), d.path().join("v.before"));
        let (path, saved) = (f.to_str().unwrap(), saved.to_str().unwrap());
        std::fs::write(&f, "7\n").unwrap();
        assert!(runs(&Command::save(path, saved)));
        assert!(runs(&Command::write_value("a 'quoted' $value", path)));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "a 'quoted' $value\n");
        // A second apply does not take the changed value for the one before.
        assert!(runs(&Command::save(path, saved)));
        assert!(runs(&Command::restore(saved, path)));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "7\n");
        // Nothing saved: restore fails rather than write nothing.
        assert!(!runs(&Command::restore(saved, path)));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "7\n");
    }
}
