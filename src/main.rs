//! The `dsh` executable. `dsh __worker …` runs the worker (so one installed
//! binary is enough); everything else is the command line of
//! `dsh_orchestrator::cli`.

/// A failed allocation in worker mode exits with the status the host reads
/// as `MEMORY`; the CLI keeps Rust's default behaviour (see the docs of
/// `dsh_worker::alloc`).
#[global_allocator]
static ALLOC: dsh_worker::alloc::WorkerAlloc = dsh_worker::alloc::WorkerAlloc;

fn main() {
    let mut args = std::env::args();
    let code = if args.nth(1).as_deref() == Some("__worker") {
        dsh_worker::main_with_args(args)
    } else {
        dsh_orchestrator::cli::main()
    };
    std::process::exit(code);
}
