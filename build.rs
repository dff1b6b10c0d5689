//! Links the `dsh` executable position-dependent (`-no-pie`) on Linux.
//!
//! Why: `dsh` is also the worker (`dsh __worker`), exec'd once per run. A
//! position-independent executable carries ~34,000 relative relocations
//! that the dynamic loader applies at every exec, and every page they touch
//! (~580 KiB of vtables and static tables) becomes private to that process.
//! Linked at a fixed address, those pages stay clean and shared by every
//! worker: a live worker's PSS drops from ~1,550 to ~930 KiB, its exec
//! takes ~1.2 ms less, and a CLI run pays that twice. The trade-off (the
//! executable's own image is not randomized; libraries, heap, stack and
//! mmap still are) is discussed in docs/performance.md and docs/sandbox.md.
//! The worker crate's build script does the same for `dsh-worker`.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-link-arg-bin=dsh=-no-pie");
    }
}
