//! What the raw-tracepoint programs need from the kernel's BTF (`/sys/kernel/btf/vmlinux`):
//! where `pid`, `tgid` and the task's CPU sit in `struct task_struct`, and how many arguments
//! each scheduler tracepoint passes (its `btf_trace_<name>` typedef), so a program never reads
//! an argument the kernel does not pass or a field at an assumed offset.
//!
//! Parsing is done by the `btf-rs` crate; what is here is the look-up, pure over a parsed
//! [`btf_rs::Btf`], so it is tested on a small BTF blob built in the test.

use btf_rs::{Btf, BtfType, Type};

/// Byte offsets in `struct task_struct`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub pid: u32,
    pub tgid: u32,
    /// `task_struct.cpu` (kernels with `CONFIG_THREAD_INFO_IN_TASK`, 5.16 on), else
    /// `task_struct.thread_info.cpu`: what `task_cpu(p)` reads, the `target_cpu` of
    /// `sched_wakeup`.
    pub cpu: u32,
    /// `task_struct.comm` (16 bytes), where the BTF has it: lets a program match a process
    /// named by `--comm` when it is exec'd.
    pub comm: Option<u32>,
    /// `task_struct.on_rq` (an int, non-zero while the task is on a run queue: running, or
    /// preempted and waiting), where the BTF has it: lets the waking program leave a wakeup of
    /// a task that has nothing to wait for untimed, as watch's analysis does.
    pub on_rq: Option<u32>,
}

/// The byte offset of member `name` in struct `ty`, looking through anonymous struct and
/// union members (where `task_struct` keeps some fields); bitfields are refused.
fn member_offset(btf: &Btf, ty: &Type, name: &str) -> Option<u32> {
    let s = match ty {
        Type::Struct(s) | Type::Union(s) => s,
        _ => return None,
    };
    for m in &s.members {
        let mname = btf.resolve_name(m).unwrap_or_default();
        if mname == name {
            if m.bitfield_size().is_some_and(|b| b != 0) || m.bit_offset() % 8 != 0 {
                return None;
            }
            return Some(m.bit_offset() / 8);
        }
        if mname.is_empty()
            && let Ok(inner) = btf.resolve_chained_type(m)
            && let Some(o) = member_offset(btf, &inner, name)
        {
            return Some(m.bit_offset() / 8 + o);
        }
    }
    None
}

fn named_struct(btf: &Btf, name: &str) -> Option<Type> {
    btf.resolve_types_by_name(name)
        .ok()?
        .into_iter()
        .find(|t| matches!(t, Type::Struct(_)))
}

/// The offsets of `pid`, `tgid` and the CPU in `task_struct`.
pub fn task_offsets(btf: &Btf) -> Result<TaskOffsets, String> {
    let task = named_struct(btf, "task_struct").ok_or("no struct task_struct in the BTF")?;
    let field = |n: &str| {
        member_offset(btf, &task, n).ok_or_else(|| format!("no task_struct.{n} in the BTF"))
    };
    let cpu = match member_offset(btf, &task, "cpu") {
        Some(o) => o,
        None => {
            let ti = field("thread_info")?;
            let info =
                named_struct(btf, "thread_info").ok_or("no struct thread_info in the BTF")?;
            ti + member_offset(btf, &info, "cpu")
                .ok_or("neither task_struct.cpu nor thread_info.cpu in the BTF")?
        }
    };
    Ok(TaskOffsets {
        pid: field("pid")?,
        tgid: field("tgid")?,
        cpu,
        comm: member_offset(btf, &task, "comm"),
        on_rq: member_offset(btf, &task, "on_rq"),
    })
}

/// The tracepoint's `btf_trace_<name>` typedef (a pointer to a function whose first parameter
/// is the `void *` data the kernel keeps to itself): its BTF id and the function's prototype.
fn tracepoint_proto(btf: &Btf, name: &str) -> Result<(u32, btf_rs::FuncProto), String> {
    let typedef = format!("btf_trace_{name}");
    let (id, t) = btf
        .resolve_ids_by_name(&typedef)
        .ok()
        .and_then(|ids| {
            ids.into_iter()
                .find_map(|id| match btf.resolve_type_by_id(id) {
                    Ok(Type::Typedef(t)) => Some((id, t)),
                    _ => None,
                })
        })
        .ok_or_else(|| format!("no {typedef} in the BTF"))?;
    let not_fn = || format!("{typedef} is not a pointer to a function");
    let Ok(Type::Ptr(p)) = btf.resolve_chained_type(&t) else {
        return Err(not_fn());
    };
    match btf.resolve_chained_type(&p) {
        Ok(Type::FuncProto(f)) => Ok((id, f)),
        _ => Err(not_fn()),
    }
}

/// The number of arguments the tracepoint passes a raw-tracepoint program: the parameters of
/// its `btf_trace_<name>` function, less the data pointer.
pub fn tracepoint_args(btf: &Btf, name: &str) -> Result<usize, String> {
    Ok(tracepoint_proto(btf, name)?
        .1
        .parameters
        .len()
        .saturating_sub(1))
}

/// The BTF id of the tracepoint's `btf_trace_<name>` typedef: what a BTF-typed raw tracepoint
/// program (`tp_btf`) names as the tracepoint it attaches to, and what types its arguments.
pub fn tracepoint_typedef_id(btf: &Btf, name: &str) -> Option<u32> {
    tracepoint_proto(btf, name).ok().map(|(id, _)| id)
}

/// Whether parameter `i` of the tracepoint (0 = its first real argument) is a pointer: used to
/// check that the task arguments are where the programs read them.
pub fn tracepoint_arg_is_pointer(btf: &Btf, name: &str, i: usize) -> bool {
    let Ok((_, f)) = tracepoint_proto(btf, name) else {
        return false;
    };
    f.parameters
        .get(i + 1)
        .and_then(|param| param.get_type_id())
        .and_then(|id| btf.resolve_type_by_id(id).ok())
        .is_some_and(|t| matches!(t, Type::Ptr(_)))
}

/// The width in bytes of parameter `i` of the tracepoint (0 = its first real argument) where
/// it is an integer, typedefs, `const` and `volatile` looked through (a `bool` is an integer of
/// one byte); `None` for anything else. A raw-tracepoint program gets every argument widened to
/// a u64 slot, so this is what says the slot holds the value the program means to read.
pub fn tracepoint_arg_int_size(btf: &Btf, name: &str, i: usize) -> Option<usize> {
    let (_, f) = tracepoint_proto(btf, name).ok()?;
    let mut t = btf
        .resolve_type_by_id(f.parameters.get(i + 1)?.get_type_id()?)
        .ok()?;
    // A chain of qualifiers and typedefs is short; a cycle (a corrupt BTF) ends here.
    for _ in 0..16 {
        t = match t {
            Type::Int(int) => return Some(int.size()),
            Type::Typedef(x) => btf.resolve_chained_type(&x).ok()?,
            Type::Const(x) => btf.resolve_chained_type(&x).ok()?,
            Type::Volatile(x) => btf.resolve_chained_type(&x).ok()?,
            _ => return None,
        };
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A BTF blob builder: just the kinds the look-up reads (int, ptr, struct, typedef,
    /// func_proto), as `include/uapi/linux/btf.h` lays them out.
    pub struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
        next_id: u32,
    }

    impl Blob {
        pub fn new() -> Self {
            Self {
                types: Vec::new(),
                strings: vec![0],
                next_id: 1,
            }
        }
        fn name(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let at = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            at
        }
        fn head(&mut self, name: &str, kind: u32, vlen: u32, size_or_type: u32) -> u32 {
            let n = self.name(name);
            for v in [n, (kind << 24) | vlen, size_or_type] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            self.next_id += 1;
            self.next_id - 1
        }
        pub fn int(&mut self, name: &str, size: u32) -> u32 {
            let id = self.head(name, 1, 0, size);
            self.types
                .extend_from_slice(&((size * 8) & 0xff).to_le_bytes());
            id
        }
        pub fn ptr(&mut self, to: u32) -> u32 {
            self.head("", 2, 0, to)
        }
        /// Members as (name, type id, byte offset).
        pub fn strukt(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
            let id = self.head(name, 4, members.len() as u32, size);
            for (mname, ty, off) in members {
                let n = self.name(mname);
                for v in [n, *ty, off * 8] {
                    self.types.extend_from_slice(&v.to_le_bytes());
                }
            }
            id
        }
        pub fn typedef(&mut self, name: &str, to: u32) -> u32 {
            self.head(name, 8, 0, to)
        }
        pub fn func_proto(&mut self, params: &[u32]) -> u32 {
            let id = self.head("", 13, params.len() as u32, 0);
            for p in params {
                self.types.extend_from_slice(&0u32.to_le_bytes());
                self.types.extend_from_slice(&p.to_le_bytes());
            }
            id
        }
        pub fn bytes(&self) -> Vec<u8> {
            let mut b = Vec::new();
            b.extend_from_slice(&0xeb9fu16.to_le_bytes());
            b.push(1); // version
            b.push(0); // flags
            for v in [
                24u32,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&self.types);
            b.extend_from_slice(&self.strings);
            b
        }
    }

    /// A kernel-like BTF: `task_struct` with `cpu` inside an anonymous struct, and the
    /// `sched_switch` typedef.
    pub fn kernel_like(with_task_cpu: bool) -> Vec<u8> {
        let mut b = Blob::new();
        let int = b.int("int", 4);
        let uint = b.int("unsigned int", 4);
        let boolean = b.int("bool", 1);
        let info = b.strukt("thread_info", 24, &[("flags", uint, 0), ("cpu", uint, 20)]);
        let anon = b.strukt("", 8, &[("on_cpu", int, 0), ("cpu", uint, 4)]);
        let mut members = vec![
            ("thread_info", info, 0),
            ("pid", int, 2464),
            ("tgid", int, 2468),
            ("on_rq", int, 120),
        ];
        if with_task_cpu {
            members.push(("", anon, 64));
        }
        let task = b.strukt("task_struct", 4096, &members);
        let task_ptr = b.ptr(task);
        let void_ptr = b.ptr(0);
        let proto = b.func_proto(&[void_ptr, boolean, task_ptr, task_ptr, uint]);
        let proto_ptr = b.ptr(proto);
        b.typedef("btf_trace_sched_switch", proto_ptr);
        b.bytes()
    }

    #[test]
    fn task_offsets_come_from_the_btf_through_anonymous_members() {
        let btf = Btf::from_bytes(&kernel_like(true)).unwrap();
        assert_eq!(
            task_offsets(&btf).unwrap(),
            TaskOffsets {
                pid: 2464,
                tgid: 2468,
                cpu: 68,
                comm: None,
                on_rq: Some(120),
            }
        );
    }

    #[test]
    fn an_older_kernel_keeps_the_cpu_in_thread_info() {
        let btf = Btf::from_bytes(&kernel_like(false)).unwrap();
        assert_eq!(task_offsets(&btf).unwrap().cpu, 20);
    }

    #[test]
    fn the_tracepoint_arguments_are_counted_without_the_data_pointer() {
        let btf = Btf::from_bytes(&kernel_like(true)).unwrap();
        assert_eq!(tracepoint_args(&btf, "sched_switch"), Ok(4));
        assert!(!tracepoint_arg_is_pointer(&btf, "sched_switch", 0));
        assert!(tracepoint_arg_is_pointer(&btf, "sched_switch", 1));
        assert!(tracepoint_arg_is_pointer(&btf, "sched_switch", 2));
        assert!(!tracepoint_arg_is_pointer(&btf, "sched_switch", 3));
        assert!(tracepoint_args(&btf, "sched_waking").is_err());
    }

    #[test]
    fn an_argument_is_an_integer_of_its_width_through_its_typedefs() {
        let mut b = Blob::new();
        let u64t = b.int("long long unsigned int", 8);
        let u64_typedef = b.typedef("__u64", u64t);
        let boolean = b.int("_Bool", 1);
        let bool_typedef = b.typedef("bool", boolean);
        let void_ptr = b.ptr(0);
        let proto = b.func_proto(&[void_ptr, u64_typedef, bool_typedef, void_ptr]);
        let proto_ptr = b.ptr(proto);
        b.typedef("btf_trace_kvm_vcpu_wakeup", proto_ptr);
        let btf = Btf::from_bytes(&b.bytes()).unwrap();
        let size = |i| tracepoint_arg_int_size(&btf, "kvm_vcpu_wakeup", i);
        assert_eq!((size(0), size(1)), (Some(8), Some(1)));
        // A pointer is no integer, and there is no fourth argument.
        assert_eq!((size(2), size(3)), (None, None));
        assert_eq!(tracepoint_arg_int_size(&btf, "kvm_apic_ipi", 0), None);
    }

    #[test]
    fn the_typed_programs_name_the_tracepoint_by_its_typedef() {
        let btf = Btf::from_bytes(&kernel_like(true)).unwrap();
        let id = tracepoint_typedef_id(&btf, "sched_switch").unwrap();
        let Ok(Type::Typedef(t)) = btf.resolve_type_by_id(id) else {
            panic!("id {id} is not a typedef");
        };
        assert_eq!(btf.resolve_name(&t).unwrap(), "btf_trace_sched_switch");
        assert_eq!(tracepoint_typedef_id(&btf, "sched_waking"), None);
    }

    #[test]
    fn this_kernels_btf_agrees_with_the_programs_where_there_is_one() {
        let Ok(btf) = Btf::from_file("/sys/kernel/btf/vmlinux") else {
            crate::testing::skipped(
                "this_kernels_btf_agrees_with_the_programs_where_there_is_one",
                "no readable /sys/kernel/btf/vmlinux (a kernel without CONFIG_DEBUG_INFO_BTF)",
            );
            return;
        };
        let o = task_offsets(&btf).unwrap();
        assert_eq!(o.tgid, o.pid + 4, "pid and tgid are adjacent pid_t fields");
        assert!(
            o.on_rq.is_some(),
            "task_struct.on_rq, read by the waking program"
        );
        assert_eq!(tracepoint_args(&btf, "sched_switch"), Ok(4));
        assert_eq!(tracepoint_args(&btf, "sched_waking"), Ok(1));
        assert_eq!(tracepoint_args(&btf, "sched_wakeup"), Ok(1));
        assert_eq!(tracepoint_args(&btf, "sched_migrate_task"), Ok(2));
        // The scheduler tracepoints watch's typed programs attach to.
        for name in [
            "sched_waking",
            "sched_switch",
            "sched_migrate_task",
            "sched_wakeup",
        ] {
            assert!(tracepoint_typedef_id(&btf, name).is_some(), "{name}");
        }
    }
}
