//! What every Rust preload with panic containment carries: std's panic runtime (and with it
//! formatting and the default hook's backtrace code), `catch_unwind` at its entry point, a
//! constructor that replaces the hook printing panics on the program's stderr. Nothing else.

// libc imported lazily through stubs, and libgcc_s loaded on the first panic, not at start,
// exactly as the preload does both.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/lazy_stubs.s")));
#[path = "../../../preload/src/unwind.rs"]
mod unwind;

/// The one exported function: a hook's shape, its body contained.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn dropbehind_rust_floor(x: i32) -> i32 {
    std::panic::catch_unwind(|| {
        if x < 0 {
            panic!("negative: {x}")
        } else {
            x + 1
        }
    })
    .unwrap_or(-1)
}

extern "C" fn init() {
    let _ = std::panic::catch_unwind(|| std::panic::set_hook(Box::new(|_| {})));
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
