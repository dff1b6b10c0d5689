//! Compiles the prelude (src/engine/prelude.js) to QuickJS bytecode once,
//! at build time, with the same engine version the worker links; the worker
//! loads it per run instead of parsing ~25 KB of JavaScript (about 0.08 ms
//! instead of 0.9 ms). If anything here fails, the worker is built without
//! bytecode and parses the source at run time instead.

// A build script reports what it cannot do (no OUT_DIR, an unwritable
// output) by panicking with a message.
#![allow(clippy::expect_used)]

#[path = "src/engine/bytecode.rs"]
#[allow(dead_code)]
mod bytecode;

fn main() {
    println!("cargo::rerun-if-changed=src/engine/prelude.js");
    println!("cargo::rerun-if-changed=src/engine/bytecode.rs");
    // Position-dependent, like `dsh` (see the root build.rs for why): the
    // relocated pages of a PIE would be private to every worker.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-link-arg-bin=dsh-worker=-no-pie");
    }
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let source =
        std::fs::read_to_string("src/engine/prelude.js").expect("prelude.js is part of the crate");
    let bytes = rquickjs::Runtime::new()
        .and_then(|rt| rquickjs::Context::full(&rt).map(|c| (rt, c)))
        .ok()
        .and_then(|(_rt, ctx)| {
            ctx.with(|ctx| bytecode::compile(&ctx, &source, "dsh:prelude").ok())
        });
    match bytes {
        Some(b) => std::fs::write(out.join("prelude.bc"), b).expect("write OUT_DIR/prelude.bc"),
        None => {
            println!(
                "cargo::warning=could not precompile the prelude; the worker will parse it at run time"
            );
            std::fs::write(out.join("prelude.bc"), b"").expect("write OUT_DIR/prelude.bc");
        }
    }
}
