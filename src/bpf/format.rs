//! Tracepoint record layouts, read from the kernel instead of assumed.
//!
//! A tracepoint's raw record is a C struct whose layout changes between kernels: `sched_switch`
//! gained and lost fields over the years, `sched_migrate_task` turned `comm` into a `__data_loc`
//! string in 6.x, and the common header itself has moved. Hard-coding offsets works on the kernel
//! it was written on and silently reads garbage elsewhere. So cpulab reads each event's `format`
//! file from tracefs once (`field:pid_t pid; offset:24; size:4; signed:1;`) and looks fields up
//! by name; a field that a kernel lacks is an error naming the event and field, not a wrong
//! figure.
//!
//! Parsing is pure ([`Format::parse`] over the text) and reading a field is pure ([`Format::int`]
//! over the record bytes), so both are tested on a format text and record bytes captured from a
//! real kernel (`tests/fixtures/watch/`).

use std::collections::BTreeMap;

/// One field of a record: where it is and how wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// The layout of one tracepoint's raw record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub name: String,
    /// The tracepoint id (`attr.config` for `PERF_TYPE_TRACEPOINT`, and `common_type` in each
    /// record).
    pub id: u64,
    pub fields: BTreeMap<String, Field>,
}

impl Format {
    /// Parses the text of `events/<system>/<name>/format`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut name = None;
        let mut id = None;
        let mut fields = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                name = Some(n.trim().to_string());
            } else if let Some(i) = line.strip_prefix("ID:") {
                id = i.trim().parse::<u64>().ok();
            } else if let Some(rest) = line.strip_prefix("field:")
                && let Some((fname, field)) = parse_field(rest)
            {
                fields.insert(fname, field);
            }
        }
        let name = name.ok_or("no `name:` line in the tracepoint format")?;
        let id = id.ok_or_else(|| format!("no `ID:` line in the format of {name}"))?;
        Ok(Self { name, id, fields })
    }

    /// The field called `name`, or an error naming the event and the field.
    pub fn field(&self, name: &str) -> Result<Field, String> {
        self.fields.get(name).copied().ok_or_else(|| {
            format!(
                "tracepoint {} has no field `{name}` on this kernel",
                self.name
            )
        })
    }
}

/// `unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;` -> ("common_type", Field).
fn parse_field(rest: &str) -> Option<(String, Field)> {
    let mut parts = rest.split(';').map(str::trim);
    let decl = parts.next()?;
    // The name is the last word of the declaration, without an array suffix: `char comm[16]`.
    let last = decl.split_whitespace().last()?;
    let fname = last.split('[').next()?.to_string();
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for p in parts {
        if let Some(v) = p.strip_prefix("offset:") {
            offset = v.parse().ok();
        } else if let Some(v) = p.strip_prefix("size:") {
            size = v.parse().ok();
        } else if let Some(v) = p.strip_prefix("signed:") {
            signed = v == "1";
        }
    }
    Some((
        fname,
        Field {
            offset: offset?,
            size: size?,
            signed,
        },
    ))
}

impl Field {
    /// The field's bytes in `raw`; `None` when it does not lie wholly inside (an offset and
    /// size read from a format file can be anything, their sum past `usize::MAX` included).
    fn bytes<'a>(&self, raw: &'a [u8]) -> Option<&'a [u8]> {
        raw.get(self.offset..self.offset.checked_add(self.size)?)
    }

    /// The field's value as an integer (1, 2, 4 or 8 bytes, native endian, sign-extended when
    /// signed); `None` when the record is too short or the width is not an integer's.
    pub fn int(&self, raw: &[u8]) -> Option<i64> {
        let b = self.bytes(raw)?;
        Some(match (self.size, self.signed) {
            (1, true) => i64::from(b[0] as i8),
            (1, false) => i64::from(b[0]),
            (2, true) => i64::from(i16::from_ne_bytes([b[0], b[1]])),
            (2, false) => i64::from(u16::from_ne_bytes([b[0], b[1]])),
            (4, true) => i64::from(i32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            (4, false) => i64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            (8, _) => i64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            _ => return None,
        })
    }

    /// A fixed-size `char[N]` field as text, up to its first NUL.
    pub fn text(&self, raw: &[u8]) -> Option<String> {
        let b = self.bytes(raw)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = format!(
            "{}/tests/fixtures/watch/{name}.format",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn parses_sched_switch_of_kernel_6_18() {
        let f = Format::parse(&fixture("sched_switch")).unwrap();
        assert_eq!(f.name, "sched_switch");
        assert_eq!(f.id, 372);
        let prev_state = f.field("prev_state").unwrap();
        assert_eq!((prev_state.offset, prev_state.size), (32, 8));
        assert!(prev_state.signed);
        let comm = f.field("next_comm").unwrap();
        assert_eq!((comm.offset, comm.size), (40, 16));
        assert_eq!(f.field("next_pid").unwrap().offset, 56);
        assert!(f.field("no_such").unwrap_err().contains("sched_switch"));
    }

    #[test]
    fn parses_data_loc_fields_by_name() {
        let f = Format::parse(&fixture("sched_migrate_task")).unwrap();
        assert_eq!(f.field("comm").unwrap().size, 4);
        assert_eq!(f.field("dest_cpu").unwrap().offset, 24);
    }

    #[test]
    fn wakeup_has_target_cpu() {
        let f = Format::parse(&fixture("sched_wakeup")).unwrap();
        assert_eq!(f.field("target_cpu").unwrap().offset, 32);
        assert_eq!(f.field("pid").unwrap().offset, 24);
    }

    #[test]
    fn missing_id_is_an_error() {
        assert!(Format::parse("name: x\nformat:\n").is_err());
        assert!(Format::parse("").is_err());
    }

    #[test]
    fn reads_integers_of_every_width_and_sign() {
        let raw = [0xffu8, 0xff, 0xff, 0xff, 1, 0, 0, 0];
        let f = |offset, size, signed| Field {
            offset,
            size,
            signed,
        };
        assert_eq!(f(0, 4, true).int(&raw), Some(-1));
        assert_eq!(f(0, 4, false).int(&raw), Some(0xffff_ffff));
        assert_eq!(f(0, 1, true).int(&raw), Some(-1));
        assert_eq!(f(4, 2, false).int(&raw), Some(1));
        assert_eq!(f(4, 8, false).int(&raw), None, "past the end");
        assert_eq!(f(0, 3, false).int(&raw), None, "not an integer width");
    }

    #[test]
    fn reads_nul_terminated_text() {
        let mut raw = [0u8; 16];
        raw[..4].copy_from_slice(b"psql");
        let f = Field {
            offset: 0,
            size: 16,
            signed: false,
        };
        assert_eq!(f.text(&raw).as_deref(), Some("psql"));
    }

    #[test]
    fn a_field_at_the_largest_offset_reads_nothing() {
        // Found by tests/parsers.rs: offset + size overflowed (a panic in debug builds, a wrapped
        // range in release) for a format file giving an offset near `usize::MAX`.
        let f = Field {
            offset: usize::MAX,
            size: 8,
            signed: false,
        };
        assert_eq!(f.int(&[0u8; 16]), None);
        assert_eq!(f.text(&[0u8; 16]), None);
    }
}
