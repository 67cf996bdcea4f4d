//! Helpers for the unit tests beside the code.

mod shared;

pub use shared::{ci_value, skipped};

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

/// Checks that `ci` is the mean of `samples` with its 95% Student's t interval (the mean and
/// standard deviation computed here, the quantile from the printed t table), so a figure is
/// checked against its raw samples rather than against itself.
pub fn assert_mean_ci_of(what: &str, ci: &crate::stats::MeanCi, samples: &[f64]) {
    let i = shared::Interval {
        mean: ci.mean,
        ci95_low: ci.ci95_low,
        ci95_high: ci.ci95_high,
        ci95_half_width: ci.ci95_half_width,
        stddev: ci.stddev,
        n: ci.n,
    };
    shared::assert_interval_of(what, &i, samples);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_non_empty_ci_other_than_0_or_false_is_ci() {
        for v in ["true", "1", "yes", "TRUE", "gitlab"] {
            assert!(ci_value(v), "{v}");
        }
        for v in ["", " ", "0", "false", "False"] {
            assert!(!ci_value(v), "{v:?}");
        }
    }

    #[test]
    fn an_interval_of_other_samples_fails_the_check() {
        let ci = crate::stats::MeanCi::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_mean_ci_of("1,2,3", &ci, &[1.0, 2.0, 3.0]);
        let wrong = std::panic::catch_unwind(|| assert_mean_ci_of("x", &ci, &[1.0, 2.0, 4.0]));
        assert!(wrong.is_err());
    }
}
