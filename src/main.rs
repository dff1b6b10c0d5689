//! The `dsh` executable. `dsh __worker …` runs the worker (so one installed
//! binary is enough); everything else is the command line of
//! `dsh_orchestrator::cli`.

fn main() {
    let mut args = std::env::args();
    let code = if args.nth(1).as_deref() == Some("__worker") {
        dsh_worker::main_with_args(args)
    } else {
        dsh_orchestrator::cli::main()
    };
    std::process::exit(code);
}
