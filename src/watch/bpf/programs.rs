//! The programs: what each tracepoint's eBPF program does, as instruction sequences, and how
//! the records they write decode into the analysis' events.

use super::ring::Record;
use super::{DROPPED_SLOT, HEADER};
pub use crate::bpf::asm::count;
use crate::bpf::insn::{Insn, RB_NO_WAKEUP, helper};
use crate::watch::btf::TaskOffsets;
use crate::watch::events::Event;

/// The program for one tracepoint: count the invocation, reserve `HEADER + record` bytes in the
/// ring (or count a drop), fill the header, copy the raw record (`record` bytes from the
/// context, a multiple of 8), submit. Returns 1: the kernel then passes the event on to any
/// other perf listeners (there are none unless someone else traces these events).
pub fn program(ringbuf_fd: i32, counts_fd: i32, slot: u32, record: usize) -> Vec<Insn> {
    framed(ringbuf_fd, counts_fd, slot, HEADER + record, 1, |p| {
        p.push(Insn::mov64_reg(1, 7));
        p.push(Insn::add64_imm(1, HEADER as i32));
        p.push(Insn::mov64_imm(2, record as i32));
        p.push(Insn::mov64_reg(3, 6));
        // On a failed read the helper zeroes the destination: a zero record decodes to nothing.
        p.push(Insn::call(helper::PROBE_READ_KERNEL));
    })
}

/// What every program does around its own `body`: keep the context in r6, count the
/// invocation in slot `slot`, reserve `bytes` in the ring (or count a drop and return), fill
/// the [`HEADER`] (time, current pid/tgid, CPU, slot) with the record in r7, run `body`, submit
/// without waking the reader, and return `ret`.
fn framed(
    ringbuf_fd: i32,
    counts_fd: i32,
    slot: u32,
    bytes: usize,
    ret: i32,
    body: impl FnOnce(&mut Vec<Insn>),
) -> Vec<Insn> {
    let mut p = vec![Insn::mov64_reg(6, 1)];
    count(&mut p, counts_fd, slot);
    p.extend(Insn::ld_map_fd(1, ringbuf_fd));
    p.push(Insn::mov64_imm(2, bytes as i32));
    p.push(Insn::mov64_imm(3, 0));
    p.push(Insn::call(helper::RINGBUF_RESERVE));
    let null_check = p.len();
    p.push(Insn::jeq_imm(0, 0, 0)); // patched below to jump to the drop path
    p.push(Insn::mov64_reg(7, 0));
    p.push(Insn::call(helper::KTIME_GET_NS));
    p.push(Insn::stx_dw(7, 0, 0));
    p.push(Insn::call(helper::GET_CURRENT_PID_TGID));
    p.push(Insn::stx_dw(7, 8, 0));
    p.push(Insn::call(helper::GET_SMP_PROCESSOR_ID));
    p.push(Insn::stx_w(7, 16, 0));
    p.push(Insn::st_w(7, 20, slot as i32));
    body(&mut p);
    p.push(Insn::mov64_reg(1, 7));
    p.push(Insn::mov64_imm(2, RB_NO_WAKEUP));
    p.push(Insn::call(helper::RINGBUF_SUBMIT));
    p.push(Insn::mov64_imm(0, ret));
    p.push(Insn::exit());
    let drop_at = p.len();
    p[null_check] = Insn::jeq_imm(0, 0, (drop_at - null_check - 1) as i16);
    count(&mut p, counts_fd, DROPPED_SLOT);
    p.push(Insn::mov64_imm(0, ret));
    p.push(Insn::exit());
    p
}

/// The fixed record a raw-tracepoint program writes after [`HEADER`]: four u32 words whose
/// meaning depends on the event (see [`decode_raw`]).
pub const RAW_BODY: usize = 16;
/// A raw-tracepoint program's whole record.
pub const RAW_RECORD: usize = HEADER + RAW_BODY;

/// `task->field`, a u32 of the task pointer in argument `arg` of the context (in r6), into the
/// record (in r7) at `at`. `direct`: a plain load, which the verifier checks against the BTF
/// type of the argument (a BTF-typed program) and turns into a load that cannot fault (a bad
/// pointer reads zero); else `bpf_probe_read_kernel`, which zeroes the destination on a failed
/// read (r0-r5 clobbered).
fn read_task_u32(p: &mut Vec<Insn>, arg: i16, field: u32, at: i16, direct: bool) {
    if direct {
        p.push(Insn::ldx_dw(1, 6, arg * 8));
        p.push(Insn::ldx_w(1, 1, field as i16));
        p.push(Insn::stx_w(7, at, 1));
        return;
    }
    p.push(Insn::mov64_reg(1, 7));
    p.push(Insn::add64_imm(1, at as i32));
    p.push(Insn::mov64_imm(2, 4));
    p.push(Insn::ldx_dw(3, 6, arg * 8));
    p.push(Insn::add64_imm(3, field as i32));
    p.push(Insn::call(helper::PROBE_READ_KERNEL));
}

/// `*(u32 *)(record + at) = (u32)args[arg]`.
fn copy_arg_u32(p: &mut Vec<Insn>, arg: i16, at: i16) {
    p.push(Insn::ldx_dw(1, 6, arg * 8));
    p.push(Insn::stx_w(7, at, 1));
}

/// The raw-tracepoint program for event `slot` (in [`super::EVENT_NAMES`] order): count the
/// invocation, reserve a [`RAW_RECORD`] in the ring (or count a drop), fill the header (time,
/// current pid/tgid, CPU, slot) and the body from the tracepoint's arguments (u64s in the
/// context, in the order of this kernel's `TP_PROTO`, checked against its BTF before loading):
/// - waking `(p)`, wakeup `(p)`: `p->pid`, `task_cpu(p)` (the wakee's run queue CPU: the
///   `target_cpu` the `sched_wakeup` tracepoint itself reports), `p->tgid`;
/// - switch `(preempt, prev, next, prev_state)`: `prev->pid`, `next->pid`, `prev_state`,
///   `preempt`;
/// - migrate `(p, dest_cpu)`: `p->pid`, `dest_cpu`, `p->tgid`.
///
/// `direct`: read the task fields with plain loads (a BTF-typed program, `tp_btf`; the helper
/// calls were about 40% of what an untyped program adds per event), else with
/// `bpf_probe_read_kernel`. Raw tracepoint programs return 0 (typed ones must).
pub fn raw_program(
    ringbuf_fd: i32,
    counts_fd: i32,
    slot: u32,
    o: &TaskOffsets,
    direct: bool,
) -> Vec<Insn> {
    let h = HEADER as i16;
    framed(ringbuf_fd, counts_fd, slot, RAW_RECORD, 0, |p| match slot {
        // switch(preempt, prev, next, prev_state)
        1 => {
            read_task_u32(p, 1, o.pid, h, direct);
            read_task_u32(p, 2, o.pid, h + 4, direct);
            copy_arg_u32(p, 3, h + 8);
            copy_arg_u32(p, 0, h + 12);
        }
        // migrate(p, dest_cpu)
        2 => {
            read_task_u32(p, 0, o.pid, h, direct);
            copy_arg_u32(p, 1, h + 4);
            read_task_u32(p, 0, o.tgid, h + 8, direct);
            p.push(Insn::st_w(7, h + 12, 0));
        }
        // waking(p), wakeup(p)
        _ => {
            read_task_u32(p, 0, o.pid, h, direct);
            read_task_u32(p, 0, o.cpu, h + 4, direct);
            read_task_u32(p, 0, o.tgid, h + 8, direct);
            p.push(Insn::st_w(7, h + 12, 0));
        }
    })
}

/// Decodes a raw-tracepoint program's record (see [`raw_program`]) into an event.
pub fn decode_raw(r: &Record<'_>) -> Option<Event> {
    let w = |i: usize| {
        Some(u32::from_ne_bytes(
            r.raw.get(i * 4..i * 4 + 4)?.try_into().ok()?,
        ))
    };
    Some(match r.slot {
        0 => Event::Waking {
            waker_tid: r.tid,
            waker_cpu: r.cpu,
            in_irq: false,
            wakee_tid: w(0)? as i32,
        },
        1 => Event::Switch {
            cpu: r.cpu,
            prev_tid: w(0)? as i32,
            // Preempted (or yielding: a state of TASK_RUNNING), the task stays runnable.
            prev_runnable: w(3)? & 1 != 0 || w(2)? == 0,
            next_tid: w(1)? as i32,
        },
        2 => Event::Migrate {
            tid: w(0)? as i32,
            dest_cpu: w(1)?,
        },
        3 => Event::Wakeup {
            wakee_tid: w(0)? as i32,
            target_cpu: w(1)?,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::ring::parse_record;

    #[test]
    fn the_reserve_failure_jumps_to_the_drop_count_and_every_path_exits() {
        let p = program(3, 4, 2, 64);
        let at = p
            .iter()
            .position(|i| *i == Insn::call(helper::RINGBUF_RESERVE))
            .unwrap();
        let jump = p[at + 1];
        assert_eq!((jump.code, jump.dst, jump.imm), (0x15, 0, 0));
        let target = at + 2 + jump.off as usize;
        // The drop path starts by storing the drop slot as the key.
        assert_eq!(p[target], Insn::st_w(10, -4, DROPPED_SLOT as i32));
        assert_eq!(p.last(), Some(&Insn::exit()));
        assert_eq!(
            p[target - 1],
            Insn::exit(),
            "the record path ends before the drop path"
        );
        // The reservation holds the header and the record.
        assert_eq!(p[at - 2], Insn::mov64_imm(2, (HEADER + 64) as i32));
    }

    fn raw_record(slot: u32, words: [u32; 4]) -> Vec<u8> {
        let mut rec = Vec::new();
        rec.extend_from_slice(&5_000u64.to_ne_bytes());
        rec.extend_from_slice(&((100u64 << 32) | 101).to_ne_bytes());
        rec.extend_from_slice(&1u32.to_ne_bytes());
        rec.extend_from_slice(&slot.to_ne_bytes());
        for w in words {
            rec.extend_from_slice(&w.to_ne_bytes());
        }
        rec
    }

    #[test]
    fn raw_records_decode_into_the_events_the_analysis_reads() {
        let decode = |slot, words| decode_raw(&parse_record(&raw_record(slot, words)).unwrap());
        assert_eq!(
            decode(0, [202, 0, 200, 0]),
            Some(Event::Waking {
                waker_tid: 101,
                waker_cpu: 1,
                in_irq: false,
                wakee_tid: 202
            })
        );
        assert_eq!(
            decode(3, [202, 0, 200, 0]),
            Some(Event::Wakeup {
                wakee_tid: 202,
                target_cpu: 0
            })
        );
        // Blocked (TASK_INTERRUPTIBLE), not preempted: no longer runnable.
        assert_eq!(
            decode(1, [101, 0, 1, 0]),
            Some(Event::Switch {
                cpu: 1,
                prev_tid: 101,
                prev_runnable: false,
                next_tid: 0
            })
        );
        // Preempted in TASK_KILLABLE (0x102 has the bit perf's records use for preemption,
        // which the raw arguments keep apart): runnable because preempted.
        let Some(Event::Switch { prev_runnable, .. }) = decode(1, [101, 7, 0x102, 1]) else {
            panic!("a switch")
        };
        assert!(prev_runnable);
        // Yielded (TASK_RUNNING): stays runnable.
        let Some(Event::Switch { prev_runnable, .. }) = decode(1, [101, 7, 0, 0]) else {
            panic!("a switch")
        };
        assert!(prev_runnable);
        assert_eq!(
            decode(2, [202, 1, 200, 0]),
            Some(Event::Migrate {
                tid: 202,
                dest_cpu: 1
            })
        );
        assert_eq!(decode(9, [0; 4]), None);
        let short = raw_record(3, [0; 4]);
        assert_eq!(
            decode_raw(&parse_record(&short[..HEADER + 4]).unwrap()),
            None
        );
    }

    #[test]
    fn raw_programs_read_each_tracepoints_arguments_in_its_order() {
        let o = TaskOffsets {
            pid: 2464,
            tgid: 2468,
            cpu: 68,
            comm: Some(2800),
            on_rq: Some(120),
        };
        // switch(preempt, prev, next, prev_state): prev->pid, next->pid, then the two scalars.
        let p = raw_program(3, 4, 1, &o, false);
        let loads: Vec<i16> = p
            .iter()
            .filter(|i| i.code == 0x79 && i.src == 6)
            .map(|i| i.off)
            .collect();
        assert_eq!(loads, [8, 16, 24, 0]);
        // wakeup(p): the task's pid, CPU and tgid, all through the one argument.
        let p = raw_program(3, 4, 3, &o, false);
        let fields: Vec<i32> = p
            .windows(2)
            .filter(|w| w[0].code == 0x79 && w[0].src == 6 && w[1].code == 0x07)
            .map(|w| w[1].imm)
            .collect();
        assert_eq!(fields, [2464, 68, 2468]);
        // The reservation is the fixed record; a failed one counts a drop; both paths exit.
        let at = p
            .iter()
            .position(|i| *i == Insn::call(helper::RINGBUF_RESERVE))
            .unwrap();
        assert_eq!(p[at - 2], Insn::mov64_imm(2, RAW_RECORD as i32));
        let target = at + 2 + p[at + 1].off as usize;
        assert_eq!(p[target], Insn::st_w(10, -4, DROPPED_SLOT as i32));
        assert_eq!(p[target - 1], Insn::exit());
        assert_eq!(p.last(), Some(&Insn::exit()));
        // No store reaches past the record.
        assert!(
            p.iter()
                .filter(|i| (i.code == 0x63 || i.code == 0x62 || i.code == 0x7b) && i.dst == 7)
                .all(|i| (i.off as usize) + 4 <= RAW_RECORD)
        );
    }

    #[test]
    fn typed_programs_load_task_fields_directly() {
        let o = TaskOffsets {
            pid: 2464,
            tgid: 2468,
            cpu: 68,
            comm: Some(2800),
            on_rq: Some(120),
        };
        for slot in 0..4 {
            let p = raw_program(3, 4, slot, &o, true);
            // No helper reads kernel memory: each field is an argument load then a field load.
            assert!(!p.contains(&Insn::call(helper::PROBE_READ_KERNEL)));
            let direct = p.windows(3).filter(|w| {
                w[0].code == 0x79 && w[0].src == 6 && w[1] == Insn::ldx_w(1, 1, w[1].off)
            });
            let fields: Vec<i16> = direct.map(|w| w[1].off).collect();
            let want: &[i16] = match slot {
                1 => &[2464, 2464],
                2 => &[2464, 2468],
                _ => &[2464, 68, 2468],
            };
            assert_eq!(fields, want, "slot {slot}");
            // Same record as the untyped program: the same stores into it.
            let stores = |p: &[Insn]| -> Vec<i16> {
                p.iter()
                    .filter(|i| (i.code == 0x63 || i.code == 0x62) && i.dst == 7)
                    .map(|i| i.off)
                    .collect()
            };
            let untyped = raw_program(3, 4, slot, &o, false);
            let mut a = stores(&p);
            let mut b = stores(&untyped);
            // The untyped program's helper writes the fields instead of a store.
            b.extend(
                untyped
                    .windows(2)
                    .filter(|w| w[0] == Insn::mov64_reg(1, 7) && w[1].code == 0x07)
                    .map(|w| w[1].imm as i16),
            );
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "slot {slot}");
        }
    }
}
