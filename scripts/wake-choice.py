#!/usr/bin/env python3
"""Times, on the waker's CPU, the part of a wakeup between sched:sched_waking and
csd:csd_queue_cpu (the choice of CPU and the queueing decision), for wakeups raised by tasks
named COMM. BTF-typed tracepoint programs, written by hand (this guest refuses fentry).
usage: wake-choice.py COMM -- CMD...   (attached while CMD runs; prints one JSON line)"""
import ctypes, json, os, struct, subprocess, sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF, ATTR = 321, 128
KEEP = []


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(bytes(attr), ATTR)
    r = libc.syscall(SYS_BPF, cmd, buf, ATTR)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def btf_typedef_id(name):
    data = open("/sys/kernel/btf/vmlinux", "rb").read()
    _, _, _, hdr_len, type_off, type_len, str_off, _ = struct.unpack_from("<HBBIIIII", data, 0)
    tstart, sstart = hdr_len + type_off, hdr_len + str_off
    pos, tid = tstart, 1
    extra = {1: 4, 3: 12, 14: 4, 17: 4}
    per = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}
    want = name.encode()
    while pos < tstart + type_len:
        name_off, info, _ = struct.unpack_from("<III", data, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        if kind == 8:
            end = data.index(b"\0", sstart + name_off)
            if data[sstart + name_off:end] == want:
                return tid
        pos += 12 + extra.get(kind, 0) + per.get(kind, 0) * vlen
        tid += 1
    raise SystemExit(f"no BTF typedef {name}")


def map_create(entries):
    return bpf(0, struct.pack("<IIIII", 6, 4, 8, entries, 0))  # PERCPU_ARRAY of u64


def ins(op, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", op, (src << 4) | dst, off, imm)


def ld_map(dst, fd):
    return ins(0x18, dst, 1, 0, fd) + ins(0)


def ld_imm64(dst, v):
    return ins(0x18, dst, 0, 0, v & 0xFFFFFFFF) + ins(0, 0, 0, 0, (v >> 32) & 0xFFFFFFFF)


def n_slots(parts):
    return sum(len(p) // 8 for p in parts)


def comm_check(comm8, skip_to_end):
    """r1 = first 8 bytes of current comm; jump `skip_to_end` slots ahead if it differs."""
    return [ins(0xBF, 1, 10), ins(0x07, 1, imm=-16), ins(0xB7, 2, imm=16), ins(0x85, imm=16),
            ins(0x79, 1, 10, -16), ld_imm64(2, comm8), ins(0x5D, 1, 2, off=skip_to_end)]


def count(cnt, k):
    """cnt[k] += 1 (per-CPU slot); clobbers r0-r2."""
    return [ins(0x62, 10, off=-32, imm=k), ld_map(1, cnt), ins(0xBF, 2, 10), ins(0x07, 2, imm=-32),
            ins(0x85, imm=1), ins(0x15, 0, off=3, imm=0), ins(0x79, 1, 0, 0), ins(0x07, 1, imm=1),
            ins(0x7B, 0, 1, 0)]


def with_exit(body):
    return body + [ins(0xB7, 0, imm=0), ins(0x95)]


def prog(parts, btf_id):
    code = b"".join(parts)
    lic = ctypes.create_string_buffer(b"GPL")
    cbuf = ctypes.create_string_buffer(code, len(code))
    log = ctypes.create_string_buffer(65536)
    a = bytearray(ATTR)
    struct.pack_into("<IIQQIIQ", a, 0, 26, len(code) // 8, ctypes.addressof(cbuf),
                     ctypes.addressof(lic), 1, 65536, ctypes.addressof(log))
    struct.pack_into("<I", a, 68, 23)  # BPF_TRACE_RAW_TP
    struct.pack_into("<I", a, 108, btf_id)
    try:
        fd = bpf(5, a)
    except OSError:
        sys.stderr.write(log.value.decode(errors="replace"))
        raise
    KEEP.append(fd)
    return fd


def attach(pfd):
    return bpf(17, struct.pack("<QI", 0, pfd))


def build(comm8, start, hist, cnt):
    # sched_waking by COMM: remember when, count it.
    tail = [ins(0x85, imm=5), ins(0x7B, 10, 0, -24), ins(0x62, 10, off=-28, imm=0),
            ld_map(1, start), ins(0xBF, 2, 10), ins(0x07, 2, imm=-28), ins(0xBF, 3, 10),
            ins(0x07, 3, imm=-24), ins(0xB7, 4, imm=0), ins(0x85, imm=2)] + count(cnt, 0)
    waking = with_exit(comm_check(comm8, n_slots(tail)) + tail)
    # sched_wakeup on this CPU: a wakeup activated here, nothing queued: forget the start.
    wakeup = with_exit([ins(0x62, 10, off=-4, imm=0), ld_map(1, start), ins(0xBF, 2, 10),
                        ins(0x07, 2, imm=-4), ins(0x85, imm=1), ins(0x15, 0, off=1, imm=0),
                        ins(0x7A, 0, off=0, imm=0)])
    # csd_queue_cpu by COMM: the interval since the start, into 10 ns buckets.
    body = [ins(0x85, imm=5), ins(0xBF, 6, 0), ins(0x62, 10, off=-4, imm=0), ld_map(1, start),
            ins(0xBF, 2, 10), ins(0x07, 2, imm=-4), ins(0x85, imm=1)]
    rest = [ins(0x79, 1, 0, 0)]
    after = [ins(0x7A, 0, off=0, imm=0), ins(0x1F, 6, 1), ins(0x37, 6, imm=10),
             ins(0xB5, 6, off=1, imm=1023), ins(0xB7, 6, imm=1023), ins(0x63, 10, 6, -8),
             ld_map(1, hist), ins(0xBF, 2, 10), ins(0x07, 2, imm=-8), ins(0x85, imm=1),
             ins(0x15, 0, off=3, imm=0), ins(0x79, 1, 0, 0), ins(0x07, 1, imm=1),
             ins(0x7B, 0, 1, 0)] + count(cnt, 1)
    rest += [ins(0x15, 1, off=n_slots(after), imm=0)] + after
    body += [ins(0x15, 0, off=n_slots(rest), imm=0)] + rest
    csd = with_exit(comm_check(comm8, n_slots(body)) + body)
    return waking, wakeup, csd


def read(fd, entries):
    ncpu = os.cpu_count()
    out = []
    for k in range(entries):
        key = ctypes.create_string_buffer(struct.pack("<I", k), 4)
        val = ctypes.create_string_buffer(8 * 512)
        bpf(1, struct.pack("<IIQQQ", fd, 0, ctypes.addressof(key), ctypes.addressof(val), 0))
        out.append(sum(struct.unpack_from("<Q", val.raw, 8 * c)[0] for c in range(ncpu)))
    return out


def main():
    comm = sys.argv[1].encode()
    cmd = sys.argv[sys.argv.index("--") + 1:]
    assert len(comm) < 8
    comm8 = int.from_bytes(comm.ljust(8, b"\0"), "little")
    start, hist, cnt = map_create(1), map_create(1024), map_create(2)
    waking, wakeup, csd = build(comm8, start, hist, cnt)
    links = [attach(prog(waking, btf_typedef_id("btf_trace_sched_waking"))),
             attach(prog(wakeup, btf_typedef_id("btf_trace_sched_wakeup"))),
             attach(prog(csd, btf_typedef_id("btf_trace_csd_queue_cpu")))]
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
    for l in links:
        os.close(l)
    counts, (wakings, timed) = read(hist, 1024), read(cnt, 2)
    inr = counts[:1023]
    n = sum(inr)
    res = {"comm": comm.decode(), "cmd": " ".join(cmd), "rc": rc, "wakings": wakings,
           "timed": timed, "at_or_over_10us": counts[1023], "in_range": n}
    if n:
        mean = sum((i * 10 + 5) * c for i, c in enumerate(inr)) / n
        acc, q = 0, {}
        for i, c in enumerate(inr):
            acc += c
            for name, f in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
                if name not in q and acc >= f * n:
                    q[name] = i * 10 + 5
        res.update(mean_ns=round(mean, 1), **q)
    print(json.dumps(res))


main()
