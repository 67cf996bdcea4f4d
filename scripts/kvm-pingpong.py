#!/usr/bin/env python3
"""An independent measurement of the guest exchanges `cpulab host bench` runs.

A VMM of its own, written apart from cpulab's: ctypes ioctls on /dev/kvm, the guest assembled by
GNU as from the source below (no cpulab code), vCPU threads in Python (ctypes releases the GIL
around KVM_RUN). Each round trip is the hot path the issue fixes: one ICR write per message,
`sti; hlt`, a handler that writes EOI and returns, one count; no timestamps in the guest. The
round trip is counted over the host clock: a window's length over vCPU 0's count.

Usage: kvm-pingpong.py EXCHANGE CPU_A CPU_B HALT_POLL SECONDS
  EXCHANGE   halt or spin
  CPU_A/B    the host CPU of each vCPU thread, or "any"
  HALT_POLL  the VM's own halt-poll limit in ns, or "module" to leave the module's
Prints one JSON line: {"exchange", "cpus", "halt_poll", "rtt_ns", "round_trips"}.
"""
import ctypes, fcntl, json, mmap, os, struct, subprocess, sys, tempfile, threading, time

GUEST = r"""
.code16
.text
.org 0x0f00
handler:
    mov $0x80b, %ecx
    xor %eax, %eax
    xor %edx, %edx
    wrmsr
    iret
.macro x2apic
    cli
    mov $0x1b, %ecx
    rdmsr
    or $0xc00, %eax
    wrmsr
    mov $0x80f, %ecx
    mov $0x1ff, %eax
    xor %edx, %edx
    wrmsr
.endm
.org 0x1000
halt_ping:
    x2apic
    movl $1, 0x8004
1:  cmpl $1, 0x8044
    jne 1b
2:  mov $0x830, %ecx
    mov $1, %edx
    mov $0x40, %eax
    wrmsr
    sti
    hlt
    cli
    incl 0x8000
    jmp 2b
.org 0x2000
halt_pong:
    x2apic
    movl $1, 0x8044
1:  sti
    hlt
    cli
    mov $0x830, %ecx
    xor %edx, %edx
    mov $0x40, %eax
    wrmsr
    incl 0x8040
    jmp 1b
.org 0x3000
spin_ping:
    x2apic
    xor %bx, %bx
    movl $1, 0x8004
1:  cmpl $1, 0x8044
    jne 1b
2:  inc %bx
    mov %bx, 0x8008
3:  cmp %bx, 0x8048
    jne 3b
    incl 0x8000
    jmp 2b
.org 0x4000
spin_pong:
    x2apic
    xor %bx, %bx
    movl $1, 0x8044
1:  mov 0x8008, %ax
    cmp %bx, %ax
    je 1b
    mov %ax, %bx
    mov %ax, 0x8048
    incl 0x8040
    jmp 1b
"""

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_GET_VCPU_MMAP_SIZE = 0xAE04
KVM_GET_SUPPORTED_CPUID = 0xC008AE05
KVM_CREATE_VCPU = 0xAE41
KVM_SET_USER_MEMORY_REGION = 0x4020AE46
KVM_CREATE_IRQCHIP = 0xAE60
KVM_RUN = 0xAE80
KVM_GET_REGS = 0x8090AE81
KVM_SET_REGS = 0x4090AE82
KVM_GET_SREGS = 0x8138AE83
KVM_SET_SREGS = 0x4138AE84
KVM_SET_CPUID2 = 0x4008AE90
KVM_SET_MP_STATE = 0x4004AE99
KVM_ENABLE_CAP = 0x4068AEA3
KVM_CAP_HALT_POLL = 182
MEM = 0x10000

libc = ctypes.CDLL(None, use_errno=True)
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def ioctl(fd, req, arg=None):
    r = libc.ioctl(fd, req, arg)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"ioctl {req:#x}: {os.strerror(e)}")
    return r


def assemble():
    with tempfile.TemporaryDirectory() as d:
        src, obj, out = (os.path.join(d, n) for n in ("g.s", "g.o", "g.bin"))
        open(src, "w").write(GUEST)
        subprocess.run(["as", "--32", "-o", obj, src], check=True)
        subprocess.run(["objcopy", "-O", "binary", "-j", ".text", obj, out], check=True)
        return open(out, "rb").read()


def main():
    exchange, cpu_a, cpu_b, halt_poll, seconds = sys.argv[1:6]
    entry = {"halt": (0x1000, 0x2000), "spin": (0x3000, 0x4000)}[exchange]
    kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    assert ioctl(kvm, KVM_GET_API_VERSION) == 12
    vm = ioctl(kvm, KVM_CREATE_VM, 0)
    ioctl(vm, KVM_CREATE_IRQCHIP, 0)
    if halt_poll != "module":
        cap = struct.pack("=II4Q64x", KVM_CAP_HALT_POLL, 0, int(halt_poll), 0, 0, 0)
        ioctl(vm, KVM_ENABLE_CAP, ctypes.c_char_p(cap))
    mem = mmap.mmap(-1, MEM, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    region = struct.pack("=IIQQQ", 0, 0, 0, MEM, addr)
    ioctl(vm, KVM_SET_USER_MEMORY_REGION, ctypes.c_char_p(region))
    code = assemble()
    mem[0:len(code)] = code
    mem[0x40 * 4:0x40 * 4 + 4] = struct.pack("<HH", 0x0f00, 0)
    # The supported CPUID (x2APIC in it), given to each vCPU unchanged.
    n = 100
    buf = ctypes.create_string_buffer(8 + 40 * n)
    struct.pack_into("=II", buf, 0, n, 0)
    ioctl(kvm, KVM_GET_SUPPORTED_CPUID, buf)
    run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0)
    vcpus = []
    for i, rip in enumerate(entry):
        fd = ioctl(vm, KVM_CREATE_VCPU, i)
        ioctl(fd, KVM_SET_CPUID2, buf)
        sregs = ctypes.create_string_buffer(312)
        ioctl(fd, KVM_GET_SREGS, sregs)
        for seg in range(6):  # cs ds es fs gs ss: base u64 at 24 * seg, selector u16 at +12
            struct.pack_into("=Q", sregs, seg * 24, 0)
            struct.pack_into("=H", sregs, seg * 24 + 12, 0)
        ioctl(fd, KVM_SET_SREGS, sregs)
        regs = ctypes.create_string_buffer(144)
        ioctl(fd, KVM_GET_REGS, regs)
        struct.pack_into("=Q", regs, 6 * 8, 0x0e00 - 0x100 * i)  # rsp
        struct.pack_into("=QQ", regs, 16 * 8, rip, 2)  # rip, rflags
        ioctl(fd, KVM_SET_REGS, regs)
        ioctl(fd, KVM_SET_MP_STATE, ctypes.byref(ctypes.c_uint32(0)))  # RUNNABLE
        mmap.mmap(fd, run_size)  # the run area must be mapped before KVM_RUN
        vcpus.append(fd)

    def vcpu_thread(fd, cpu):
        if cpu != "any":
            os.sched_setaffinity(0, {int(cpu)})
        while True:
            if libc.ioctl(fd, KVM_RUN, None) < 0 and ctypes.get_errno() != 4:
                os._exit(3)
            # With the in-kernel irqchip nothing should come back to user space.
            os._exit(4)

    for fd, cpu in zip(vcpus, (cpu_a, cpu_b)):
        threading.Thread(target=vcpu_thread, args=(fd, cpu), daemon=True).start()
    count = lambda: struct.unpack_from("<I", mem, 0x8000)[0]
    time.sleep(0.2)
    c0, t0 = count(), time.monotonic_ns()
    time.sleep(float(seconds))
    c1, t1 = count(), time.monotonic_ns()
    trips = (c1 - c0) & 0xFFFFFFFF
    print(json.dumps({
        "exchange": exchange, "cpus": f"{cpu_a}:{cpu_b}", "halt_poll": halt_poll,
        "rtt_ns": (t1 - t0) / trips if trips else None, "round_trips": trips,
    }), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
