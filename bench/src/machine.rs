//! The machine the figures come from, the baseline (spawn and wait of a
//! small static binary) and readings from /proc.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub mem_total: String,
    pub load_before: String,
    pub dsh_commit: Option<String>,
}

impl Machine {
    pub fn read(repo: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.into());
        let mem_total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map(|kib| format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0))
            .unwrap_or_else(|| "unknown".into());
        let dsh_commit = Command::new("git")
            .args(["describe", "--always", "--dirty"])
            .current_dir(repo)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        Machine {
            cpu,
            cores,
            kernel,
            mem_total,
            load_before: load_average(),
            dsh_commit,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "cpu": self.cpu,
            "cores": self.cores,
            "kernel": self.kernel,
            "memTotal": self.mem_total,
            "loadBefore": self.load_before,
            "dshCommit": self.dsh_commit,
        })
    }
}

/// The 1/5/15-minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// What the baseline spawns.
pub struct Baseline {
    pub program: PathBuf,
    /// How it was obtained, for the report.
    pub description: String,
}

impl Baseline {
    /// A tiny static C program compiled with `gcc -static` into `dir`; when
    /// that fails, `/bin/true` (dynamically linked, so slower; said so).
    pub fn prepare(dir: &Path) -> Result<Baseline> {
        let src = dir.join("static-true.c");
        let bin = dir.join("static-true");
        std::fs::write(&src, "int main(void) { return 0; }\n")?;
        let gcc = Command::new("gcc")
            .args(["-static", "-O2", "-o"])
            .arg(&bin)
            .arg(&src)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if matches!(gcc, Ok(s) if s.success()) && bin.is_file() {
            return Ok(Baseline {
                program: bin,
                description: "a static C binary (`int main(void) { return 0; }`, gcc -static -O2)"
                    .into(),
            });
        }
        let fallback = PathBuf::from("/bin/true");
        if !fallback.is_file() {
            bail!("no gcc -static and no /bin/true: no baseline");
        }
        Ok(Baseline {
            program: fallback,
            description: "/bin/true — gcc -static was not available, so this is a dynamically \
                          linked binary and the baseline is higher than a static one"
                .into(),
        })
    }

    /// One spawn + wait (std::process, stdio null).
    pub fn sample(&self) -> Result<Duration> {
        let mut cmd = Command::new(&self.program);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let t = Instant::now();
        let status = tokio::task::block_in_place(|| cmd.status())
            .with_context(|| format!("spawning {}", self.program.display()))?;
        let elapsed = t.elapsed();
        if !status.success() {
            bail!("{} exited with {status}", self.program.display());
        }
        Ok(elapsed)
    }
}

/// `Rss`, `Pss` and private (`Private_Clean + Private_Dirty`) of a process,
/// in KiB, from `/proc/<pid>/smaps_rollup`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcMemory {
    pub rss_kib: f64,
    pub pss_kib: f64,
    pub private_kib: f64,
}

pub fn proc_memory(pid: u32) -> Result<ProcMemory> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let m = ProcMemory {
        rss_kib: field("Rss:"),
        pss_kib: field("Pss:"),
        private_kib: field("Private_Clean:") + field("Private_Dirty:"),
    };
    if m.rss_kib == 0.0 {
        bail!("{path} has no Rss line");
    }
    Ok(m)
}

/// This process's resident set (VmRSS), in KiB.
pub fn self_rss_kib() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/self/status")?;
    text.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .context("no VmRSS in /proc/self/status")
}

/// Heap bytes this process has allocated and not freed (glibc's
/// `mallinfo2`: `uordblks + hblkhd`, over every arena), in KiB. Unlike the
/// RSS it does not hide growth behind memory the allocator kept for reuse.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_in_use_kib() -> Option<f64> {
    // SAFETY: mallinfo2 has no preconditions; it returns a plain struct.
    let m = unsafe { libc::mallinfo2() };
    Some((m.uordblks + m.hblkhd) as f64 / 1024.0)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_in_use_kib() -> Option<f64> {
    None
}
