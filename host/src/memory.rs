//! What the `herald` binary itself does under a memory budget (docs/behaviour.md#memory-budget;
//! the sizes are `herald_host::config::MemorySizes`). Measured on an idle server with an empty database
//! (docs/performance.md#memory-budget-issue-79): of its ~125 MB resident, ~75 MB were the executable's own
//! pages mapped from the file (the kernel reads the binary ahead in large folios and maps them whole,
//! most never run again), and ~35 MB of the ~55 MB anonymous were transparent huge pages that mimalloc
//! asks for on its arenas (`MADV_HUGEPAGE`), each 2 MiB touched by a few small allocations.

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`; the kernel checks it at
/// each fault, so mimalloc's arena reserved before `main` follows it too).
pub fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integers only and changes no memory of ours.
    #[allow(unsafe_code)]
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Has mimalloc give freed memory back to the kernel at once (`mi_option_purge_delay` 0) instead of
/// after its default delay of a second (ten for whole arenas): under load, memory that one request or
/// a database flush frees is otherwise still resident when the next allocates elsewhere. In the
/// quarter-rate soak with a budget of 128 it lowered the steady anonymous memory from ~86 to ~68 MB and
/// the peaks by 15-25 MB (docs/performance.md#memory-budget-issue-79-2026-12-07). Without mimalloc (the
/// `system-allocator` feature) it does nothing.
pub fn purge_freed_memory_at_once() {
    #[cfg(not(feature = "system-allocator"))]
    {
        // mimalloc's C API (`libmimalloc-sys` links it whole; its Rust declaration is behind a feature
        // this crate does not need): `mi_option_purge_delay` is 15 in mimalloc 2 and 3.
        #[allow(unsafe_code)]
        unsafe extern "C" {
            fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
        }
        const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
        // SAFETY: mi_option_set stores an integer option; mimalloc reads the purge delay each time it
        // schedules a purge, so changing it while allocating is allowed.
        #[allow(unsafe_code)]
        unsafe {
            mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        }
    }
}

/// Pages this executable's read-only, never-written pages out of the process (`MADV_PAGEOUT` on its
/// private file mappings with no anonymous page; `MADV_DONTNEED` where the kernel has no `MADV_PAGEOUT`)
/// and stops the kernel reading them ahead (`MADV_RANDOM`), so what stays resident is the code that runs.
/// Paging out, not only unmapping, matters under load: an unmapped page stays in the page cache inside
/// the large folio the kernel first read it in, and the next fault maps that whole folio again (the
/// soak held 72-75 MB of code so, 22-59 MB with `MADV_PAGEOUT`; docs/performance.md#memory-budget-issue-79-2026-12-07);
/// paged out, the code that runs again is read back one page at a time. Called 10 s after the server
/// listens and every 30 s. Returns the bytes of the ranges.
pub fn trim_code() -> usize {
    #[cfg(target_os = "linux")]
    {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else { return 0 };
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else { return 0 };
        let exe = exe.to_string_lossy().into_owned();
        let mut trimmed = 0;
        let mut current: Option<(usize, usize, bool)> = None;
        let mut finish = |m: Option<(usize, usize, bool)>| {
            if let Some((start, end, true)) = m {
                // SAFETY: the range is one whole read-only private mapping of the executable with no
                // anonymous (copied-on-write) page, so its pages equal the file's and dropping them
                // changes no value the program can read: the next access maps the file's page again.
                #[allow(unsafe_code)]
                let done = unsafe {
                    let addr = start as *mut libc::c_void;
                    libc::madvise(addr, end - start, libc::MADV_RANDOM);
                    match libc::madvise(addr, end - start, libc::MADV_PAGEOUT) {
                        0 => 0,
                        _ => libc::madvise(addr, end - start, libc::MADV_DONTNEED),
                    }
                };
                if done == 0 {
                    trimmed += end - start;
                }
            }
        };
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-')
                && let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                finish(current.take());
                let perms = words.next().unwrap_or("");
                let path = words.nth(3).unwrap_or("");
                let read_only = perms.starts_with('r') && perms.as_bytes().get(1) == Some(&b'-');
                current = (path == exe && read_only && perms.ends_with('p')).then_some((start, end, false));
            } else if first == "Anonymous:" {
                // The mapping qualifies only once its anonymous count is read and is zero.
                let none = words.next() == Some("0");
                current = current.map(|(s, e, _)| (s, e, none));
            }
        }
        finish(current.take());
        trimmed
    }
    #[cfg(not(target_os = "linux"))]
    0
}

#[cfg(all(test, not(feature = "system-allocator")))]
mod tests {
    #[test]
    fn budget_has_mimalloc_purge_at_once() {
        #[allow(unsafe_code)]
        unsafe extern "C" {
            fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
        }
        // SAFETY: mi_option_get reads an integer option.
        #[allow(unsafe_code)]
        let delay = || unsafe { mi_option_get(15) };
        assert!(delay() > 0, "option 15 is not mimalloc's purge delay (its default is 1000 ms in mimalloc 3, 10 in 2)");
        super::purge_freed_memory_at_once();
        assert_eq!(delay(), 0);
    }
}
