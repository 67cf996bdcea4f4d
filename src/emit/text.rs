//! The result's own text, for the terminal.

use super::Emitted;

pub fn render(result: &Emitted) -> String {
    (result.text)()
}
