//! The unwinder, loaded on the first panic instead of with the library.
//!
//! std's panics (caught at every entry point, see `entry`) unwind with libgcc_s's
//! `_Unwind_*` functions. Linked as usual, libgcc_s.so.1 is a load-time dependency: every
//! process pays for mapping and relocating it and for its constructor (CPUID probes, slow
//! in a VM), about 75 us per exec measured here. These hidden definitions satisfy std's
//! references instead (so the linker's --as-needed drops the library) and forward each call
//! to the real function, found in libgcc_s.so.1 opened the first time one is called: a
//! panic, or a thread cancellation unwinding through a hook. glibc loads libgcc_s the same
//! way for pthread_cancel. If it can't be opened, a panic aborts (before, the program could
//! not start at all).

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `_URC_FATAL_PHASE1_ERROR`: what the unwinder answers when it can't start.
const FATAL: usize = 3;

macro_rules! unwinder {
    ($($idx:literal $name:ident $forward:ident $fallback:expr;)*) => {
        const NAMES: &[&CStr] = &[$(
            match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("a symbol name with a NUL in it"),
            }
        ),*];
        static ADDRS: [AtomicUsize; NAMES.len()] = [const { AtomicUsize::new(0) }; NAMES.len()];
        $(
            // Every one of these takes at most three integer or pointer arguments and
            // returns one or nothing, so all forward three registers and return one.
            // C-unwind: _Unwind_Resume unwinds on from its caller, this frame.
            extern "C-unwind" fn $forward(a: usize, b: usize, c: usize) -> usize {
                match real($idx) {
                    // SAFETY: `f` is libgcc_s's function of the same name as the one the
                    // caller called (`load` looked up NAMES[$idx]); its at most three
                    // integer or pointer arguments arrive in the first three argument
                    // registers, which are passed on unchanged, and the extra ones it
                    // doesn't take are ignored under the C calling convention.
                    Some(f) => unsafe { f(a, b, c) },
                    None => $fallback,
                }
            }
            #[cfg(target_arch = "x86_64")]
            std::arch::global_asm!(
                concat!(".globl ", stringify!($name)),
                concat!(".hidden ", stringify!($name)),
                concat!(".type ", stringify!($name), ", @function"),
                concat!(stringify!($name), ":"),
                "jmp {f}",
                f = sym $forward,
            );
            #[cfg(target_arch = "aarch64")]
            std::arch::global_asm!(
                concat!(".globl ", stringify!($name)),
                concat!(".hidden ", stringify!($name)),
                concat!(".type ", stringify!($name), ", %function"),
                concat!(stringify!($name), ":"),
                "b {f}",
                f = sym $forward,
            );
        )*
    };
}

unwinder! {
    0 _Unwind_RaiseException raise_exception FATAL;
    1 _Unwind_Resume resume std::process::abort();
    2 _Unwind_DeleteException delete_exception 0;
    3 _Unwind_GetLanguageSpecificData get_lsda 0;
    4 _Unwind_GetRegionStart get_region_start 0;
    5 _Unwind_GetIP get_ip 0;
    6 _Unwind_GetIPInfo get_ip_info 0;
    7 _Unwind_SetIP set_ip 0;
    8 _Unwind_SetGR set_gr 0;
    9 _Unwind_GetDataRelBase get_data_rel_base 0;
    10 _Unwind_GetTextRelBase get_text_rel_base 0;
    11 _Unwind_Backtrace backtrace FATAL;
}

type Forward = unsafe extern "C-unwind" fn(usize, usize, usize) -> usize;

/// The real function NAMES[idx], if libgcc_s has it (0: not looked up yet, 1: missing).
fn real(idx: usize) -> Option<Forward> {
    let mut a = ADDRS[idx].load(Ordering::Acquire);
    if a == 0 {
        load();
        a = ADDRS[idx].load(Ordering::Acquire);
    }
    // SAFETY: above 1, `a` was stored by `load` from dlsym, which found a function of that
    // name in libgcc_s.so.1 (a handle never closed, so the address stays valid); a function
    // address has the size of a usize and is never null.
    (a > 1).then(|| unsafe { std::mem::transmute::<usize, Forward>(a) })
}

/// Opens libgcc_s and looks up every function (1 for one that is missing). Two threads
/// racing here both store the same addresses; dlopen counts the second reference.
#[cold]
fn load() {
    // SAFETY: the name is a NUL-terminated static string that dlopen only reads; the handle
    // is never closed, so what dlsym finds in it stays mapped.
    let h: *mut c_void = unsafe { libc::dlopen(c"libgcc_s.so.1".as_ptr(), libc::RTLD_NOW) };
    for (i, name) in NAMES.iter().enumerate() {
        let p = if h.is_null() {
            0
        } else {
            // SAFETY: `h` is a live handle from dlopen and `name` a NUL-terminated static
            // string that dlsym only reads.
            unsafe { libc::dlsym(h, name.as_ptr()) as usize }
        };
        ADDRS[i].store(p.max(1), Ordering::Release);
    }
}
