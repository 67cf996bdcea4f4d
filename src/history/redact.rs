//! Passwords and connection strings never reach the history.
//!
//! A recorded command line outlives the shell it was typed in and may be exported or attached to
//! a ticket, so what would let someone log in is replaced by `REDACTED` before it is stored:
//! a `password=` (or `pwd=`) inside any word (libpq connection strings, `--measure 'cmd:...'`),
//! a `PGPASSWORD=` or other `*PASSWORD=` assignment, the password of a URL
//! (`postgres://user:secret@host`), and the word after redis-cli's `-a` (or `--pass`).

/// The command line as stored: each word redacted, joined with spaces.
pub fn command_line(words: &[String]) -> String {
    redact_words(words).join(" ")
}

/// Redacts a list of words; words inside a quoted `--measure 'cmd:...'` are split and redacted too.
pub fn redact_words(words: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut next_is_secret = false;
    for w in words {
        if next_is_secret {
            out.push("REDACTED".to_string());
            next_is_secret = false;
            continue;
        }
        if w == "-a" || w == "--pass" || w == "--password" {
            next_is_secret = true;
            out.push(w.clone());
            continue;
        }
        // A word holding several words (a quoted command) is redacted word by word.
        if w.contains(' ') {
            let inner: Vec<String> = w.split(' ').map(String::from).collect();
            out.push(redact_words(&inner).join(" "));
            continue;
        }
        out.push(redact_word(w));
    }
    out
}

fn redact_word(w: &str) -> String {
    // `-aSECRET` (redis-cli accepts the password glued to the flag).
    if let Some(rest) = w.strip_prefix("-a")
        && !rest.is_empty()
        && !rest.starts_with('-')
        && w.len() > 2
        && !w.starts_with("--")
    {
        return "-aREDACTED".into();
    }
    let mut s = w.to_string();
    // key=value pairs whose key names a password, anywhere in the word.
    for key in ["password=", "passwd=", "pwd=", "PASSWORD=", "pass="] {
        let lower = s.to_ascii_lowercase();
        let k = key.to_ascii_lowercase();
        let mut from = 0;
        let mut result = String::new();
        let mut found = false;
        while let Some(i) = lower[from..].find(&k) {
            let start = from + i;
            // `pass=` must start a key (not the end of `bypass=`), the others may end a longer
            // key (`PGPASSWORD=`, `db_password=`).
            if k == "pass=" && start > 0 && s.as_bytes()[start - 1].is_ascii_alphanumeric() {
                result.push_str(&s[from..start + k.len()]);
                from = start + k.len();
                continue;
            }
            found = true;
            let vstart = start + k.len();
            let vend = s[vstart..]
                .find(['&', ';', ',', '\'', '"'])
                .map_or(s.len(), |j| vstart + j);
            result.push_str(&s[from..vstart]);
            result.push_str("REDACTED");
            from = vend;
        }
        if found {
            result.push_str(&s[from..]);
            s = result;
        }
    }
    // scheme://user:secret@host
    if let Some(scheme) = s.find("://") {
        let rest = &s[scheme + 3..];
        if let (Some(at), Some(colon)) = (rest.find('@'), rest.find(':'))
            && colon < at
        {
            let (a, b) = (scheme + 3 + colon + 1, scheme + 3 + at);
            s = format!("{}REDACTED{}", &s[..a], &s[b..]);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(line: &str) -> String {
        let words: Vec<String> = shell_words::split(line).unwrap();
        command_line(&words)
    }

    #[test]
    fn secrets_never_survive() {
        for (line, secret) in [
            (
                "cpulab pair --server 'postgres -k /tmp' --client 'pgbench host=/tmp password=hunter2 dbname=x'",
                "hunter2",
            ),
            ("env PGPASSWORD=hunter2 cpulab pair", "hunter2"),
            (
                "cpulab pair --client 'redis-benchmark -a hunter2 -n 10'",
                "hunter2",
            ),
            ("cpulab pair --client 'redis-cli -ahunter2 ping'", "hunter2"),
            (
                "cpulab try x=1 --measure 'cmd:psql postgres://me:hunter2@db/app -c select'",
                "hunter2",
            ),
            ("cpulab x --dsn 'host=a;Password=hunter2;user=b'", "hunter2"),
        ] {
            let out = r(line);
            assert!(!out.contains(secret), "{line} -> {out}");
            assert!(out.contains("REDACTED"), "{out}");
        }
        // Nothing else is touched.
        assert_eq!(
            r("cpulab pingpong --pairs 0:1 -a"),
            "cpulab pingpong --pairs 0:1 -a"
        );
        assert_eq!(r("cpulab doctor --quick"), "cpulab doctor --quick");
        assert_eq!(r("x bypass=1"), "x bypass=1");
    }
}
