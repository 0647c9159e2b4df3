//! Memory that knife's own process gives back to the kernel (SPEC.md LIVE-06).
//!
//! glibc raises its mmap threshold dynamically (up to 32 MiB) after the first large free,
//! so large buffers — a replayed 2 MB event decoded for each of 1,000 subscribers — come
//! from malloc's heaps and per-thread arenas, which give back only their top on free.
//! RSS then stayed at ~150 MiB after 1,000 subscribers left (baseline 30 MiB).
//! [`trim`] asks glibc to return every free page of every arena (`malloc_trim(0)`);
//! the server calls it when a burst of replays is over (knife-server `subscribers`).
//!
//! Measured (docs/2026-12-01-bounded-subscribers.md, 2026-12-02): a fixed 64 KiB mmap
//! threshold (`mallopt(M_MMAP_THRESHOLD)`) also returned the memory, but every large
//! block then cost fresh pages: 1,000 replays of a 2 MB message took 11–12 s instead of
//! 6.5 s. Trimming once afterwards keeps the replay as fast and returns the memory.

/// Returns the free memory of every malloc arena to the kernel (glibc `malloc_trim(0)`).
/// Returns whether memory was released; `false` on other C libraries. Takes a few
/// milliseconds for a heap of ~100 MiB (it walks the free lists): call it from a
/// blocking thread, after a burst of large allocations, not per allocation.
pub fn trim() -> bool {
    malloc_trim()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn malloc_trim() -> bool {
    // SAFETY: malloc_trim(0) only releases free pages of malloc's own heaps (with the
    // arena locks held inside glibc); it touches no allocated memory and is safe to call
    // from any thread at any time. It returns 1 when memory was released, 0 otherwise.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident set of this process (KiB), from `/proc/self/statm`.
    fn rss_kib() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * 4
    }

    /// LIVE-06: 1 MiB buffers freed between small blocks that stay (the shape of a
    /// replay: a big decoded event, a small entry kept) stay resident — glibc, having
    /// seen one large free, serves them from its heap and cannot give back the holes —
    /// until [`trim`] returns them.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn live_06_trim_returns_large_blocks_freed_between_small_ones() {
        // One large free first: what makes glibc raise its dynamic threshold.
        drop(std::hint::black_box(vec![1u8; 1 << 20]));
        let before = rss_kib();
        let mut big = Vec::new();
        let mut small = Vec::new();
        for _ in 0..32 {
            big.push(std::hint::black_box(vec![1u8; 1 << 20]));
            small.push(std::hint::black_box(vec![1u8; 64]));
        }
        let peak = rss_kib();
        drop(big);
        assert!(
            peak >= before + 30 * 1024,
            "{before} KiB -> peak {peak} KiB"
        );
        assert!(trim(), "nothing was released");
        let after = rss_kib();
        assert!(
            after < before + 8 * 1024,
            "{before} KiB before, {peak} KiB at the peak, {after} KiB after freeing 32 MiB"
        );
        drop(small);
    }
}
