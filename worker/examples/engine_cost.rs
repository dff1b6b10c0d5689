//! Measures what building the engine for one run costs: a QuickJS runtime
//! and full context, and evaluating the prelude source.
//! `cargo run --release -p dsh-worker --example engine_cost`

use std::time::{Duration, Instant};

use rquickjs::{Context, Function, Runtime};

const PRELUDE: &str = include_str!("../src/engine/prelude.js");

fn median(mut xs: Vec<Duration>) -> f64 {
    xs.sort();
    xs[xs.len() / 2].as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut rt_ctx = Vec::new();
    let mut prelude = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let rt = Runtime::new()?;
        let ctx = Context::full(&rt)?;
        rt_ctx.push(t.elapsed());
        let t = Instant::now();
        ctx.with(|ctx| ctx.eval::<Function, _>(PRELUDE).map(drop))?;
        prelude.push(t.elapsed());
    }
    let rt = Runtime::new()?;
    let ctx = Context::full(&rt)?;
    let bytes =
        ctx.with(|ctx| dsh_worker::engine::bytecode::compile(&ctx, PRELUDE, "dsh:prelude"))?;
    let mut load = Vec::new();
    for _ in 0..200 {
        let rt = Runtime::new()?;
        let ctx = Context::full(&rt)?;
        let t = Instant::now();
        let is_function = ctx.with(|ctx| {
            dsh_worker::engine::bytecode::eval(&ctx, &bytes).map(|v| v.is_function())
        })?;
        assert!(
            is_function,
            "the prelude's bytecode evaluates to its function"
        );
        load.push(t.elapsed());
    }
    println!("runtime + full context: median {:.3} ms", median(rt_ctx));
    println!(
        "prelude from bytecode:  median {:.3} ms ({} bytes)",
        median(load),
        bytes.len()
    );
    println!("prelude compile+eval:   median {:.3} ms", median(prelude));
    Ok(())
}
