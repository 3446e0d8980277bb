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

// `scripts/startup-cost.sh --shaped-floor`: the same floor padded, segment by segment, to
// libdropbehind.so's size with bytes nothing runs or reads (the sizes come from the
// script), to tell what the library's size alone costs an exec from what its code does.
#[cfg(feature = "shaped")]
std::arch::global_asm!(
    ".pushsection .text.dropbehind_pad,\"axR\",@progbits",
    ".space {text}, 0xcc",
    ".popsection",
    ".pushsection .rodata.dropbehind_pad,\"aR\",@progbits",
    ".space {rodata}, 0",
    ".popsection",
    ".pushsection .data.dropbehind_pad,\"awR\",@progbits",
    ".space {data}, 0",
    ".popsection",
    ".pushsection .bss.dropbehind_pad,\"awR\",@nobits",
    ".space {bss}",
    ".popsection",
    text = const bytes(option_env!("DROPBEHIND_PAD_TEXT")),
    rodata = const bytes(option_env!("DROPBEHIND_PAD_RODATA")),
    data = const bytes(option_env!("DROPBEHIND_PAD_DATA")),
    bss = const bytes(option_env!("DROPBEHIND_PAD_BSS")),
);

/// A decimal byte count, or 0.
#[cfg(feature = "shaped")]
const fn bytes(v: Option<&str>) -> usize {
    let Some(s) = v else { return 0 };
    let b = s.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        assert!(
            b[i].is_ascii_digit(),
            "a padding size is a decimal byte count"
        );
        n = n * 10 + (b[i] - b'0') as usize;
        i += 1;
    }
    n
}
