//! Helpers for the unit tests beside the code.

/// Writes `files` (path relative to the root, content) under a fresh temporary root: a machine
/// tree for a reader that takes a root path.
pub fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    t
}
