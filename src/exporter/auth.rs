//! Basic auth against bcrypt hashes, priced for a hostile network.
//!
//! A bcrypt check costs tens of milliseconds of CPU by design. Checked per request and in
//! parallel, 1,000 wrong passwords from 20 clients once cost the exporter 60.7 CPU-seconds, both
//! vCPUs of the host it exists to measure. So, as Prometheus's exporter-toolkit does:
//!
//! - every result is remembered, passes and failures alike, keyed by a SHA-256 of the user and
//!   password (never the password itself), in two bounded sets: a flood of wrong passwords
//!   costs one check per distinct password, and cannot push the scraper's pass out of the cache;
//! - a user that does not exist is checked against a fixed hash, so the time of an answer does
//!   not say which users exist;
//! - the checks themselves are serialised by the caller (`super::server`): one at a time, so a
//!   flood of distinct passwords costs at most one CPU.
//!
//! The caches belong to one loaded web config ([`super::webconfig::Generation`]): a reloaded
//! file starts with empty ones, so a changed hash is never answered from an old result.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

/// Passing credentials remembered (a scraper or two; a set this full is not a real fleet).
pub const MAX_PASSED: usize = 64;
/// Failing credentials remembered; beyond it an arbitrary one is forgotten.
pub const MAX_FAILED: usize = 4096;

/// `htpasswd -nbBC 10 x 'cpulab: no such user'`: what a user that does not exist is checked
/// against, at the cost `htpasswd -nBC 10` gives real users.
const NO_SUCH_USER: &str = "$2y$10$5WN1NWA3xonk3oMONU63Ee6XFuRqBQvDUGqrtzKi1qJuP/s/N2iQ2";

type Key = [u8; 32];

/// The users of one web config and what their checks answered.
#[derive(Debug, Default)]
pub struct Users {
    hashes: BTreeMap<String, String>,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    passed: HashSet<Key>,
    failed: HashSet<Key>,
}

impl Users {
    pub fn new(hashes: BTreeMap<String, String>) -> Self {
        Self {
            hashes,
            seen: Mutex::new(Seen::default()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// What an earlier check of these credentials answered, if it is remembered.
    pub fn remembered(&self, user: &str, password: &str) -> Option<bool> {
        let key = key(user, password);
        let seen = self.seen.lock().ok()?;
        if seen.passed.contains(&key) {
            Some(true)
        } else if seen.failed.contains(&key) {
            Some(false)
        } else {
            None
        }
    }

    /// Checks the password with bcrypt (slow by design: call it one at a time, off the
    /// thread that serves connections) and remembers the answer.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        let (hash, exists) = match self.hashes.get(user) {
            Some(h) => (h.as_str(), true),
            None => (NO_SUCH_USER, false),
        };
        let ok = exists && bcrypt::verify(password, hash).unwrap_or(false);
        if let Ok(mut seen) = self.seen.lock() {
            seen.remember(key(user, password), ok);
        }
        ok
    }
}

impl Seen {
    /// Adds an answer, forgetting an arbitrary one of the same kind when that set is full.
    fn remember(&mut self, key: Key, passed: bool) {
        let (set, cap) = if passed {
            (&mut self.passed, MAX_PASSED)
        } else {
            (&mut self.failed, MAX_FAILED)
        };
        if set.len() >= cap
            && !set.contains(&key)
            && let Some(any) = set.iter().next().copied()
        {
            set.remove(&any);
        }
        set.insert(key);
    }
}

/// SHA-256 of the length-prefixed user and the password, so `ab` + `c` and `a` + `bc` differ.
fn key(user: &str, password: &str) -> Key {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&(user.len() as u64).to_le_bytes());
    ctx.update(user.as_bytes());
    ctx.update(password.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Users {
        Users::new(
            [("prometheus".to_string(), bcrypt::hash("secret", 4).unwrap())]
                .into_iter()
                .collect(),
        )
    }

    #[test]
    fn passes_and_failures_are_remembered_apart() {
        let u = users();
        assert_eq!(u.remembered("prometheus", "secret"), None);
        assert!(u.verify("prometheus", "secret"));
        assert_eq!(u.remembered("prometheus", "secret"), Some(true));
        assert!(!u.verify("prometheus", "wrong"));
        assert_eq!(u.remembered("prometheus", "wrong"), Some(false));
        assert_eq!(u.remembered("prometheus", "secret"), Some(true));
        // The split between user and password is part of the key.
        assert_eq!(u.remembered("prometheu", "ssecret"), None);
    }

    #[test]
    fn an_unknown_user_fails_at_the_price_of_a_real_check() {
        let u = users();
        assert!(!u.verify("nobody", "secret"));
        assert_eq!(u.remembered("nobody", "secret"), Some(false));
        // The stand-in hash is a real bcrypt hash of the cost real users get.
        let parts: bcrypt::HashParts = NO_SUCH_USER.parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
    }

    #[test]
    fn a_flood_of_failures_never_pushes_a_pass_out() {
        let u = users();
        assert!(u.verify("prometheus", "secret"));
        // As many failures as bcrypt would take minutes for, remembered directly.
        for i in 0..(MAX_FAILED + 10) {
            u.seen
                .lock()
                .unwrap()
                .remember(key("prometheus", &i.to_string()), false);
        }
        assert!(!u.verify("prometheus", "one more wrong"));
        assert_eq!(u.remembered("prometheus", "one more wrong"), Some(false));
        assert_eq!(u.seen.lock().unwrap().failed.len(), MAX_FAILED);
        assert_eq!(u.seen.lock().unwrap().passed.len(), 1);
        assert_eq!(u.remembered("prometheus", "secret"), Some(true));
    }
}
