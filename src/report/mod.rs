//! Saved results and their reports: the envelope every `--json` document carries, and the
//! self-contained HTML page (`--html`).

pub mod envelope;
pub mod html;
pub mod svg;
