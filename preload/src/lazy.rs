//! The stubs that let the loader bind libc functions on their first call (see build.rs):
//! for each function `F` of `preload/lazy-bound.txt`, a hidden `__wrap_F`, which the linker
//! puts in place of every reference to `F` (`--wrap`), and which jumps to `F` through a PLT
//! entry the loader fills when it is first taken.

std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/lazy_stubs.s")));
