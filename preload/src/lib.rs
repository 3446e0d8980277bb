//! libdropbehind.so: an LD_PRELOAD library that keeps streaming programs from flooding the
//! page cache. The crate map (the rule of who calls whom is in docs/ARCHITECTURE.md):
//!
//! - `hooks`: the exported symbols, the only `#[no_mangle]` functions; each asks the
//!   engine, calls the real function (`real`) once, and hands the result back;
//! - `entry`: the one way into the shim (re-entry guard, errno, panic containment);
//! - `engine`: joins the hooks to the policy (`dropbehind_core::policy`, pure) and performs
//!   its actions through the system layer (`dropbehind_sys`, the only raw syscalls);
//! - `fdtable`: per-fd state, lock-free;
//! - `helpers`: the shim's threads, with one lifecycle: `prefetch` (readahead for read
//!   streams), `mapwatch` (samples big file mappings), `dirprefetch` (inodes of big cold
//!   directories);
//! - `stats` and `log`: the exit report and the opt-in log;
//! - `unwind`: the unwinder (libgcc_s), loaded on the first panic instead of at start;
//! - `lazy`: the stubs through which libc functions are bound on first call (build.rs).

// The unit-test build leaves the hooks out (see below), and with them the only callers of
// much of the engine.
#![cfg_attr(test, allow(dead_code, unused_imports, unused_macros))]

#[macro_use]
extern crate dropbehind_bare;
#[macro_use]
mod log;

#[macro_use]
mod real;

mod engine;
mod entry;
mod fdtable;
mod helpers;
mod proof;
mod stats;

// Not in the unit-test binary either: it links the unwinder as usual.
#[cfg(not(test))]
mod unwind;

// Nor these: only the library is linked with the renaming they stand in for.
#[cfg(not(test))]
mod lazy;

// Not in the unit-test binary: its exported read/write would replace the test harness's own.
#[cfg(not(test))]
mod hooks;

// The engine's thread-locals in the static TLS block. The front loads the engine with
// dlopen, and a module's thread-locals are then allocated on each thread's first use, by
// malloc inside __tls_get_addr: in a hook, maybe in a signal handler or under an allocator
// that reads files. One initial-exec reference (never run) marks the library
// DF_STATIC_TLS: glibc then places all of them (88 bytes) in the surplus every thread has,
// or fails the dlopen, and the front runs without the engine.
#[cfg(all(not(test), target_arch = "x86_64"))]
core::arch::global_asm!(
    ".section .tbss.dropbehind_static_tls,\"awT\",@nobits",
    ".p2align 3",
    "dropbehind_static_tls: .zero 8",
    ".section .text.dropbehind_static_tls,\"axR\",@progbits",
    "dropbehind_static_tls_marker:",
    "mov rax, qword ptr [rip + dropbehind_static_tls@GOTTPOFF]",
    "ret",
    ".text",
);

pub(crate) use dropbehind_bare::inline_name;
use dropbehind_core::{config, policy};
use dropbehind_sys as sys;
use helpers::{dirprefetch, mapwatch, prefetch, writeback};
