//! Measures what installing the worker's seccomp filter costs the kernel:
//! forked children that exit at once, against forked children that
//! install the filter first (the difference of the medians, five rounds).
//! `cargo run --release -p dsh-worker --example seccomp_cost`

use std::time::Instant;

#[cfg(target_os = "linux")]
fn fork_and_wait(prog: Option<&seccompiler::BpfProgram>) -> Result<f64, String> {
    let t = Instant::now();
    // SAFETY: the child only makes system calls (prctl, seccomp, _exit)
    // and touches no lock another thread could hold: this example has one
    // thread.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = match prog {
            None => 0,
            // `apply_filter` sets no_new_privs itself.
            Some(p) => i32::from(seccompiler::apply_filter(p).is_err()),
        };
        // SAFETY: ends the child without running the parent's atexit
        // handlers or destructors.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || status != 0 {
        return Err(format!("child {pid}: status {status}"));
    }
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

#[cfg(target_os = "linux")]
fn median_us(prog: Option<&seccompiler::BpfProgram>, n: usize) -> Result<f64, String> {
    let mut v = (0..n)
        .map(|_| fork_and_wait(prog))
        .collect::<Result<Vec<_>, _>>()?;
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

#[cfg(target_os = "linux")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prog = dsh_worker::sandbox::seccomp::program(std::process::id())?;
    println!("the filter: {} instructions", prog.len());
    for round in 0..5 {
        let bare = median_us(None, 300)?;
        let with = median_us(Some(&prog), 300)?;
        println!(
            "round {round}: fork + exit {bare:.1} µs, with the filter {with:.1} µs: the filter {:.1} µs",
            with - bare
        );
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("seccomp is Linux only");
}
