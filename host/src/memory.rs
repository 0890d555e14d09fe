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

/// Unmaps this executable's read-only, never-written pages from the process (`MADV_DONTNEED` on its
/// private file mappings with no anonymous page; the page cache keeps them, so the code that runs again
/// comes back with a minor fault) and stops the kernel reading them ahead (`MADV_RANDOM`), so what stays
/// resident is the code that runs. Called 10 s after the server listens and every 30 s. Returns the
/// bytes of the ranges.
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
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_RANDOM);
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
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
