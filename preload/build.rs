//! Link-time settings of libdropbehind.so that decide what every process pays to load it.
//!
//! - `-Bsymbolic-functions`: the library's own references to the functions it exports (std
//!   calling `read`, `write`, `close`... which are the hooks) are bound when linking, not by
//!   a symbol lookup at every start: they would find the hooks anyway, the library being
//!   loaded before libc.
//! - Lazy binding of the libc functions in `lazy-bound.txt`: rustc calls imported functions
//!   through the GOT, which the loader must fill at load time (about 850 instructions of
//!   symbol lookup each, 58 of them: a third of what the library added to an exec of
//!   /bin/true). Each listed function is renamed with `--wrap` to a local stub that jumps
//!   through the PLT, and `-z lazy` lets the loader bind a PLT entry on its first call, as
//!   it does for most programs. A process pays only for the functions it calls. What the
//!   constructor itself calls (`__errno_location`, `memcpy`) is left out: bound at load, it
//!   costs a lookup; bound lazily, the same lookup plus a fault on the PLT's page.
//! - `-z separate-loadable-segments`: each segment starts on a page of its own, so the
//!   relocated data (RELRO: vtables, panic locations, the GOT; 16 KiB) spans 4 pages
//!   instead of the 5 it straddled, and the loader's zeroing of its end falls on a page the
//!   relocations write anyway: 2 faults fewer per start, RELRO kept (`-z norelro` saves the
//!   same time, with the vtables left writable). GNU ld ignores the option with a warning.
//! - Two segments, code and data (`--no-rosegment`: rustc links with lld, which otherwise
//!   puts read-only data apart from code; `-z norelro`: no read-only-after-relocation part
//!   to mprotect): every segment is an mmap or mprotect at each load, and the front loads
//!   the engine with dlopen in every process that does work. 4 segments -> 2 took 21 us
//!   off each such process, preloaded or dlopened alike (bench/results/overhead-i16.md,
//!   "The front"). What RELRO protected (vtables, the GOT) sits beside the hooks' tables of
//!   real-function addresses, which are writable in any case.
//! - `startup.ld`: the pages a process touches at start gathered in as few as possible. A
//!   page faulted in costs an exec about 2 us (copied on write) to 4 us (text: the kernel
//!   maps its 16 neighbours too, and unmaps them at exit), measured here; this took the
//!   library's share of an exec of /bin/true from 15 faults over an empty library's to 6
//!   (bench/results/overhead-i16.md).
use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=lazy-bound.txt");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,separate-loadable-segments");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-rosegment");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,norelro");
    println!("cargo:rerun-if-changed=startup.ld");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{dir}/startup.ld");
    let list = std::fs::read_to_string("lazy-bound.txt").expect("preload/lazy-bound.txt");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let mut asm = String::new();
    for name in list.lines().map(str::trim) {
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        let (ty, jump) = match arch.as_str() {
            "x86_64" => ("@function", format!("jmp __real_{name}@PLT")),
            "aarch64" => ("%function", format!("b __real_{name}")),
            _ => return, // no stubs, no renaming: everything bound at load time
        };
        println!("cargo:rustc-cdylib-link-arg=-Wl,--wrap={name}");
        writeln!(
            asm,
            ".section .text.__wrap_{name},\"ax\",%progbits\n.globl __wrap_{name}\n\
             .hidden __wrap_{name}\n.type __wrap_{name}, {ty}\n__wrap_{name}:\n    {jump}\n\
             .size __wrap_{name}, .-__wrap_{name}"
        )
        .unwrap();
    }
    if !asm.is_empty() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,lazy");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("lazy_stubs.s");
    std::fs::write(out, asm).unwrap();
}
