//! The guest programs: each a workload the field notes name, at the hypervisor level.
//!
//! Every program is 16-bit real-mode code assembled here with `iced-x86`'s code assembler (no
//! hand-typed bytes). Real mode is the simplest state a vCPU starts in, and on this project's
//! software KVM the guest's instructions are emulated whatever the mode (docs/host.md), so the
//! hot paths are kept to the few instructions each exchange needs: one ICR write per message,
//! `sti; hlt` to wait, a handler that writes EOI and returns, one count.
//!
//! The memory map every program shares ([`Layout`]): the real-mode interrupt vector table at 0
//! with one vector ([`IPI_VECTOR`]) pointing at the handler, each vCPU's code in a page of its
//! own, one cache line of figures per vCPU in the data page (its count, its "ready" flag, its
//! last message, its "sleeping" flag), and per vCPU a 64 KiB ring of the low 32 bits of `rdtsc`,
//! one stamp per round trip, which the host reads while the guest runs.

use anyhow::{Context, Result};
use iced_x86::code_asm::*;

/// The vector of every IPI the programs send (a fixed interrupt, physical destination).
pub const IPI_VECTOR: u32 = 0x40;
/// Where the interrupt handler lives.
const HANDLER: u64 = 0x0f00;
/// The first vCPU's code; vCPU n's is `CODE + n * 0x1000`.
pub const CODE: u64 = 0x1000;
/// The data page: one 64-byte line per vCPU.
pub const DATA: u64 = 0x8000;
/// The bytes of one vCPU's line in the data page.
pub const LINE: u64 = 64;
/// Offsets inside a vCPU's line.
pub const COUNT: u64 = 0;
const READY: u64 = 4;
const MESSAGE: u64 = 8;
const SLEEPING: u64 = 12;
/// The burner's own run time, TSC cycles: a 64-bit sum (low word at `RAN`, high at `RAN + 4`)
/// guarded by a sequence word the guest bumps before and after each carry into the high word,
/// so the host reads the two words as one ([`crate::vmm::Running::ran_cycles`]).
pub const RAN_SEQ: u64 = 16;
pub const RAN: u64 = 20;
/// A gap between two of the burner's iterations longer than this, in TSC cycles, is time it
/// did not run (its thread was off the CPU, or its vCPU was): 2^18 cycles, 100 us at 2.6 GHz.
/// An iteration takes tens of cycles on a hardware KVM and about 20,000 on this project's
/// emulating one (a dozen instructions at 0.8 us each), both far below; a preempted thread is
/// off its CPU for a slice, milliseconds, far above.
pub const RAN_GAP_CYCLES: u32 = 1 << 18;
/// vCPU n's ring of stamps starts at `RING + n * RING_BYTES`, reached through ES.
pub const RING: u64 = 0x10000;
pub const RING_BYTES: u64 = 0x10000;
/// The most vCPUs one program's memory map holds (rings up to 1 MiB).
pub const MAX_VCPUS: u32 = 8;
/// Guest memory every VM gets: the map above, bounded.
pub const MEMORY_BYTES: usize = (RING + RING_BYTES * MAX_VCPUS as u64) as usize;

/// x2APIC MSRs (Intel SDM vol. 3, 11.12).
const MSR_APIC_BASE: u32 = 0x1b;
const MSR_X2APIC_SVR: u32 = 0x80f;
const MSR_X2APIC_EOI: u32 = 0x80b;
const MSR_X2APIC_ICR: u32 = 0x830;
const MSR_X2APIC_LVT_TIMER: u32 = 0x832;
const MSR_TSC_DEADLINE: u32 = 0x6e0;
/// LVT timer mode bits 18:17 = 10b: TSC-deadline.
const LVT_TSC_DEADLINE: u32 = 2 << 17;

/// The address of vCPU `n`'s figure at `offset` in the data page.
pub fn line(n: u32, offset: u64) -> u64 {
    DATA + u64::from(n) * LINE + offset
}

/// What a vCPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// Halt ping-pong, the side that starts each round trip and stamps it: send an IPI to
    /// vCPU 1, halt until the answer, stamp, count.
    HaltPing,
    /// Halt ping-pong, the side that answers: halt until the IPI, send one back, count.
    HaltPong,
    /// Spin ping-pong: the message is a shared word, no IPI and no halt (the floor).
    SpinPing,
    SpinPong,
    /// Polling ping-pong: the waiting side polls the other's word for up to `window_cycles` of
    /// its TSC before it announces that it sleeps and halts; a sender sends an IPI only to a
    /// side that announced it (what the guest `haltpoll` idle driver and the idle task's
    /// polling flag do).
    PollPing {
        window_cycles: u32,
    },
    PollPong {
        window_cycles: u32,
    },
    /// A busy vCPU that counts loop iterations (neighbours, fair share) and times its own run:
    /// each iteration adds the TSC cycles since the last to `RAN`, unless the gap was longer
    /// than [`RAN_GAP_CYCLES`] (it was not running then). The loop rate depends on how fast
    /// the host runs guest code; the run time it counts does not.
    Burner,
    /// A vCPU that arms its local APIC timer in TSC-deadline mode `period_cycles` ahead and
    /// halts until it fires (the duty cycle of `bursty`, one level down); its ring holds how
    /// late each wake came, in TSC cycles past the deadline.
    TimerWake {
        period_cycles: u32,
    },
}

/// A program assembled for one vCPU, with where it is loaded.
pub struct Image {
    pub code: Vec<u8>,
    pub load_at: u64,
}

/// The handler every vCPU's IPI vector points at: EOI, return.
pub fn handler() -> Result<Image> {
    let mut a = CodeAssembler::new(16).context("the 16-bit assembler")?;
    a.mov(ecx, MSR_X2APIC_EOI)?;
    a.xor(eax, eax)?;
    a.xor(edx, edx)?;
    a.wrmsr()?;
    a.iret()?;
    Ok(Image {
        code: a.assemble(HANDLER)?,
        load_at: HANDLER,
    })
}

/// The interrupt vector table entry for [`IPI_VECTOR`]: offset, then segment 0.
pub fn vector_entry() -> (u64, [u8; 4]) {
    let off = (HANDLER as u16).to_le_bytes();
    (u64::from(IPI_VECTOR) * 4, [off[0], off[1], 0, 0])
}

/// Assembles `program` for vCPU `n` (x2APIC id `n`) whose partner is vCPU `peer`, the side that
/// starts each round trip stamping it into its ring.
pub fn assemble(program: Program, n: u32, peer: u32) -> Result<Image> {
    assemble_with(program, n, peer, true)
}

/// [`assemble`], the round trips stamped or not: without stamps the starting side only counts
/// (the bare hot path: one ICR write per message, `sti; hlt`, the handler, one count), with
/// them it also writes `rdtsc` to its ring (three instructions more per round trip).
pub fn assemble_with(program: Program, n: u32, peer: u32, stamped: bool) -> Result<Image> {
    let load_at = CODE + u64::from(n) * 0x1000;
    let mut a = CodeAssembler::new(16).context("the 16-bit assembler")?;
    preamble(&mut a, n)?;
    match program {
        Program::HaltPing => halt_ping(&mut a, n, peer, stamped)?,
        Program::HaltPong => halt_pong(&mut a, n, peer)?,
        Program::SpinPing => spin_ping(&mut a, n, peer, stamped)?,
        Program::SpinPong => spin_pong(&mut a, n, peer)?,
        Program::PollPing { window_cycles } => {
            poll_side(&mut a, n, peer, window_cycles, Some(stamped))?
        }
        Program::PollPong { window_cycles } => poll_side(&mut a, n, peer, window_cycles, None)?,
        Program::Burner => burner(&mut a, n)?,
        Program::TimerWake { period_cycles } => timer_wake(&mut a, n, period_cycles)?,
    }
    let code = a.assemble(load_at).context("assembling a guest program")?;
    anyhow::ensure!(code.len() < 0x1000, "guest program over one page");
    Ok(Image { code, load_at })
}

/// x2APIC on (IA32_APIC_BASE bits 10 and 11, then SVR 0x1FF), interrupts off, ES at this
/// vCPU's ring, DI at its start.
fn preamble(a: &mut CodeAssembler, n: u32) -> Result<()> {
    a.cli()?;
    a.mov(ecx, MSR_APIC_BASE)?;
    a.rdmsr()?;
    a.or(eax, 0xc00u32)?;
    a.wrmsr()?;
    a.mov(ecx, MSR_X2APIC_SVR)?;
    a.mov(eax, 0x1ffu32)?;
    a.xor(edx, edx)?;
    a.wrmsr()?;
    let seg = ((RING + u64::from(n) * RING_BYTES) >> 4) as u32;
    a.mov(ax, seg)?;
    a.mov(es, ax)?;
    a.xor(di, di)?;
    a.xor(bx, bx)?;
    Ok(())
}

fn send_ipi(a: &mut CodeAssembler, to: u32) -> Result<()> {
    a.mov(ecx, MSR_X2APIC_ICR)?;
    a.mov(edx, to)?;
    a.mov(eax, IPI_VECTOR)?;
    a.wrmsr()?;
    Ok(())
}

/// Stamp the round trip into the ring (it wraps with DI at 64 KiB) when `stamped`, and count it.
fn stamp_and_count(a: &mut CodeAssembler, n: u32, stamped: bool) -> Result<()> {
    if stamped {
        a.rdtsc()?;
        a.mov(dword_ptr(di).es(), eax)?;
        a.add(di, 4)?;
    }
    a.inc(dword_ptr(line(n, COUNT)))?;
    Ok(())
}

/// Waits until the peer says it is ready (its interrupts are off and its APIC is on), so no
/// first message is sent to a vCPU that cannot take it yet.
fn wait_for_peer(a: &mut CodeAssembler, peer: u32) -> Result<()> {
    let mut wait = a.create_label();
    a.set_label(&mut wait)?;
    a.cmp(dword_ptr(line(peer, READY)), 1)?;
    a.jne(wait)?;
    Ok(())
}

fn say_ready(a: &mut CodeAssembler, n: u32) -> Result<()> {
    a.mov(dword_ptr(line(n, READY)), 1)?;
    Ok(())
}

fn halt_ping(a: &mut CodeAssembler, n: u32, peer: u32, stamped: bool) -> Result<()> {
    say_ready(a, n)?;
    wait_for_peer(a, peer)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    send_ipi(a, peer)?;
    // The sti shadow covers the hlt: an answer that came meanwhile wakes it.
    a.sti()?;
    a.hlt()?;
    a.cli()?;
    stamp_and_count(a, n, stamped)?;
    a.jmp(top)?;
    Ok(())
}

fn halt_pong(a: &mut CodeAssembler, n: u32, peer: u32) -> Result<()> {
    say_ready(a, n)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.sti()?;
    a.hlt()?;
    a.cli()?;
    send_ipi(a, peer)?;
    a.inc(dword_ptr(line(n, COUNT)))?;
    a.jmp(top)?;
    Ok(())
}

fn spin_ping(a: &mut CodeAssembler, n: u32, peer: u32, stamped: bool) -> Result<()> {
    say_ready(a, n)?;
    wait_for_peer(a, peer)?;
    let (mut top, mut wait) = (a.create_label(), a.create_label());
    a.set_label(&mut top)?;
    a.inc(bx)?;
    a.mov(word_ptr(line(n, MESSAGE)), bx)?;
    a.set_label(&mut wait)?;
    a.cmp(word_ptr(line(peer, MESSAGE)), bx)?;
    a.jne(wait)?;
    stamp_and_count(a, n, stamped)?;
    a.jmp(top)?;
    Ok(())
}

fn spin_pong(a: &mut CodeAssembler, n: u32, peer: u32) -> Result<()> {
    say_ready(a, n)?;
    let mut wait = a.create_label();
    a.set_label(&mut wait)?;
    a.mov(ax, word_ptr(line(peer, MESSAGE)))?;
    a.cmp(ax, bx)?;
    a.je(wait)?;
    a.mov(bx, ax)?;
    a.mov(word_ptr(line(n, MESSAGE)), ax)?;
    a.inc(dword_ptr(line(n, COUNT)))?;
    a.jmp(wait)?;
    Ok(())
}

/// One side of the polling ping-pong. BX holds the peer's last message seen. The ping side
/// sends first and stamps each round trip; the pong side waits first.
///
/// Sending: write my message, `mfence`, and send an IPI only when the peer's sleeping flag is
/// set. Waiting: poll the peer's message until `window_cycles` of TSC have passed, then set my
/// sleeping flag, `mfence`, look once more, and halt. The store-fence-load on both sides means
/// at least one of them sees the other's store, so no message is slept through.
fn poll_side(
    a: &mut CodeAssembler,
    n: u32,
    peer: u32,
    window_cycles: u32,
    ping: Option<bool>,
) -> Result<()> {
    // `Some(stamped)` for the side that starts and stamps, `None` for the answering side.
    let (stamped, ping) = (ping.unwrap_or(false), ping.is_some());
    say_ready(a, n)?;
    if ping {
        wait_for_peer(a, peer)?;
    }
    let mut send = a.create_label();
    let mut wait = a.create_label();
    let mut poll = a.create_label();
    let mut sleep = a.create_label();
    let mut woke = a.create_label();
    let mut got = a.create_label();
    if !ping {
        a.jmp(wait)?;
    }
    a.set_label(&mut send)?;
    a.inc(word_ptr(line(n, MESSAGE)))?;
    a.mfence()?;
    a.cmp(word_ptr(line(peer, SLEEPING)), 0)?;
    a.je(wait)?;
    send_ipi(a, peer)?;
    // wait
    a.set_label(&mut wait)?;
    a.rdtsc()?;
    a.add(eax, window_cycles)?;
    a.mov(ebp, eax)?;
    a.set_label(&mut poll)?;
    a.cmp(word_ptr(line(peer, MESSAGE)), bx)?;
    a.jne(got)?;
    a.rdtsc()?;
    a.sub(eax, ebp)?;
    a.js(poll)?;
    a.set_label(&mut sleep)?;
    a.mov(word_ptr(line(n, SLEEPING)), 1)?;
    a.mfence()?;
    a.cmp(word_ptr(line(peer, MESSAGE)), bx)?;
    a.jne(woke)?;
    a.sti()?;
    a.hlt()?;
    a.cli()?;
    a.set_label(&mut woke)?;
    a.mov(word_ptr(line(n, SLEEPING)), 0)?;
    a.cmp(word_ptr(line(peer, MESSAGE)), bx)?;
    a.je(sleep)?;
    a.set_label(&mut got)?;
    a.mov(bx, word_ptr(line(peer, MESSAGE)))?;
    if ping {
        stamp_and_count(a, n, stamped)?;
    } else {
        a.inc(dword_ptr(line(n, COUNT)))?;
    }
    a.jmp(send)?;
    Ok(())
}

/// Arm the deadline (EDX:EAX = now + period; EBP keeps its low half), halt, then write how
/// late the wake came (now - deadline, low 32 bits) into the ring and count.
fn timer_wake(a: &mut CodeAssembler, n: u32, period_cycles: u32) -> Result<()> {
    say_ready(a, n)?;
    a.mov(ecx, MSR_X2APIC_LVT_TIMER)?;
    a.mov(eax, IPI_VECTOR | LVT_TSC_DEADLINE)?;
    a.xor(edx, edx)?;
    a.wrmsr()?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.rdtsc()?;
    a.add(eax, period_cycles)?;
    a.adc(edx, 0)?;
    a.mov(ebp, eax)?;
    a.mov(ecx, MSR_TSC_DEADLINE)?;
    a.wrmsr()?;
    a.sti()?;
    a.hlt()?;
    a.cli()?;
    a.rdtsc()?;
    a.sub(eax, ebp)?;
    a.mov(dword_ptr(di).es(), eax)?;
    a.add(di, 4)?;
    a.inc(dword_ptr(line(n, COUNT)))?;
    a.jmp(top)?;
    Ok(())
}

/// EBP holds the last iteration's TSC (low 32 bits; a gap is far below 2^32 cycles or it is
/// not counted anyway). The sum's low word is added in a register; only when it carries does
/// the guest bump the sequence word (odd), store both words, and bump it again (even), so a
/// host that reads sequence, low, high, sequence and sees the same even value read one sum.
fn burner(a: &mut CodeAssembler, n: u32) -> Result<()> {
    say_ready(a, n)?;
    let (mut top, mut carry) = (a.create_label(), a.create_label());
    a.rdtsc()?;
    a.mov(ebp, eax)?;
    a.set_label(&mut top)?;
    a.inc(dword_ptr(line(n, COUNT)))?;
    a.rdtsc()?;
    a.mov(ecx, eax)?;
    a.sub(ecx, ebp)?;
    a.mov(ebp, eax)?;
    a.cmp(ecx, RAN_GAP_CYCLES)?;
    a.jae(top)?;
    a.mov(eax, dword_ptr(line(n, RAN)))?;
    a.add(eax, ecx)?;
    a.jc(carry)?;
    a.mov(dword_ptr(line(n, RAN)), eax)?;
    a.jmp(top)?;
    a.set_label(&mut carry)?;
    a.inc(dword_ptr(line(n, RAN_SEQ)))?;
    a.mov(dword_ptr(line(n, RAN)), eax)?;
    a.inc(dword_ptr(line(n, RAN + 4)))?;
    a.inc(dword_ptr(line(n, RAN_SEQ)))?;
    a.jmp(top)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    fn mnemonics(img: &Image) -> Vec<Mnemonic> {
        let mut d = Decoder::with_ip(16, &img.code, img.load_at, DecoderOptions::NONE);
        d.iter().map(|i| i.mnemonic()).collect()
    }

    #[test]
    fn every_program_assembles_into_one_page_at_its_vcpus_address() {
        let all = [
            Program::HaltPing,
            Program::HaltPong,
            Program::SpinPing,
            Program::SpinPong,
            Program::PollPing {
                window_cycles: 1000,
            },
            Program::PollPong {
                window_cycles: 1000,
            },
            Program::Burner,
            Program::TimerWake {
                period_cycles: 100_000,
            },
        ];
        for p in all {
            for n in 0..2 {
                let img = assemble(p, n, 1 - n).unwrap();
                assert_eq!(img.load_at, CODE + u64::from(n) * 0x1000);
                assert!(!img.code.is_empty() && img.code.len() < 0x1000, "{p:?}");
                // Decodes back without an invalid instruction.
                assert!(!mnemonics(&img).contains(&Mnemonic::INVALID), "{p:?}");
            }
        }
    }

    /// The halt ping-pong's hot path is what the issue fixes: one ICR write per message
    /// (wrmsr), sti; hlt, one count; the handler is EOI and iret.
    #[test]
    fn halt_ping_pong_has_one_ipi_and_one_halt_per_message() {
        for p in [Program::HaltPing, Program::HaltPong] {
            let m = mnemonics(&assemble(p, 0, 1).unwrap());
            assert_eq!(m.iter().filter(|&&x| x == Mnemonic::Hlt).count(), 1);
            // Two wrmsr in the preamble (APIC base, SVR), one per message.
            assert_eq!(m.iter().filter(|&&x| x == Mnemonic::Wrmsr).count(), 3);
        }
        let h = mnemonics(&handler().unwrap());
        assert_eq!(
            h,
            vec![
                Mnemonic::Mov,
                Mnemonic::Xor,
                Mnemonic::Xor,
                Mnemonic::Wrmsr,
                Mnemonic::Iret
            ]
        );
    }

    #[test]
    fn without_stamps_the_starting_side_runs_three_instructions_fewer() {
        for p in [
            Program::HaltPing,
            Program::SpinPing,
            Program::PollPing { window_cycles: 9 },
        ] {
            let with = mnemonics(&assemble_with(p, 0, 1, true).unwrap());
            let without = mnemonics(&assemble_with(p, 0, 1, false).unwrap());
            assert_eq!(with.len(), without.len() + 3, "{p:?}");
            assert!(with.contains(&Mnemonic::Rdtsc) || matches!(p, Program::PollPing { .. }));
            if !matches!(p, Program::PollPing { .. }) {
                assert!(!without.contains(&Mnemonic::Rdtsc), "{p:?}");
            }
        }
    }

    #[test]
    fn the_spin_programs_never_halt_or_send() {
        for p in [Program::SpinPing, Program::SpinPong, Program::Burner] {
            let m = mnemonics(&assemble(p, 1, 0).unwrap());
            assert!(!m.contains(&Mnemonic::Hlt), "{p:?}");
            assert_eq!(m.iter().filter(|&&x| x == Mnemonic::Wrmsr).count(), 2);
        }
    }

    #[test]
    fn the_vector_entry_points_at_the_handler() {
        let (at, bytes) = vector_entry();
        assert_eq!(at, 0x100);
        assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]) as u64, HANDLER);
        assert_eq!(&bytes[2..], &[0, 0]);
    }
}
