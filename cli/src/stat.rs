//! `dropbehind stat PATH...`: how much of files and trees is in the page cache.
//!
//! Residency is cachestat's, the call the library's residency proof makes
//! (`sys::cache`). Where the kernel won't answer (cachestat refuses files the caller may not
//! write), the file is "unknown" and left out of the total. mincore is used only where
//! cachestat does not exist (before Linux 6.5), and only for files the caller owns: for
//! others it reports every page resident.

use crate::args::{SortKey, StatArgs};
use crate::out::{Out, json_opt, json_string};
use crate::walk::{Item, Walker};
use dropbehind_core::config::format_size;
use dropbehind_sys::Errno;
use dropbehind_sys::cache;
use dropbehind_sys::file::Meta;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const PAGE: u64 = 4096;
const MAP_WIDTH: u64 = 60;

/// What is known of a file's pages in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Res {
    Known {
        cached: u64,
        dirty: Option<u64>,
        writeback: Option<u64>,
        method: &'static str,
    },
    Unknown(&'static str),
}

pub const NOT_PERMITTED: &str = "cachestat not permitted: a file you may not write";

/// The residency of an open regular file.
pub fn residency(fd: i32, meta: &Meta) -> Res {
    match cache::cachestat(fd, 0, 0) {
        Ok(cs) => Res::Known {
            cached: cs.cache,
            dirty: Some(cs.dirty),
            writeback: Some(cs.writeback),
            method: "cachestat",
        },
        Err(Errno(libc::EPERM)) => Res::Unknown(NOT_PERMITTED),
        Err(Errno(libc::ENOSYS)) if mincore_tells_the_truth(meta) => {
            match cache::mincore_count(fd, meta.size) {
                Ok(cached) => Res::Known {
                    cached,
                    dirty: None,
                    writeback: None,
                    method: "mincore",
                },
                Err(_) => Res::Unknown("mincore failed"),
            }
        }
        Err(Errno(libc::ENOSYS)) => Res::Unknown("no cachestat (Linux < 6.5), not the owner"),
        Err(_) => Res::Unknown("cachestat failed"),
    }
}

/// mincore reports real residency only to the file's owner or a writer (else: all
/// resident). Ownership is what can be checked without opening the file for writing.
fn mincore_tells_the_truth(meta: &Meta) -> bool {
    let (euid, _) = dropbehind_sys::proc::effective_ids();
    euid == 0 || euid == meta.uid
}

/// The residency bar: one character per page, or per 1/60 of the file when it has more
/// than 60 pages. `O` all cached, `o` some, blank none, `?` unknown.
pub fn bar(fd: i32, size: u64, known: bool) -> String {
    let pages = size.div_ceil(PAGE);
    let width = pages.min(MAP_WIDTH);
    let mut s = String::with_capacity(width as usize + 2);
    s.push('[');
    for i in 0..width {
        let (a, b) = (i * pages / width, (i + 1) * pages / width);
        let c = match known.then(|| cache::cached_pages(fd, a * PAGE, (b - a) * PAGE)) {
            Some(Some(0)) => ' ',
            Some(Some(n)) if n >= b - a => 'O',
            Some(Some(_)) => 'o',
            _ => '?',
        };
        s.push(c);
    }
    s.push(']');
    s
}

struct Row {
    path: PathBuf,
    size: u64,
    res: Res,
    map: Option<String>,
}

impl Row {
    fn pages(&self) -> u64 {
        self.size.div_ceil(PAGE)
    }
    fn cached(&self) -> Option<u64> {
        match self.res {
            Res::Known { cached, .. } => Some(cached),
            Res::Unknown(_) => None,
        }
    }
    fn percent(&self) -> Option<f64> {
        let c = self.cached()?;
        Some(if self.pages() == 0 {
            0.0
        } else {
            (100.0 * c as f64 / self.pages() as f64).min(100.0)
        })
    }
}

enum Line {
    File(Row),
    Skipped(PathBuf, String),
    Again(PathBuf, PathBuf),
    Error(PathBuf, String),
}

#[derive(Default)]
struct Totals {
    files: u64,
    size: u64,
    pages: u64,
    cached: u64,
    dirty: u64,
    unknown: u64,
    skipped: u64,
    again: u64,
    errors: u64,
}

impl Totals {
    fn add(&mut self, line: &Line) {
        match line {
            Line::File(r) => {
                self.files += 1;
                self.size += r.size;
                match r.res {
                    Res::Known { cached, dirty, .. } => {
                        self.pages += r.pages();
                        self.cached += cached;
                        self.dirty += dirty.unwrap_or(0);
                    }
                    Res::Unknown(_) => self.unknown += 1,
                }
            }
            Line::Skipped(..) => self.skipped += 1,
            Line::Again(..) => self.again += 1,
            Line::Error(..) => self.errors += 1,
        }
    }

    fn note(&self) -> String {
        let mut s = format!(
            "total: {} file{}",
            self.files,
            if self.files == 1 { "" } else { "s" }
        );
        if self.unknown > 0 {
            s += &format!(", {} unknown (not counted)", self.unknown);
        }
        if self.again > 0 {
            s += &format!(", {} more path(s) to a file counted once", self.again);
        }
        if self.skipped > 0 {
            s += &format!(", {} skipped", self.skipped);
        }
        if self.errors > 0 {
            s += &format!(", {} error(s)", self.errors);
        }
        s
    }
}

fn pct(cached: u64, pages: u64) -> String {
    if pages == 0 {
        "0.0%".into()
    } else {
        format!("{:.1}%", (100.0 * cached as f64 / pages as f64).min(100.0))
    }
}

fn table_row(cached: &str, pct: &str, pages: &str, size: &str, dirty: &str, file: &str) -> String {
    format!("{cached:>8} {pct:>6} {pages:>15} {size:>8} {dirty:>8}  {file}")
}

fn text(line: &Line) -> String {
    match line {
        Line::File(r) => {
            let mut s = match r.res {
                Res::Known {
                    cached,
                    dirty,
                    method,
                    ..
                } => {
                    let mut s = table_row(
                        &format_size(cached * PAGE),
                        &pct(cached, r.pages()),
                        &format!("{cached}/{}", r.pages()),
                        &format_size(r.size),
                        &dirty.map_or("-".into(), |d| format_size(d * PAGE)),
                        &r.path.display().to_string(),
                    );
                    if method == "mincore" {
                        s += "  (mincore: no cachestat on this kernel)";
                    }
                    s
                }
                Res::Unknown(why) => table_row(
                    "unknown",
                    "-",
                    &format!("?/{}", r.pages()),
                    &format_size(r.size),
                    "-",
                    &format!("{}  (unknown: {why})", r.path.display()),
                ),
            };
            if let Some(map) = &r.map {
                s += &format!(
                    "\n  {map} {}/{}",
                    r.cached().map_or("?".into(), |c| c.to_string()),
                    r.pages()
                );
            }
            s
        }
        Line::Skipped(p, why) => table_row(
            "skipped",
            "",
            "",
            "",
            "",
            &format!("{}  ({why})", p.display()),
        ),
        Line::Again(p, first) => table_row(
            "link",
            "",
            "",
            "",
            "",
            &format!(
                "{}  (same file as {}, counted once)",
                p.display(),
                first.display()
            ),
        ),
        Line::Error(..) => String::new(),
    }
}

fn json(line: &Line) -> String {
    let p = |p: &Path| json_string(&p.to_string_lossy());
    match line {
        Line::File(r) => {
            let (cached, dirty, writeback, method, why) = match r.res {
                Res::Known {
                    cached,
                    dirty,
                    writeback,
                    method,
                } => (
                    Some(cached),
                    dirty,
                    writeback,
                    json_string(method),
                    "null".into(),
                ),
                Res::Unknown(why) => (None, None, None, "null".into(), json_string(why)),
            };
            let mut s = format!(
                "{{\"kind\":\"file\",\"file\":{},\"size\":{},\"pages\":{},\"cached_pages\":{},\"cached_bytes\":{},\"dirty_pages\":{},\"writeback_pages\":{},\"method\":{method},\"unknown\":{why}",
                p(&r.path),
                r.size,
                r.pages(),
                json_opt(cached),
                json_opt(cached.map(|c| c * PAGE)),
                json_opt(dirty),
                json_opt(writeback),
            );
            if let Some(map) = &r.map {
                s += &format!(",\"map\":{}", json_string(map.trim_matches(['[', ']'])));
            }
            s + "}"
        }
        Line::Skipped(path, why) => format!(
            "{{\"kind\":\"skipped\",\"file\":{},\"why\":{}}}",
            p(path),
            json_string(why)
        ),
        Line::Again(path, first) => format!(
            "{{\"kind\":\"link\",\"file\":{},\"same_as\":{}}}",
            p(path),
            p(first)
        ),
        Line::Error(path, e) => format!(
            "{{\"kind\":\"error\",\"file\":{},\"error\":{}}}",
            p(path),
            json_string(e)
        ),
    }
}

fn total_json(t: &Totals) -> String {
    format!(
        "{{\"kind\":\"total\",\"files\":{},\"size\":{},\"pages\":{},\"cached_pages\":{},\"cached_bytes\":{},\"dirty_pages\":{},\"unknown\":{},\"links\":{},\"skipped\":{},\"errors\":{}}}",
        t.files,
        t.size,
        t.pages,
        t.cached,
        t.cached * PAGE,
        t.dirty,
        t.unknown,
        t.again,
        t.skipped,
        t.errors
    )
}

/// Writes lines as table rows or as the records of a JSON array.
struct Printer {
    out: Out,
    json: Option<crate::out::JsonArray>,
}

impl Printer {
    fn emit(&mut self, line: &Line) {
        match &mut self.json {
            Some(array) => array.push(&mut self.out, json(line)),
            None if !matches!(line, Line::Error(..)) => self.out.line(&text(line)),
            None => {}
        }
    }
}

pub fn run(a: &StatArgs) -> ExitCode {
    let collect = a.sort.is_some() || a.top.is_some();
    let mut out = Out::new();
    let json = a.json.then(|| crate::out::JsonArray::start(&mut out));
    let mut printer = Printer { out, json };
    if !a.json {
        printer
            .out
            .line(&table_row("CACHED", "%", "PAGES", "SIZE", "DIRTY", "FILE"));
    }
    let mut totals = Totals::default();
    let mut kept: Vec<Line> = Vec::new();
    let mut visit = |path: &Path, item: Item| -> bool {
        let line = match item {
            Item::File { fd, meta } => {
                let res = residency(fd.raw(), meta);
                let known = matches!(
                    res,
                    Res::Known {
                        method: "cachestat",
                        ..
                    }
                );
                Line::File(Row {
                    path: path.to_path_buf(),
                    size: meta.size,
                    res,
                    map: a.map.then(|| bar(fd.raw(), meta.size, known)),
                })
            }
            Item::Skipped(why) => Line::Skipped(path.to_path_buf(), why),
            Item::Again { first } => Line::Again(path.to_path_buf(), first.to_path_buf()),
            Item::Error(e) => {
                eprintln!("dropbehind: stat: {}: {e}", path.display());
                Line::Error(path.to_path_buf(), e)
            }
        };
        totals.add(&line);
        if a.summary {
            if a.json && matches!(line, Line::Error(..)) {
                printer.emit(&line);
            }
        } else if collect {
            kept.push(line);
        } else {
            printer.emit(&line);
        }
        !printer.out.broken
    };
    Walker::new(a.walk, &mut visit).walk(&a.paths);
    if collect {
        let key = a.sort.unwrap_or(SortKey::Cached);
        let (mut files, rest): (Vec<Line>, Vec<Line>) =
            kept.into_iter().partition(|l| matches!(l, Line::File(_)));
        fn row(l: &Line) -> Option<&Row> {
            match l {
                Line::File(r) => Some(r),
                _ => None,
            }
        }
        files.sort_by(|x, y| {
            let (x, y) = (row(x).expect("file"), row(y).expect("file"));
            let desc = |f: fn(&Row) -> Option<f64>| {
                f(y).unwrap_or(-1.0)
                    .total_cmp(&f(x).unwrap_or(-1.0))
                    .then_with(|| x.path.cmp(&y.path))
            };
            match key {
                SortKey::Cached => desc(|r| r.cached().map(|c| c as f64)),
                SortKey::Percent => desc(Row::percent),
                SortKey::Size => desc(|r| Some(r.size as f64)),
                SortKey::Name => x.path.cmp(&y.path),
            }
        });
        let shown = a.top.map_or(files.len(), |n| files.len().min(n as usize));
        for l in &files[..shown] {
            printer.emit(l);
        }
        if a.top.is_none() {
            for l in &rest {
                printer.emit(l);
            }
        } else {
            for l in rest.iter().filter(|l| matches!(l, Line::Error(..))) {
                printer.emit(l);
            }
        }
    }
    if let Some(mut array) = printer.json.take() {
        array.push(&mut printer.out, total_json(&totals));
        array.end(&mut printer.out);
    } else if totals.files + totals.skipped + totals.again > 1 || a.walk.recursive || a.summary {
        let mut note = totals.note();
        if let Some(n) = a.top
            && n < totals.files
        {
            note += &format!(" (top {n} shown)");
        }
        printer.out.line(&table_row(
            &format_size(totals.cached * PAGE),
            &pct(totals.cached, totals.pages),
            &format!("{}/{}", totals.cached, totals.pages),
            &format_size(totals.size),
            &format_size(totals.dirty * PAGE),
            &note,
        ));
    }
    printer.out.flush();
    if totals.errors > 0 || printer.out.broken {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
