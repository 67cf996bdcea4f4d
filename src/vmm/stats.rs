//! KVM's binary statistics of one vCPU (`KVM_GET_STATS_FD`, Documentation/virt/kvm/api.rst,
//! "KVM_GET_STATS_FD").
//!
//! The file holds a header, an id string, one descriptor per statistic (name, type, unit, the
//! offset of its values) and the data block. The descriptors never change for the life of the
//! fd, so they are parsed once ([`parse_layout`], pure, tested on bytes built here); each read
//! is one `pread` of the data block ([`StatsFd::read`]).
//!
//! The fd must be opened before the vCPU's first `KVM_RUN`: the ioctl takes the vCPU's mutex,
//! which `KVM_RUN` holds while the vCPU runs or halts. Once open, it can be read from any thread
//! at any time, without stopping the vCPU.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// `_IO(KVMIO, 0xce)`.
const KVM_GET_STATS_FD: libc::c_ulong = 0xaece;
const HEADER_BYTES: usize = 24;
const DESC_FIXED_BYTES: usize = 16;

/// One statistic's place in the data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desc {
    pub name: String,
    /// `KVM_STATS_TYPE_*` (0 cumulative, 1 instant, 2 peak, 3 linear and 4 log histogram).
    pub kind: u32,
    /// Offset of its first value inside the data block, in bytes.
    pub offset: u32,
    /// Number of u64 values (1, or a histogram's buckets).
    pub size: u16,
}

/// Where the descriptors and the data are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub name_size: u32,
    pub num_desc: u32,
    pub desc_offset: u32,
    pub data_offset: u32,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses the header (the first 24 bytes of the file).
pub fn parse_header(b: &[u8]) -> Result<Layout> {
    let get = |i: usize| u32_at(b, i * 4).context("a KVM stats header shorter than 24 bytes");
    Ok(Layout {
        name_size: get(1)?,
        num_desc: get(2)?,
        desc_offset: get(4)?,
        data_offset: get(5)?,
    })
}

/// Parses `num_desc` descriptors of `16 + name_size` bytes each.
pub fn parse_descriptors(b: &[u8], layout: &Layout) -> Result<Vec<Desc>> {
    let each = DESC_FIXED_BYTES + layout.name_size as usize;
    let mut out = Vec::new();
    for i in 0..layout.num_desc as usize {
        let d = b
            .get(i * each..(i + 1) * each)
            .context("KVM stats descriptors cut short")?;
        let flags = u32_at(d, 0).unwrap_or(0);
        let size = u16::from_le_bytes([d[6], d[7]]);
        let offset = u32_at(d, 8).unwrap_or(0);
        let name = &d[DESC_FIXED_BYTES..];
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        out.push(Desc {
            name: String::from_utf8_lossy(&name[..end]).into_owned(),
            kind: flags & 0xf,
            offset,
            size,
        });
    }
    Ok(out)
}

/// The value of each cumulative statistic (`KVM_STATS_TYPE_CUMULATIVE`): counts and times that
/// only grow, whose increase over a window is what happened in it. Instant values (`blocking`),
/// peaks and histograms are left out.
pub fn parse_values(data: &[u8], descs: &[Desc]) -> BTreeMap<String, u64> {
    descs
        .iter()
        .filter(|d| d.kind == 0 && d.size >= 1)
        .filter_map(|d| {
            let at = d.offset as usize;
            let v = u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?);
            Some((d.name.clone(), v))
        })
        .collect()
}

/// An open statistics fd of one vCPU.
pub struct StatsFd {
    file: File,
    descs: Vec<Desc>,
    data_offset: u64,
    data_len: usize,
}

impl StatsFd {
    /// `KVM_GET_STATS_FD` on `vcpu` (before its first `KVM_RUN`), its layout parsed.
    pub fn open(vcpu: &impl AsRawFd) -> Result<Self> {
        // SAFETY: the ioctl takes no argument and returns a new fd or -1.
        let fd = unsafe { libc::ioctl(vcpu.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
        if fd < 0 {
            bail!(
                "KVM_GET_STATS_FD: {}; this KVM gives no binary statistics (KVM_CAP_BINARY_STATS_FD)",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: fd is a new descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        let mut head = [0u8; HEADER_BYTES];
        file.read_exact_at(&mut head, 0)
            .context("KVM stats header")?;
        let layout = parse_header(&head)?;
        let each = DESC_FIXED_BYTES + layout.name_size as usize;
        let mut d = vec![0u8; each * layout.num_desc as usize];
        file.read_exact_at(&mut d, u64::from(layout.desc_offset))
            .context("KVM stats descriptors")?;
        let descs = parse_descriptors(&d, &layout)?;
        let data_len = descs
            .iter()
            .map(|d| d.offset as usize + 8 * d.size as usize)
            .max()
            .unwrap_or(0);
        Ok(Self {
            file,
            descs,
            data_offset: u64::from(layout.data_offset),
            data_len,
        })
    }

    /// Every cumulative statistic now.
    pub fn read(&self) -> Result<BTreeMap<String, u64>> {
        let mut data = vec![0u8; self.data_len];
        self.file
            .read_exact_at(&mut data, self.data_offset)
            .context("KVM stats data")?;
        Ok(parse_values(&data, &self.descs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stats file as the kernel lays it out: header, id, descriptors, data.
    fn file(stats: &[(&str, u32, u64)]) -> Vec<u8> {
        let name_size = 48u32;
        let n = stats.len() as u32;
        let desc_offset = HEADER_BYTES as u32 + name_size;
        let each = DESC_FIXED_BYTES as u32 + name_size;
        let data_offset = desc_offset + n * each;
        let mut b = Vec::new();
        for v in [
            0,
            name_size,
            n,
            HEADER_BYTES as u32,
            desc_offset,
            data_offset,
        ] {
            b.extend(v.to_le_bytes());
        }
        b.extend(vec![0u8; name_size as usize]);
        for (i, (name, kind, _)) in stats.iter().enumerate() {
            b.extend((kind | 0x100).to_le_bytes()); // flags: type, base pow10
            b.extend((-9i16).to_le_bytes()); // exponent
            b.extend(1u16.to_le_bytes()); // size
            b.extend((i as u32 * 8).to_le_bytes()); // offset
            b.extend(0u32.to_le_bytes()); // bucket size
            let mut nm = name.as_bytes().to_vec();
            nm.resize(name_size as usize, 0);
            b.extend(nm);
        }
        for (_, _, v) in stats {
            b.extend(v.to_le_bytes());
        }
        b
    }

    #[test]
    fn a_stats_file_reads_back_name_by_name() {
        let f = file(&[
            ("halt_exits", 0, 7),
            ("halt_poll_success_ns", 0, 123),
            ("h", 4, 9),
            ("blocking", 1, 1),
        ]);
        let layout = parse_header(&f).unwrap();
        assert_eq!(layout.num_desc, 4);
        let descs = parse_descriptors(&f[layout.desc_offset as usize..], &layout).unwrap();
        assert_eq!(descs[1].name, "halt_poll_success_ns");
        assert_eq!(descs[2].kind, 4);
        let v = parse_values(&f[layout.data_offset as usize..], &descs);
        assert_eq!(v.get("halt_exits"), Some(&7));
        assert_eq!(v.get("halt_poll_success_ns"), Some(&123));
        // Neither a histogram nor an instant value is read as a count.
        assert_eq!(v.get("h"), None);
        assert_eq!(v.get("blocking"), None);
    }

    #[test]
    fn a_cut_file_is_an_error_not_a_panic() {
        assert!(parse_header(&[0u8; 10]).is_err());
        let f = file(&[("exits", 0, 1)]);
        let layout = parse_header(&f).unwrap();
        let cut = &f[layout.desc_offset as usize..layout.desc_offset as usize + 10];
        assert!(parse_descriptors(cut, &layout).is_err());
        // Data shorter than an offset leaves that value out.
        let descs = parse_descriptors(&f[layout.desc_offset as usize..], &layout).unwrap();
        assert!(parse_values(&[0u8; 4], &descs).is_empty());
    }
}
