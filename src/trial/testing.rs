//! Test helpers: a private copy of a fixture tree, so settings can be written.

/// Copies `tests/fixtures/NAME` into a temporary directory.
pub fn copy_fixture(name: &str) -> tempfile::TempDir {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let dst = tempfile::tempdir().unwrap();
    copy_dir(&src, dst.path());
    dst
}

fn copy_dir(src: &std::path::Path, dst: &std::path::Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let p = e.path();
        let to = dst.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_symlink() {
            // A fixture's /proc fd links name what they point at (`anon_inode:kvm-vm`): copied
            // as links, never followed.
            std::os::unix::fs::symlink(std::fs::read_link(&p).unwrap(), &to).unwrap();
        } else if kind.is_dir() {
            copy_dir(&p, &to);
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
}
