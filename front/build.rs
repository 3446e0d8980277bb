//! Link-time settings of libdropbehind.so, the front every preloaded process maps: each
//! segment is an mmap, a mprotect or a page fault at every exec (a few microseconds each
//! on a VM), so the 20 KiB are laid out in two, code and data.
//!
//! - `--no-rosegment` (rustc links with lld): headers, read-only data and code in one
//!   segment;
//! - `-z norelro`: no read-only-after-relocation part of the data (the few GOT words and
//!   the constructor's pointer), so no mprotect and one writable segment. The slots the
//!   trampolines jump through are writable by design anyway.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-rosegment");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,norelro");
}
