//! Tracepoint record layouts, read from the kernel instead of assumed.
//!
//! Every tracepoint publishes its record layout in tracefs (`events/<sys>/<name>/format`): the
//! id that tags its records and, per field, an offset and a size. Those offsets move between
//! kernels (`sched_migrate_task`'s `comm` became a `__data_loc` string in 6.x, shifting every
//! field after it), so cpulab parses the format text and decodes each raw record by field name.
//! Both halves are pure and tested on text and bytes captured on a real kernel
//! (`tests/fixtures/watch/`).

use std::collections::BTreeMap;

/// One field of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// The layout of one tracepoint's records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub name: String,
    /// The id tagging its records (`common_type`), and its `config` for perf_event_open.
    pub id: u64,
    pub fields: BTreeMap<String, Field>,
}

/// Parses a tracefs `format` file. `None` when it has no id or no fields.
pub fn parse_format(text: &str) -> Option<Format> {
    let mut name = String::new();
    let mut id = None;
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("name:") {
            name = rest.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("ID:") {
            id = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("field:") {
            // `field:int prio;	offset:28;	size:4;	signed:1;`
            let mut parts = rest.split(';').map(str::trim);
            let decl = parts.next().unwrap_or_default();
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
            // The field name is the declaration's last word, without an array suffix.
            let fname = decl
                .rsplit(' ')
                .next()
                .unwrap_or_default()
                .split('[')
                .next()
                .unwrap_or_default();
            if let (Some(offset), Some(size)) = (offset, size)
                && !fname.is_empty()
            {
                fields.insert(
                    fname.to_string(),
                    Field {
                        offset,
                        size,
                        signed,
                    },
                );
            }
        }
    }
    let id = id?;
    (!fields.is_empty()).then_some(Format { name, id, fields })
}

impl Format {
    /// An integer field of a raw record (1, 2, 4 or 8 bytes, sign-extended when signed).
    pub fn int(&self, raw: &[u8], field: &str) -> Option<i64> {
        let f = self.fields.get(field)?;
        let b = raw.get(f.offset..f.offset + f.size)?;
        Some(match (f.size, f.signed) {
            (1, true) => b[0] as i8 as i64,
            (1, false) => b[0] as i64,
            (2, true) => i16::from_ne_bytes([b[0], b[1]]) as i64,
            (2, false) => u16::from_ne_bytes([b[0], b[1]]) as i64,
            (4, true) => i32::from_ne_bytes(b.try_into().ok()?) as i64,
            (4, false) => u32::from_ne_bytes(b.try_into().ok()?) as i64,
            (8, _) => i64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// A fixed `char[N]` field, up to its first NUL.
    pub fn str(&self, raw: &[u8], field: &str) -> Option<String> {
        let f = self.fields.get(field)?;
        let b = raw.get(f.offset..f.offset + f.size)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }

    /// Checks that the fields a decoder needs are present.
    fn require(&self, names: &[&str]) -> Result<(), String> {
        for n in names {
            if !self.fields.contains_key(*n) {
                return Err(format!(
                    "tracepoint {} has no field `{n}` on this kernel",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

/// A scheduler event, decoded. Pids are thread ids (the kernel's `pid`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedEvent {
    /// `sched_waking`: runs in the waker's context, on the waker's CPU.
    Waking { waker: i32, wakee: i32 },
    /// `sched_wakeup`: the wakee is runnable, queued on `target_cpu`.
    Wakeup { wakee: i32, target_cpu: u32 },
    /// `sched_switch`: `prev` leaves the CPU (`prev_state` 0 = still runnable, preempted),
    /// `next` starts running.
    Switch {
        prev: i32,
        prev_state: i64,
        prev_comm: String,
        next: i32,
        next_comm: String,
    },
    /// `sched_migrate_task`: `task` moves to `dest_cpu`.
    Migrate { task: i32, dest_cpu: u32 },
}

/// The four layouts cpulab decodes, recognised by `common_type`.
#[derive(Clone, Debug)]
pub struct Decoder {
    pub waking: Format,
    pub wakeup: Format,
    pub switch: Format,
    pub migrate: Format,
}

impl Decoder {
    /// Checks every layout has the fields the decoder reads.
    pub fn new(
        waking: Format,
        wakeup: Format,
        switch: Format,
        migrate: Format,
    ) -> Result<Self, String> {
        waking.require(&["common_type", "common_pid", "pid"])?;
        wakeup.require(&["common_type", "pid", "target_cpu"])?;
        switch.require(&[
            "prev_pid",
            "prev_state",
            "next_pid",
            "prev_comm",
            "next_comm",
        ])?;
        migrate.require(&["pid", "dest_cpu"])?;
        Ok(Self {
            waking,
            wakeup,
            switch,
            migrate,
        })
    }

    /// The tracepoint ids, in the order the ring reader opens them.
    pub fn ids(&self) -> [u64; 4] {
        [
            self.waking.id,
            self.wakeup.id,
            self.switch.id,
            self.migrate.id,
        ]
    }

    /// Decodes one raw record; `None` for a record of another tracepoint or a truncated one.
    pub fn decode(&self, raw: &[u8]) -> Option<SchedEvent> {
        let ty = self.waking.int(raw, "common_type")? as u64;
        let i32f = |f: &Format, n: &str| f.int(raw, n).map(|v| v as i32);
        if ty == self.waking.id {
            Some(SchedEvent::Waking {
                waker: i32f(&self.waking, "common_pid")?,
                wakee: i32f(&self.waking, "pid")?,
            })
        } else if ty == self.wakeup.id {
            Some(SchedEvent::Wakeup {
                wakee: i32f(&self.wakeup, "pid")?,
                target_cpu: u32::try_from(self.wakeup.int(raw, "target_cpu")?).ok()?,
            })
        } else if ty == self.switch.id {
            Some(SchedEvent::Switch {
                prev: i32f(&self.switch, "prev_pid")?,
                prev_state: self.switch.int(raw, "prev_state")?,
                prev_comm: self.switch.str(raw, "prev_comm")?,
                next: i32f(&self.switch, "next_pid")?,
                next_comm: self.switch.str(raw, "next_comm")?,
            })
        } else if ty == self.migrate.id {
            Some(SchedEvent::Migrate {
                task: i32f(&self.migrate, "pid")?,
                dest_cpu: u32::try_from(self.migrate.int(raw, "dest_cpu")?).ok()?,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn fixture(name: &str) -> Format {
        let path = format!(
            "{}/tests/fixtures/watch/{name}.format",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("fixture");
        parse_format(&text).expect("format parses")
    }

    pub(crate) fn decoder() -> Decoder {
        Decoder::new(
            fixture("sched_waking"),
            fixture("sched_wakeup"),
            fixture("sched_switch"),
            fixture("sched_migrate_task"),
        )
        .expect("decoder")
    }

    #[test]
    fn format_text_gives_offsets_by_name() {
        let f = fixture("sched_switch");
        assert_eq!(f.name, "sched_switch");
        assert_eq!(f.id, 372);
        assert_eq!(
            f.fields["prev_state"],
            Field {
                offset: 32,
                size: 8,
                signed: true
            }
        );
        assert_eq!(f.fields["next_comm"].size, 16);
        // The __data_loc comm of sched_migrate_task keeps its 4-byte slot, so later fields are
        // where this kernel says, not where an older kernel put them.
        let m = fixture("sched_migrate_task");
        assert_eq!(m.fields["comm"].size, 4);
        assert_eq!(m.fields["dest_cpu"].offset, 24);
    }

    #[test]
    fn format_without_id_is_rejected() {
        assert!(parse_format("name: x\nformat:\n").is_none());
        assert!(parse_format("").is_none());
    }

    #[test]
    fn missing_field_is_named() {
        let mut w = fixture("sched_wakeup");
        w.fields.remove("target_cpu");
        let e = Decoder::new(
            fixture("sched_waking"),
            w,
            fixture("sched_switch"),
            fixture("sched_migrate_task"),
        )
        .unwrap_err();
        assert!(e.contains("target_cpu"), "{e}");
    }

    #[test]
    fn truncated_record_is_not_decoded() {
        let d = decoder();
        let mut raw = vec![0u8; 8];
        raw[0..2].copy_from_slice(&(d.wakeup.id as u16).to_ne_bytes());
        assert_eq!(d.decode(&raw), None);
    }
}
