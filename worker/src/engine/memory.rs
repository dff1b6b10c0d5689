//! The engine's memory: QuickJS's arenas kept alive ([`pin_arenas`]), the C
//! heap trimmed once per run ([`release_free_heap`]), and how an exhausted
//! heap is told from a script's own `throw null` ([`heap_near_limit`]).

use std::cell::Cell;

use rquickjs::{Context, Ctx};

/// The block sizes of QuickJS's arenas (`arena_block_sizes` in
/// quickjs.c): an allocation of up to 512 bytes, with its 8-byte header, is
/// served from a 4 KiB arena of the smallest of these that fits it.
const ARENA_BLOCK_SIZES: [usize; 31] = [
    16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176, 192, 208, 224,
    240, 256, 288, 320, 352, 384, 416, 448, 480, 512,
];

/// Keeps an arena of every block size for the runtime's life. QuickJS
/// frees an arena the moment its last block is freed, so a block size
/// that only short-lived values use gets a fresh arena — a `malloc`, a
/// free list written through 4 KiB, and a `free` — over and over: the
/// 56-byte blocks did once per `agent()` call (docs/performance.md, round
/// 12). One block of each size, allocated here and never freed, keeps its
/// arena; the runtime's teardown frees every arena, pinned or not. Sizes
/// the engine's build already holds blocks of cost nothing more.
pub(super) fn pin_arenas(ctx: &Context) {
    ctx.with(|ctx| {
        // SAFETY: the context is live (inside `Context::with`); each block
        // is allocated from its runtime and only ever freed with it.
        unsafe {
            let rt = rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
            for block in ARENA_BLOCK_SIZES {
                let _ = rquickjs::qjs::js_malloc_rt(rt, (block - 8) as _);
            }
        }
    });
}

/// Gives the C heap's free whole pages back to the kernel, once per run,
/// after the body is compiled: building the engine and compiling the
/// script leave freed memory behind, and an idle run should hold only what
/// it uses. (Doing it at the run's first wait instead was measured: it
/// kept ~28 KiB more per idle worker and was no faster.)
///
/// From then on the heap is never trimmed again and allocations up to
/// 32 MiB come from it rather than from their own mappings, so its size
/// is the run's high-water mark: what [`heap_near_limit`] reads to tell an
/// exhausted heap, freed again by the time anyone asks, from a script's
/// own `throw null`. The memory a run frees stays with its worker until
/// the run ends; the run's limit bounds it.
pub(super) fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim and mallopt take no pointers; they only release
    // free memory and set two of the allocator's thresholds.
    unsafe {
        libc::malloc_trim(0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
        // glibc's largest accepted value on 64-bit targets.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

/// The bytes the C heap holds from the kernel (glibc's main arena and its
/// own mappings); `None` where that is not known.
fn c_heap_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
        let info = unsafe { libc::mallinfo2() };
        Some(u64::try_from(info.arena.saturating_add(info.hblkhd)).unwrap_or(u64::MAX))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// True when the engine's heap is within 10% of its limit, or was since
/// `Ready`: how a bare `null` exception (QuickJS could not even allocate
/// the out-of-memory error) is told apart from a script's own `throw
/// null`.
pub(crate) fn heap_near_limit(ctx: &Ctx<'_>, limit: u64) -> bool {
    let mut usage = std::mem::MaybeUninit::<rquickjs::qjs::JSMemoryUsage>::uninit();
    // SAFETY: the context is live (we run inside `Context::with`) and
    // JS_ComputeMemoryUsage fills the whole struct.
    let usage = unsafe {
        let rt = rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
        rquickjs::qjs::JS_ComputeMemoryUsage(rt, usage.as_mut_ptr());
        usage.assume_init()
    };
    let used = u64::try_from(usage.malloc_size).unwrap_or(0);
    // The heap is usually freed again by the time anyone asks (the frames
    // that held it have unwound). The C heap, never trimmed after `Ready`,
    // remembers that it filled; so does the process's peak RSS, for blocks
    // too large for the heap, though its baseline is the peak of the
    // engine's build, which may lie well above what the run started with.
    let baseline = BASELINE.with(Cell::get);
    let heap_grown = c_heap_bytes().map_or(0, |now| now.saturating_sub(baseline.heap));
    let rss_grown = peak_rss_bytes().saturating_sub(baseline.peak_rss);
    used.saturating_mul(10) >= limit.saturating_mul(9)
        || heap_grown.saturating_mul(10) >= limit.saturating_mul(8)
        || rss_grown.saturating_mul(10) >= limit.saturating_mul(8)
}

/// What the process held when the run's script was about to start.
#[derive(Clone, Copy)]
struct Baseline {
    /// The C heap's size ([`c_heap_bytes`]; 0 where unknown).
    heap: u64,
    /// The process's peak RSS.
    peak_rss: u64,
}

impl Baseline {
    fn now() -> Baseline {
        Baseline {
            heap: c_heap_bytes().unwrap_or(0),
            peak_rss: peak_rss_bytes(),
        }
    }
}

/// Takes the [`Baseline`] [`heap_near_limit`] measures growth from: at
/// `Ready`, after the heap was trimmed.
pub(super) fn mark_baseline() {
    BASELINE.with(|b| b.set(Baseline::now()));
}

thread_local! {
    /// Taken at `Ready`, after the heap was trimmed.
    static BASELINE: Cell<Baseline> = const {
        Cell::new(Baseline { heap: 0, peak_rss: 0 })
    };
}

/// The process's peak resident set size in bytes (getrusage).
fn peak_rss_bytes() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    // ru_maxrss is in kilobytes on Linux.
    getrusage(UsageWho::RUSAGE_SELF).map_or(0, |usage| {
        u64::try_from(usage.max_rss())
            .unwrap_or(0)
            .saturating_mul(1024)
    })
}

#[cfg(test)]
mod tests {
    use super::ARENA_BLOCK_SIZES;

    /// `ARENA_BLOCK_SIZES` is copied from the QuickJS the engine is built
    /// with: each pinned request (`block - 8`) must be served by a block of
    /// exactly that size, so that every pin lands in its own size's arena
    /// and none in a neighbour's. A QuickJS upgrade that changes the table
    /// or the header fails here.
    #[test]
    fn each_pin_fills_one_block_of_its_own_size() {
        let rt = rquickjs::Runtime::new().expect("a runtime");
        let raw = {
            let ctx = rquickjs::Context::full(&rt).expect("a context");
            // SAFETY: the context is live inside `with`.
            ctx.with(|ctx| unsafe { rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr()) })
        };
        for block in ARENA_BLOCK_SIZES {
            // SAFETY: `raw` is `rt`'s runtime, alive for this loop; each
            // block is freed right after its size is read.
            let usable = unsafe {
                let p = rquickjs::qjs::js_malloc_rt(raw, (block - 8) as _);
                assert!(!p.is_null(), "{block}");
                let usable = rquickjs::qjs::js_malloc_usable_size_rt(raw, p);
                rquickjs::qjs::js_free_rt(raw, p);
                usable
            };
            assert_eq!(usable as usize, block - 8, "the {block}-byte blocks");
        }
    }
}
