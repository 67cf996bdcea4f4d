//! The enveloped document as pretty JSON, with a final newline: what `--json` prints.

use super::Emitted;
use anyhow::Result;

pub fn render(result: &Emitted) -> Result<String> {
    let mut text = serde_json::to_string_pretty(&result.document)?;
    text.push('\n');
    Ok(text)
}
