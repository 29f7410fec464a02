//! Takes the broker's code out of its resident set once it has stopped
//! running.
//!
//! The kernel maps a program's code in as it runs, in whole folios of the page
//! cache (up to megabytes at a time on recent kernels), and leaves it mapped.
//! Start-up runs code that does not run again (flags, the ini file, the
//! definitions, TLS and listener set-up), so an idle broker counted 9.6 MiB
//! of its 12 MiB resident as code. Unmapping a read-only segment only drops
//! the process's page table entries: the pages stay in the page cache, and
//! the next call into that code maps them back with a minor fault, no disk
//! read. Code the kernel does not see mapped is also the first it can
//! reclaim under memory pressure.
//!
//! Only the read-only segments of loaded objects are released, never their
//! relocated data, and a range is left alone when any page of it is a private
//! copy (a debugger's breakpoint, an uprobe): unmapping would lose the change.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;

/// Unmaps the read-only segments of the program and its shared libraries;
/// returns how many bytes were released.
pub fn release() -> usize {
    let page = page_size();
    let Ok(pagemap) = File::open("/proc/self/pagemap") else {
        return 0;
    };
    let mut released = 0;
    for range in read_only_segments(page) {
        if has_private_copies(&pagemap, &range, page) != Some(false) {
            continue;
        }
        // SAFETY: the range lies inside a read-only, file-backed segment of a
        // loaded object with no privately modified page: dropping its page
        // table entries loses nothing, and the next access maps the same
        // file pages again.
        let dropped = unsafe { libc::madvise(range.start as *mut libc::c_void, range.len(), libc::MADV_DONTNEED) };
        if dropped == 0 {
            released += range.len();
        }
    }
    released
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

/// Whether any page in `range` is private to this process (present or
/// swapped out, and not a page of a file), from `/proc/self/pagemap`; `None`
/// when the map cannot be read.
fn has_private_copies(pagemap: &File, range: &Range<usize>, page: usize) -> Option<bool> {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE_OR_SHARED: u64 = 1 << 61;
    let pages = range.len() / page;
    let mut entries = vec![0u8; pages * 8];
    let offset = (range.start / page) as u64 * 8;
    pagemap.read_exact_at(&mut entries, offset).ok()?;
    Some(entries.chunks_exact(8).any(|e| {
        let bits = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
        bits & (PRESENT | SWAPPED) != 0 && bits & FILE_OR_SHARED == 0
    }))
}

/// The page-aligned address ranges of every loaded object's read-only
/// segments, without the part the dynamic linker relocated and then made
/// read-only (`PT_GNU_RELRO`), and without the kernel's vDSO.
fn read_only_segments(page: usize) -> Vec<Range<usize>> {
    struct Walk {
        page: usize,
        ranges: Vec<Range<usize>>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr hands each loaded object's description to
        // this callback, with the pointer given to it below as `data`.
        let (info, walk) = unsafe { (&*info, &mut *(data as *mut Walk)) };
        if info.dlpi_phdr.is_null() || is_vdso(info) {
            return 0;
        }
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        let in_memory = |vaddr: usize, len: usize| base + vaddr..base + vaddr + len;
        let relocated: Vec<Range<usize>> = headers
            .iter()
            .filter(|h| h.p_type == libc::PT_GNU_RELRO)
            .map(|h| in_memory(h.p_vaddr as usize, h.p_memsz as usize))
            .collect();
        for h in headers
            .iter()
            .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W == 0)
        {
            let segment = in_memory(h.p_vaddr as usize, h.p_filesz as usize);
            for piece in subtract(segment, &relocated) {
                let aligned = align_inward(piece, walk.page);
                if !aligned.is_empty() {
                    walk.ranges.push(aligned);
                }
            }
        }
        0
    }
    let mut walk = Walk {
        page,
        ranges: Vec::new(),
    };
    // SAFETY: the callback only reads what it is given and writes `walk`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut walk as *mut Walk as *mut libc::c_void) };
    walk.ranges
}

fn is_vdso(info: &libc::dl_phdr_info) -> bool {
    if info.dlpi_name.is_null() {
        return false;
    }
    // SAFETY: a non-null dlpi_name is a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
    name.starts_with(b"linux-vdso") || name.starts_with(b"linux-gate")
}

/// `range` without the parts covered by `holes`.
fn subtract(range: Range<usize>, holes: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut pieces = vec![range];
    for hole in holes {
        pieces = pieces
            .into_iter()
            .flat_map(|p| [p.start..p.end.min(hole.start), p.start.max(hole.end)..p.end])
            .filter(|p| !p.is_empty())
            .collect();
    }
    pieces
}

/// The whole pages inside `range`.
fn align_inward(range: Range<usize>, page: usize) -> Range<usize> {
    let start = range.start.div_ceil(page) * page;
    let end = range.end / page * page;
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident_code_kb() -> u64 {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return 0;
        };
        let exe = exe.to_string_lossy().into_owned();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut in_exe_code = false;
        let mut total = 0;
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if !first.ends_with(':') {
                let perms = words.next().unwrap_or("");
                in_exe_code = perms.starts_with("r-") && line.ends_with(exe.as_str());
            } else if in_exe_code && first == "Rss:" {
                total += words.next().and_then(|kb| kb.parse::<u64>().ok()).unwrap_or(0);
            }
        }
        total
    }

    /// The test binary's code leaves its resident set and still runs.
    #[test]
    fn released_code_leaves_the_resident_set_and_still_runs() {
        let before = resident_code_kb();
        let released = release();
        let after = resident_code_kb();
        assert!(released > 0, "nothing released");
        assert!(after < before, "resident code {before} KiB -> {after} KiB");
        // Code not run before the release maps back in.
        assert_eq!(subtract(0..10, &[]), vec![0..10]);
    }

    /// Heap pages are private copies; released code pages are not.
    #[test]
    fn private_pages_are_told_from_file_pages() {
        let page = page_size();
        let pagemap = File::open("/proc/self/pagemap").expect("pagemap");
        let heap = vec![1u8; 4 * page];
        let start = (heap.as_ptr() as usize).div_ceil(page) * page;
        assert_eq!(
            has_private_copies(&pagemap, &(start..start + 2 * page), page),
            Some(true)
        );
        let code = read_only_segments(page);
        assert!(!code.is_empty());
        assert!(
            code.iter()
                .any(|r| has_private_copies(&pagemap, r, page) == Some(false))
        );
    }

    #[test]
    fn relocated_parts_and_partial_pages_are_left_out() {
        assert_eq!(subtract(0..100, &[20..30, 90..120]), vec![0..20, 30..90]);
        assert_eq!(subtract(0..100, &[0..60, 50..100]), Vec::<Range<usize>>::new());
        assert_eq!(align_inward(10..8200, 4096), 4096..8192);
        assert_eq!(align_inward(10..4000, 4096), 4096..4096);
    }
}
