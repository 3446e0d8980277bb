//! `dropbehind evict PATH...`: drops what is cached of files and trees, clean pages only.
//!
//! posix_fadvise(DONTNEED) starts writeback of the dirty pages in its range before it drops
//! the clean ones, so it is never given a range with a dirty page or one under writeback:
//! cachestat finds them first. The file is split into aligned power-of-two blocks, and a
//! block that is not all clean is split again, down to single pages. Blocks stay aligned, so
//! a clean large folio (naturally aligned to its size) is always inside one clean block that
//! DONTNEED is given whole, and is dropped. Nothing is written or synced; files whose
//! residency the kernel won't tell (cachestat EPERM) are left alone, since their dirty pages
//! can't be found.

use crate::args::EvictArgs;
use crate::out::{JsonArray, Out, json_string};
use crate::stat::{NOT_PERMITTED, PAGE};
use crate::walk::{Item, Walker};
use dropbehind_core::config::format_size;
use dropbehind_sys::Errno;
use dropbehind_sys::cache::{self, CacheStat};
use std::path::Path;
use std::process::ExitCode;

/// What evicting one file did, in pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    pub before: u64,
    pub dropped: u64,
    /// Dirty or under writeback afterwards: left alone.
    pub dirty: u64,
    /// Clean but still cached afterwards: mapped by a process, or in use.
    pub kept: u64,
}

/// Drops the clean cached pages of the open file `fd` of `size` bytes. An error (why) when
/// cachestat can't tell: then nothing was asked of the kernel.
pub fn evict(fd: i32, size: u64) -> Result<Evicted, &'static str> {
    let before = match cache::cachestat(fd, 0, 0) {
        Ok(cs) => cs,
        Err(Errno(libc::EPERM)) => return Err(NOT_PERMITTED),
        Err(Errno(libc::ENOSYS)) => return Err("no cachestat (Linux < 6.5)"),
        Err(_) => return Err("cachestat failed"),
    };
    if before.cache > 0 {
        // One aligned block covering the file (and whatever lies past its end now).
        let span = size
            .div_ceil(PAGE)
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 51)
            * PAGE;
        if before.dirty == 0 && before.writeback == 0 {
            let _ = cache::fadvise(fd, 0, span, libc::POSIX_FADV_DONTNEED);
        } else {
            drop_clean(fd, 0, span);
        }
    }
    let after = cache::cachestat(fd, 0, 0).unwrap_or(before);
    Ok(account(&before, &after))
}

fn account(before: &CacheStat, after: &CacheStat) -> Evicted {
    let dirty = (after.dirty + after.writeback).min(after.cache);
    Evicted {
        before: before.cache,
        dropped: before.cache.saturating_sub(after.cache),
        dirty,
        kept: after.cache - dirty,
    }
}

/// DONTNEED on the parts of `off..off+len` (aligned, a power of two pages long) that have
/// no dirty page and none under writeback.
fn drop_clean(fd: i32, off: u64, len: u64) {
    let Ok(cs) = cache::cachestat(fd, off, len) else {
        return;
    };
    if cs.dirty == 0 && cs.writeback == 0 {
        if cs.cache > 0 {
            let _ = cache::fadvise(fd, off, len, libc::POSIX_FADV_DONTNEED);
        }
        return;
    }
    // Nothing clean is cached here (every cached page dirty or under writeback), or a
    // single page that is not clean.
    if cs.dirty + cs.writeback >= cs.cache || len <= PAGE {
        return;
    }
    let half = len / 2;
    drop_clean(fd, off, half);
    drop_clean(fd, off + half, half);
}

#[derive(Default)]
struct Totals {
    files: u64,
    e: Evicted,
    unknown: u64,
    skipped: u64,
    again: u64,
    errors: u64,
}

fn row(dropped: &str, dirty: &str, kept: &str, file: &str) -> String {
    format!("{dropped:>8} {dirty:>8} {kept:>8}  {file}")
}

fn notes(e: &Evicted) -> String {
    let mut s = String::new();
    if e.dirty > 0 {
        s += &format!("  ({} dirty, left alone)", format_size(e.dirty * PAGE));
    }
    if e.kept > 0 {
        s += &format!(
            "  ({} still cached: mapped or in use)",
            format_size(e.kept * PAGE)
        );
    }
    s
}

fn json_counts(e: &Evicted) -> String {
    format!(
        "\"cached_pages_before\":{},\"dropped_pages\":{},\"dirty_pages\":{},\"kept_pages\":{}",
        e.before, e.dropped, e.dirty, e.kept
    )
}

pub fn run(a: &EvictArgs) -> ExitCode {
    let mut out = Out::new();
    let mut array = a.json.then(|| JsonArray::start(&mut out));
    if !a.json && !a.summary {
        out.line(&row("DROPPED", "DIRTY", "KEPT", "FILE"));
    }
    let mut t = Totals::default();
    let mut visit = |path: &Path, item: Item| -> bool {
        let name = json_string(&path.to_string_lossy());
        let (text, json) = match item {
            Item::File { fd, meta } => {
                t.files += 1;
                match evict(fd.raw(), meta.size) {
                    Ok(e) => {
                        t.e.before += e.before;
                        t.e.dropped += e.dropped;
                        t.e.dirty += e.dirty;
                        t.e.kept += e.kept;
                        let sz = |n: u64| format_size(n * PAGE);
                        let text = row(
                            &sz(e.dropped),
                            &sz(e.dirty),
                            &sz(e.kept),
                            &format!("{}{}", path.display(), notes(&e)),
                        );
                        let json = format!(
                            "{{\"kind\":\"file\",\"file\":{name},\"size\":{},{}}}",
                            meta.size,
                            json_counts(&e)
                        );
                        (Some(text), json)
                    }
                    Err(why) => {
                        t.unknown += 1;
                        let text = row(
                            "-",
                            "-",
                            "-",
                            &format!("{}  (left alone: {why})", path.display()),
                        );
                        let json = format!(
                            "{{\"kind\":\"file\",\"file\":{name},\"size\":{},\"unknown\":{}}}",
                            meta.size,
                            json_string(why)
                        );
                        (Some(text), json)
                    }
                }
            }
            Item::Skipped(why) => {
                t.skipped += 1;
                let text = row("skipped", "", "", &format!("{}  ({why})", path.display()));
                let json = format!(
                    "{{\"kind\":\"skipped\",\"file\":{name},\"why\":{}}}",
                    json_string(&why)
                );
                (Some(text), json)
            }
            Item::Again { first } => {
                t.again += 1;
                let text = row(
                    "link",
                    "",
                    "",
                    &format!("{}  (same file as {})", path.display(), first.display()),
                );
                let json = format!(
                    "{{\"kind\":\"link\",\"file\":{name},\"same_as\":{}}}",
                    json_string(&first.to_string_lossy())
                );
                (Some(text), json)
            }
            Item::Error(e) => {
                t.errors += 1;
                eprintln!("dropbehind: evict: {}: {e}", path.display());
                let json = format!(
                    "{{\"kind\":\"error\",\"file\":{name},\"error\":{}}}",
                    json_string(&e)
                );
                (None, json)
            }
        };
        match (&mut array, text) {
            (Some(array), text) if !a.summary || text.is_none() => array.push(&mut out, json),
            (None, Some(text)) if !a.summary => out.line(&text),
            _ => {}
        }
        !out.broken
    };
    Walker::new(a.walk, &mut visit).walk(&a.paths);
    if let Some(mut array) = array {
        let total = format!(
            "{{\"kind\":\"total\",\"files\":{},{},\"unknown\":{},\"links\":{},\"skipped\":{},\"errors\":{}}}",
            t.files,
            json_counts(&t.e),
            t.unknown,
            t.again,
            t.skipped,
            t.errors
        );
        array.push(&mut out, total);
        array.end(&mut out);
    } else {
        let mut note = format!(
            "total: {} file{}",
            t.files,
            if t.files == 1 { "" } else { "s" }
        );
        if t.unknown > 0 {
            note += &format!(", {} left alone (residency unknown)", t.unknown);
        }
        if t.again > 0 {
            note += &format!(", {} more path(s) to a file done once", t.again);
        }
        if t.skipped > 0 {
            note += &format!(", {} skipped", t.skipped);
        }
        if t.errors > 0 {
            note += &format!(", {} error(s)", t.errors);
        }
        let sz = |n: u64| format_size(n * PAGE);
        out.line(&row(
            &sz(t.e.dropped),
            &sz(t.e.dirty),
            &sz(t.e.kept),
            &format!("{note}{}", notes(&t.e)),
        ));
    }
    out.flush();
    if t.errors > 0 || out.broken {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_splits_what_stayed() {
        let before = CacheStat {
            cache: 100,
            dirty: 10,
            ..Default::default()
        };
        let after = CacheStat {
            cache: 30,
            dirty: 8,
            writeback: 2,
            ..Default::default()
        };
        assert_eq!(
            account(&before, &after),
            Evicted {
                before: 100,
                dropped: 70,
                dirty: 10,
                kept: 20
            }
        );
    }
}
