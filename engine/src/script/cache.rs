//! The scripts this process prepared last, by name, kind and source: an
//! application that starts the same workflow again (a server, a pool's
//! runs) skips the parse, the checks and the type stripping, about 0.1 ms
//! of a run's start on a warm pool (docs/performance.md). Bounded: a few
//! entries, only sources up to [`MAX_SOURCE_BYTES`], least recently used
//! out first. Only successes are kept; a source that failed is prepared
//! (and fails) again, with its diagnostics.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{PreparedScript, ScriptError, ScriptKind, prepare};

/// Entries kept.
const ENTRIES: usize = 16;

/// A larger source is prepared each time (the cache holds at most about
/// `ENTRIES` × this many bytes of source, and its prepared code).
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;

struct Entry {
    name: String,
    kind: ScriptKind,
    source: String,
    prepared: Arc<PreparedScript>,
}

fn entries() -> &'static Mutex<VecDeque<Entry>> {
    static CACHE: Mutex<VecDeque<Entry>> = Mutex::new(VecDeque::new());
    &CACHE
}

/// [`prepare`], served from the cache when the same name, kind and source
/// were prepared before.
pub fn prepare_cached(
    display_name: &str,
    source: &str,
    kind: ScriptKind,
) -> Result<Arc<PreparedScript>, ScriptError> {
    if source.len() > MAX_SOURCE_BYTES {
        return prepare(display_name, source, kind).map(Arc::new);
    }
    let hit = |e: &Entry| e.kind == kind && e.name == display_name && e.source == source;
    if let Ok(mut cache) = entries().lock()
        && let Some(i) = cache.iter().position(hit)
        && let Some(entry) = cache.remove(i)
    {
        let prepared = entry.prepared.clone();
        cache.push_front(entry);
        return Ok(prepared);
    }
    // Prepared outside the lock: another start is not held up by it.
    let prepared = Arc::new(prepare(display_name, source, kind)?);
    if let Ok(mut cache) = entries().lock() {
        if !cache.iter().any(hit) {
            cache.push_front(Entry {
                name: display_name.to_string(),
                kind,
                source: source.to_string(),
                prepared: prepared.clone(),
            });
        }
        cache.truncate(ENTRIES);
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_script_is_prepared_once_and_a_different_one_is_not_confused_with_it() {
        let src = "export const meta = { name: 'c', description: 'd' };\nreturn 41 + 1;\n";
        let a = prepare_cached("cache-a.ts", src, ScriptKind::TypeScript).expect("prepares");
        let b = prepare_cached("cache-a.ts", src, ScriptKind::TypeScript).expect("prepares");
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second start is served from the cache"
        );
        // Another name, kind or source is prepared on its own.
        let other_name = prepare_cached("cache-b.ts", src, ScriptKind::TypeScript).expect("ok");
        assert!(!Arc::ptr_eq(&a, &other_name));
        assert_eq!(other_name.display_name, "cache-b.ts");
        let other_kind = prepare_cached("cache-a.ts", src, ScriptKind::JavaScript).expect("ok");
        assert!(!Arc::ptr_eq(&a, &other_kind));
        let changed = src.replace("41", "40");
        let c = prepare_cached("cache-a.ts", &changed, ScriptKind::TypeScript).expect("ok");
        assert!(!Arc::ptr_eq(&a, &c));
        assert_ne!(a.code, c.code);
    }

    #[test]
    fn a_failure_is_not_kept_and_reports_again() {
        let bad = "return (;\n";
        for _ in 0..2 {
            assert!(prepare_cached("cache-bad.js", bad, ScriptKind::JavaScript).is_err());
        }
    }

    #[test]
    fn the_cache_stays_bounded() {
        for i in 0..(ENTRIES * 2) {
            let src = format!("return {i};\n");
            prepare_cached("cache-bound.js", &src, ScriptKind::JavaScript).expect("prepares");
        }
        assert!(entries().lock().expect("lock").len() <= ENTRIES);
        let big = format!("return 1;\n//{}\n", "x".repeat(MAX_SOURCE_BYTES));
        let a = prepare_cached("cache-big.js", &big, ScriptKind::JavaScript).expect("ok");
        let b = prepare_cached("cache-big.js", &big, ScriptKind::JavaScript).expect("ok");
        assert!(!Arc::ptr_eq(&a, &b), "a large source is not kept");
    }
}
