//! The allocator of a worker process: the system allocator, except that a
//! failed allocation ends the process with [`crate::EXIT_OUT_OF_MEMORY`]
//! instead of Rust's default abort. Under the sandbox's data limit a failed
//! allocation means the run hit its memory backstop, and the host must be
//! able to tell that from a crash (it reports `MEMORY`, not a mystery
//! `SIGABRT`).
//!
//! Binaries that can be a worker install it:
//! `#[global_allocator] static A: dsh_worker::alloc::WorkerAlloc = dsh_worker::alloc::WorkerAlloc;`
//! It changes nothing until [`exit_on_failure`] is called, which only the
//! worker's entry point does, so a host process keeps Rust's behaviour.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

static ARMED: AtomicBool = AtomicBool::new(false);

/// From now on, a failed allocation exits the process with
/// `EXIT_OUT_OF_MEMORY`.
pub fn exit_on_failure() {
    ARMED.store(true, Ordering::Relaxed);
}

pub struct WorkerAlloc;

#[cold]
fn failed(ptr: *mut u8) -> *mut u8 {
    if ARMED.load(Ordering::Relaxed) {
        const MSG: &[u8] = b"dsh-worker: out of memory (the sandbox's data limit)\n";
        // One write(2) on descriptor 2: no lock, no allocation (`stderr()`
        // is a handle to a static). A failed write changes nothing.
        let _ = nix::unistd::write(std::io::stderr(), MSG);
        // SAFETY: _exit(2) takes no pointers and ends the process at once,
        // allocating nothing and running no exit handlers (which might
        // allocate). There is no safe wrapper: std::process::exit runs them.
        unsafe { libc::_exit(crate::EXIT_OUT_OF_MEMORY) }
    }
    ptr
}

// SAFETY: every method forwards to `System` with the same arguments; the
// only addition is what happens after `System` returned null.
unsafe impl GlobalAlloc for WorkerAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() { failed(p) } else { p }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() { failed(p) } else { p }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() { failed(p) } else { p }
    }
}
