//! The machine fingerprint.
