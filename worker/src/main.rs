//! The `dsh-worker` executable; see the crate docs of `dsh_worker`.

#[global_allocator]
static ALLOC: dsh_worker::alloc::WorkerAlloc = dsh_worker::alloc::WorkerAlloc;

fn main() {
    std::process::exit(dsh_worker::main_with_args(std::env::args().skip(1)));
}
