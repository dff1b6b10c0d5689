//! `dsh-sandbox-probe`: a test tool, not part of a run. It applies exactly
//! the worker's sandbox function (`dsh_worker::sandbox::apply`), prints the
//! report, then tries what a script that escaped the engine would try and
//! prints one JSON line per attempt: `{"probe": …, "denied": bool,
//! "detail": …}`. worker/tests/sandbox.rs drives it.
//!
//! Usage: dsh-sandbox-probe [--policy strict|best-effort|off]
//!   [--only landlock] [--landlock-abi N] [--memory BYTES]
//!   [--tmp DIR] [--tcp-port P] [--abstract NAME] [--kill-pid PID]
//!   [--allocate BYTES] [--compute-ms N --spin]

#[global_allocator]
static ALLOC: dsh_worker::alloc::WorkerAlloc = dsh_worker::alloc::WorkerAlloc;

#[cfg(target_os = "linux")]
fn main() {
    std::process::exit(linux::main());
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("dsh-sandbox-probe: Linux only");
    std::process::exit(2);
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::linux::net::SocketAddrExt;

    use nix::sys::signal::kill;
    use nix::sys::wait::waitpid;
    use nix::unistd::{ForkResult, Pid, execve, fork};

    use dsh_protocol::SandboxPolicy;
    use dsh_worker::sandbox::{self, Inputs};
    use serde_json::json;

    #[derive(Default)]
    struct Opts {
        policy: Option<SandboxPolicy>,
        only_landlock: bool,
        inputs: Inputs,
        tmp: Option<String>,
        tcp_port: Option<u16>,
        abstract_name: Option<String>,
        kill_pid: Option<i32>,
        allocate: Option<usize>,
        spin: bool,
    }

    /// What is wrong with the command line (exit 2).
    #[derive(Debug, thiserror::Error)]
    enum UsageError {
        #[error("{0} needs a value")]
        NeedsValue(String),
        #[error("--policy: {0}")]
        Policy(#[from] dsh_protocol::UnknownSandboxPolicy),
        #[error("--only: unknown layer {0:?}")]
        UnknownLayer(String),
        #[error("{flag}: not a number: {value:?}")]
        NotANumber { flag: String, value: String },
        #[error("unknown argument {0:?}")]
        UnknownArgument(String),
    }

    fn parse() -> Result<Opts, UsageError> {
        let mut o = Opts {
            inputs: Inputs {
                memory_bytes: 256 << 20,
                ..Inputs::default()
            },
            ..Opts::default()
        };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            let mut val = || it.next().ok_or_else(|| UsageError::NeedsValue(a.clone()));
            match a.as_str() {
                "--policy" => o.policy = Some(val()?.parse()?),
                "--only" => match val()?.as_str() {
                    "landlock" => o.only_landlock = true,
                    other => return Err(UsageError::UnknownLayer(other.into())),
                },
                "--landlock-abi" => {
                    o.inputs.landlock_abi_override = Some(num(&a, &val()?)?);
                }
                "--memory" => o.inputs.memory_bytes = num(&a, &val()?)?,
                "--tmp" => o.tmp = Some(val()?),
                "--tcp-port" => o.tcp_port = Some(num(&a, &val()?)?),
                "--abstract" => o.abstract_name = Some(val()?),
                "--kill-pid" => o.kill_pid = Some(num(&a, &val()?)?),
                "--allocate" => o.allocate = Some(num(&a, &val()?)?),
                "--compute-ms" => o.inputs.compute_ms = Some(num(&a, &val()?)?),
                "--spin" => o.spin = true,
                other => return Err(UsageError::UnknownArgument(other.into())),
            }
        }
        Ok(o)
    }

    fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, UsageError> {
        v.parse().map_err(|_| UsageError::NotANumber {
            flag: flag.into(),
            value: v.into(),
        })
    }

    fn say(probe: &str, outcome: Result<String, std::io::Error>) {
        let line = match outcome {
            Ok(detail) => json!({"probe": probe, "denied": false, "detail": detail}),
            Err(e) => json!({"probe": probe, "denied": true, "detail": e.to_string()}),
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn last_err() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    /// A raw call's result: `Ok(detail)` when it returned `ok` (not -1).
    fn raw(
        rc: libc::c_long,
        detail: impl FnOnce(libc::c_long) -> String,
    ) -> Result<String, std::io::Error> {
        if rc == -1 {
            Err(last_err())
        } else {
            Ok(detail(rc))
        }
    }

    /// What a script that escaped the engine could do without files,
    /// processes or sockets: keys, SysV IPC, shared and executable
    /// memory, namespaces, the parent-death signal, a pidfd on the host.
    /// Each attempt undoes itself when it succeeds (the sandbox-off test
    /// runs them for real), so nothing outlives the probe.
    fn item_nine() {
        keys();
        sysv_ipc();
        memory();
        escapes();
    }

    // Every `unsafe` in the four functions below is a raw system call with
    // integer arguments or pointers to live constants (NUL-terminated where
    // a string); each resource a successful call creates is released right
    // after.

    /// The user keyring and a new key.
    fn keys() {
        say("read the user keyring", {
            // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, create = 0)
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::syscall(libc::SYS_keyctl, 0, -4, 0) };
            raw(rc, |id| format!("keyring id {id}"))
        });
        say("add a key", {
            let (kind, desc, data) = (c"user", c"dsh-probe", b"x");
            // add_key(…, KEY_SPEC_PROCESS_KEYRING): the process keyring
            // ends with the process, so a success leaves nothing behind.
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_add_key,
                    kind.as_ptr(),
                    desc.as_ptr(),
                    data.as_ptr(),
                    data.len(),
                    -2,
                )
            };
            raw(rc, |id| format!("added key {id}"))
        });
    }

    /// SysV shared memory, message queues and semaphores.
    fn sysv_ipc() {
        say("SysV shared memory", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) };
            raw(rc.into(), |id| {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe { libc::shmctl(id as i32, libc::IPC_RMID, std::ptr::null_mut()) };
                format!("segment {id}")
            })
        });
        say("SysV message queue", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600) };
            raw(rc.into(), |id| {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe { libc::msgctl(id as i32, libc::IPC_RMID, std::ptr::null_mut()) };
                format!("queue {id}")
            })
        });
        say("SysV semaphore", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
            raw(rc.into(), |id| {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe { libc::semctl(id as i32, 0, libc::IPC_RMID) };
                format!("semaphore set {id}")
            })
        });
    }

    /// Shared, executable and file-less memory.
    fn memory() {
        say("map 256 MiB of shared memory", {
            let len = 256usize << 20;
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                Err(last_err())
            } else {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe {
                    p.cast::<u8>().write_volatile(1);
                    libc::munmap(p, len);
                }
                Ok("mapped and written".into())
            }
        });
        say("map executable memory", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                Err(last_err())
            } else {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe { libc::munmap(p, 4096) };
                Ok("mapped".into())
            }
        });
        say("memfd_create()", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::memfd_create(c"dsh-probe".as_ptr(), 0) };
            raw(rc.into(), |fd| {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe { libc::close(fd as i32) };
                "created".into()
            })
        });
    }

    /// Ways out of the worker's place under the host: the parent-death
    /// signal, a pidfd on the host, new namespaces.
    fn escapes() {
        say("clear the parent-death signal", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0) };
            raw(rc.into(), |_| "cleared".into())
        });
        say("pidfd_open() the host", {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getppid(), 0) };
            raw(rc, |fd| {
                // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
                unsafe { libc::close(fd as i32) };
                "opened".into()
            })
        });
        for (name, flag) in [
            ("unshare a user namespace", libc::CLONE_NEWUSER),
            ("unshare a network namespace", libc::CLONE_NEWNET),
            ("unshare a mount namespace", libc::CLONE_NEWNS),
        ] {
            // SAFETY: a raw call with integer arguments or pointers to live constants; see above.
            let rc = unsafe { libc::unshare(flag) };
            say(name, raw(rc.into(), |_| "unshared".into()));
        }
    }

    pub fn main() -> i32 {
        let o = match parse() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("dsh-sandbox-probe: {e}");
                return 2;
            }
        };
        dsh_worker::alloc::exit_on_failure();
        // Another process of the same user (the one that started the probe),
        // for the prlimit() attempt below.
        let parent = std::os::unix::process::parent_id() as i32;
        if let Err(code) = apply_sandbox(&o) {
            return code;
        }
        files_and_processes(&o);
        sockets_and_signals(&o, parent);
        if o.spin {
            // Burn CPU until the kernel's CPU limit stops the process.
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        say("io_uring_setup()", {
            // struct io_uring_params is 120 bytes; zeroed asks for defaults.
            let mut params = [0u8; 120];
            // SAFETY: io_uring_setup writes into the params buffer it is given.
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
            if let Ok(fd) = i32::try_from(fd)
                && fd >= 0
            {
                // SAFETY: io_uring_setup just returned this descriptor, and
                // nothing else owns it; dropping it closes it.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
                Ok("created an io_uring".into())
            } else {
                Err(last_err())
            }
        });
        if let Some(n) = o.allocate {
            let v = vec![1u8; n];
            say("allocate", Ok(format!("allocated {} bytes", v.len())));
        }
        item_nine();
        // Last, because success replaces this process.
        say("execute /bin/true", {
            let path = c"/bin/true";
            let env: [&std::ffi::CStr; 0] = [];
            let Err(e) = execve(path, &[path], &env);
            Err::<String, _>(e.into())
        });
        0
    }

    /// Applies the sandbox the flags ask for and prints what it reached;
    /// `Err` is the exit code when the sandbox is refused.
    fn apply_sandbox(o: &Opts) -> Result<(), i32> {
        if o.only_landlock {
            // Landlock alone (with the no_new_privs it needs), to show that
            // its network and scope rules bite without seccomp's help.
            let mut t = sandbox::Tally::default();
            let _ = nix::sys::prctl::set_no_new_privs();
            sandbox::landlock::apply(o.inputs.landlock_abi_override, &mut t);
            println!("{}", json!({"tally": format!("{t:?}")}));
        } else {
            let policy = o.policy.unwrap_or(SandboxPolicy::BestEffort);
            let t0 = std::time::Instant::now();
            let applied = sandbox::apply(policy, &o.inputs);
            let apply_micros = t0.elapsed().as_micros();
            match applied {
                Ok(r) => println!(
                    "{}",
                    json!({"applyMicros": apply_micros, "report": {
                        "level": format!("{:?}", r.level),
                        "landlockAbi": r.landlock_abi,
                        "enforced": r.enforced,
                        "missing": r.missing,
                    }})
                ),
                Err(refused) => {
                    println!("{}", json!({"unavailable": refused.to_string()}));
                    return Err(3);
                }
            }
        }
        Ok(())
    }

    /// Files, and a new process.
    fn files_and_processes(o: &Opts) {
        say("read /etc/passwd", {
            std::fs::File::open("/etc/passwd").and_then(|mut f| {
                let mut s = String::new();
                f.read_to_string(&mut s).map(|n| format!("read {n} bytes"))
            })
        });
        say(
            "list /",
            std::fs::read_dir("/").map(|d| format!("{} entries", d.count())),
        );
        if let Some(dir) = &o.tmp {
            say(
                "write a file in a temp dir",
                std::fs::write(format!("{dir}/escaped"), b"x").map(|()| "written".into()),
            );
        }
        say("fork()", {
            // SAFETY: the probe is single-threaded, and the child only
            // calls _exit.
            match unsafe { fork() } {
                Err(e) => Err(e.into()),
                // SAFETY: _exit takes no pointers; it ends the child at once.
                Ok(ForkResult::Child) => unsafe { libc::_exit(0) },
                Ok(ForkResult::Parent { child }) => {
                    let _ = waitpid(child, None);
                    Ok(format!("forked pid {child}"))
                }
            }
        });
    }

    /// The network, another process's signals and limits (`parent`: the
    /// process that started the probe).
    fn sockets_and_signals(o: &Opts, parent: i32) {
        if let Some(port) = o.tcp_port {
            say(
                "TCP connect to 127.0.0.1",
                std::net::TcpStream::connect(("127.0.0.1", port)).map(|_| "connected".into()),
            );
            say(
                "TCP bind",
                std::net::TcpListener::bind(("127.0.0.1", 0))
                    .map(|l| format!("bound {:?}", l.local_addr().ok())),
            );
        }
        if let Some(name) = &o.abstract_name {
            say("connect to an abstract unix socket", {
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                    .and_then(|addr| std::os::unix::net::UnixStream::connect_addr(&addr))
                    .map(|_| "connected".into())
            });
        }
        if let Some(pid) = o.kill_pid {
            // No signal (signal 0): the permission check alone.
            say(
                "kill() the test process",
                kill(Pid::from_raw(pid), None)
                    .map(|()| "allowed".into())
                    .map_err(Into::into),
            );
        }
        // The allow-list lets the worker set its own limits (after `Init`),
        // and no one else's: not even read them (the parent's here).
        say("prlimit() the test process", {
            let mut old = std::mem::MaybeUninit::<libc::rlimit>::uninit();
            // SAFETY: a null new limit and a pointer to writable space for
            // the old one, as prlimit(2) asks.
            let rc = unsafe {
                libc::prlimit(
                    parent,
                    libc::RLIMIT_NOFILE,
                    std::ptr::null(),
                    old.as_mut_ptr(),
                )
            };
            if rc == 0 {
                Ok("read its limit".into())
            } else {
                Err(last_err())
            }
        });
    }
}
