//! Parallel scaling (in progress).
