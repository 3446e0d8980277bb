//! libdropbehind.so, the library a process preloads: a front of a few kilobytes that maps
//! the engine (libdropbehind_engine.so, in the same directory) only once the process does
//! work the engine acts on, and until then hands every call straight to the next library.
//!
//! Why: every process of a wrapped job maps the preload, and most do nothing the shim acts
//! on (`true`, `basename`, a shell's subshells). Mapping the engine at exec cost each of
//! them 2-3% of an exec over an empty library, and the cost came with what it maps, not with
//! what it runs (bench/results/overhead-i16.md); this front costs what an empty library
//! does.
//!
//! Sections:
//! - the hooks: one trampoline per exported name, `jmp` through its slot; an empty slot
//!   goes to `resolve` (the registers saved and restored around it, as a lazy PLT entry
//!   does), which fills the slot with the engine's function or the real one;
//! - what loads the engine (docs/ARCHITECTURE.md, "The front"): an open of any kind, a
//!   stdio or directory stream opened, a file mapped, an in-kernel copy, fadvise; at start
//!   already when a DROPBEHIND_ variable is set or fd 0, 1 or 2 is a regular file. Reads,
//!   writes, closes and stats never load it: they are the calls signal handlers make;
//! - where it is not loaded: in a vfork child (the parent's memory: the engine would be
//!   set up for a process about to exec; told by a pid no fork handler recorded and kcmp,
//!   `own_process`), in an open while the signal mask differs from
//!   the one at start (perhaps a signal handler, which must not enter dlopen: 16 such opens
//!   at most), and after prctl(PR_SET_NO_NEW_PRIVS or PR_SET_SECCOMP): a sandbox may be
//!   next, as the engine itself stops there;
//! - the engine's real functions come from here (`dropbehind_front_next`): looked up
//!   from the engine, RTLD_NEXT would skip every preloaded library.
//!
//! x86_64 only: the trampolines are assembly. Elsewhere the engine is the preload itself.

#![cfg_attr(panic = "abort", no_std)]
// The trampolines are x86_64 assembly: elsewhere the crate is empty, and `make build`
// installs the engine as libdropbehind.so.
#![cfg(target_arch = "x86_64")]

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use dropbehind_bare::{atomic_enum, environment_entry, environment_has, inline_name};

#[cfg(panic = "abort")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Nothing here can panic (no indexing, no arithmetic that overflows); were it ever
    // to, a trap rather than a hang.
    // SAFETY: an undefined instruction: the process stops with SIGILL.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}

/// What a hook's first call decides, by the name it stands in for.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// An open of a path (async-signal-safe: the signal mask is checked first).
    Open,
    /// A stream opened, a copy between fds, advice: loads the engine.
    Trigger,
    /// mmap: loads the engine for a file mapping only (allocators map anonymous memory,
    /// and may do so from inside dlopen's own malloc).
    Map,
    /// prctl: a sandbox may follow; the engine is never loaded after it.
    Prctl,
    /// Everything else: the engine if it is loaded, else the real function.
    Pass,
}

/// What a name answers when the next library does not have it (a program linked against a
/// newer libc than the one it runs with): ENOSYS, the way the function reports failure.
#[derive(Clone, Copy)]
enum Fail {
    MinusOne,
    Null,
    /// posix_fadvise, posix_madvise: the error number is the result.
    Number,
}

atomic_enum! {
    /// The engine's state for this process, in `ENGINE`.
    enum Engine in AtomicEngine(u8 as AtomicU8) {
        /// Never to be loaded here (a sandbox may follow, or the load failed): real
        /// functions.
        Off = 3,
        Unloaded = 0,
        Loading = 1,
        Loaded = 2,
    }
}

static ENGINE: AtomicEngine = AtomicEngine::new(Engine::Unloaded);

fn engine() -> Engine {
    ENGINE.load(Ordering::SeqCst)
}

fn move_engine(from: Engine, to: Engine) -> bool {
    ENGINE
        .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Room for the longest name and its NUL, inline: a pointer per name would be a relocation
/// the loader writes at every start.
const NAME: usize = 24;

macro_rules! hooks {
    ($($i:literal $name:ident $kind:ident $fail:ident,)*) => {
        const HOOKS: usize = [$($i),*].len();
        /// Where each trampoline jumps: empty until its first call decides.
        static SLOTS: [AtomicUsize; HOOKS] = [const { AtomicUsize::new(0) }; HOOKS];
        /// The next library's functions, looked up once (0: not yet, 1: missing).
        static REALS: [AtomicUsize; HOOKS] = [const { AtomicUsize::new(0) }; HOOKS];
        static NAMES: [[u8; NAME]; HOOKS] = [$(inline_name(concat!(stringify!($name), "\0").as_bytes())),*];
        static KINDS: [Kind; HOOKS] = [$(Kind::$kind),*];
        static FAILS: [Fail; HOOKS] = [$(Fail::$fail),*];
        $(
            /// # Safety
            /// The C library's function of this name, called as it is.
            #[unsafe(no_mangle)]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name() {
                // r11 is neither an argument nor preserved: the arguments, the stack and
                // %al (a variadic call's count) reach the function untouched.
                core::arch::naked_asm!(
                    "mov r11, qword ptr [rip + {slots} + {offset}]",
                    "test r11, r11",
                    "jz 2f",
                    "jmp r11",
                    "2:",
                    "mov r11d, {index}",
                    "jmp {first}",
                    slots = sym SLOTS,
                    offset = const $i * 8,
                    index = const $i,
                    first = sym first_call,
                )
            }
        )*
    };
}

// By kind; the index is the slot's.
hooks! {
    0 __open64_2 Open MinusOne,
    1 __open_2 Open MinusOne,
    2 __openat64_2 Open MinusOne,
    3 __openat_2 Open MinusOne,
    4 creat Open MinusOne,
    5 creat64 Open MinusOne,
    6 open Open MinusOne,
    7 open64 Open MinusOne,
    8 openat Open MinusOne,
    9 openat64 Open MinusOne,
    10 copy_file_range Trigger MinusOne,
    11 fdopen Trigger Null,
    12 fdopendir Trigger Null,
    13 fopen Trigger Null,
    14 fopen64 Trigger Null,
    15 freopen Trigger Null,
    16 freopen64 Trigger Null,
    17 opendir Trigger Null,
    18 posix_fadvise Trigger Number,
    19 posix_fadvise64 Trigger Number,
    20 sendfile Trigger MinusOne,
    21 sendfile64 Trigger MinusOne,
    22 splice Trigger MinusOne,
    23 mmap Map MinusOne,
    24 mmap64 Map MinusOne,
    25 prctl Prctl MinusOne,
    26 __fread_chk Pass Null,
    27 __fread_unlocked_chk Pass Null,
    28 __pread64_chk Pass MinusOne,
    29 __pread_chk Pass MinusOne,
    30 __read_chk Pass MinusOne,
    31 close Pass MinusOne,
    32 close_range Pass MinusOne,
    33 closedir Pass MinusOne,
    34 closefrom Pass MinusOne,
    35 dup Pass MinusOne,
    36 dup2 Pass MinusOne,
    37 dup3 Pass MinusOne,
    38 fclose Pass MinusOne,
    39 fcntl Pass MinusOne,
    40 fcntl64 Pass MinusOne,
    41 fgets Pass Null,
    42 fgets_unlocked Pass Null,
    43 fputs Pass MinusOne,
    44 fputs_unlocked Pass MinusOne,
    45 fread Pass Null,
    46 fread_unlocked Pass Null,
    47 fstatat Pass MinusOne,
    48 fstatat64 Pass MinusOne,
    49 ftruncate Pass MinusOne,
    50 ftruncate64 Pass MinusOne,
    51 fwrite Pass Null,
    52 fwrite_unlocked Pass Null,
    53 getdelim Pass MinusOne,
    54 getline Pass MinusOne,
    55 lseek Pass MinusOne,
    56 lseek64 Pass MinusOne,
    57 madvise Pass MinusOne,
    58 mremap Pass MinusOne,
    59 munmap Pass MinusOne,
    60 posix_madvise Pass Number,
    61 pread Pass MinusOne,
    62 pread64 Pass MinusOne,
    63 preadv Pass MinusOne,
    64 preadv2 Pass MinusOne,
    65 preadv64 Pass MinusOne,
    66 preadv64v2 Pass MinusOne,
    67 pwrite Pass MinusOne,
    68 pwrite64 Pass MinusOne,
    69 pwritev Pass MinusOne,
    70 pwritev2 Pass MinusOne,
    71 pwritev64 Pass MinusOne,
    72 pwritev64v2 Pass MinusOne,
    73 read Pass MinusOne,
    74 readv Pass MinusOne,
    75 statx Pass MinusOne,
    76 unlinkat Pass MinusOne,
    77 write Pass MinusOne,
    78 writev Pass MinusOne,
}

/// The caller's registers as `first_call` pushed them, lowest address first.
#[repr(C)]
struct Saved {
    index: usize,
    rax: usize,
    r9: usize,
    r8: usize,
    rcx: usize,
    rdx: usize,
    rsi: usize,
    rdi: usize,
}

/// A trampoline's way in while its slot is empty: the argument registers kept across
/// `resolve`, then a jump to the function it chose, as if the program had called it.
/// Entered with the stack as the program's call left it (8 mod 16): the frame pointer and
/// eight registers make it 0 at the call.
#[unsafe(naked)]
unsafe extern "C" fn first_call() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "push rdi",
        "push rsi",
        "push rdx",
        "push rcx",
        "push r8",
        "push r9",
        "push rax",
        "push r11",
        "mov rdi, rsp",
        "call {resolve}",
        "mov r11, rax",
        "pop r10",
        "pop rax",
        "pop r9",
        "pop r8",
        "pop rcx",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "pop rbp",
        "jmp r11",
        resolve = sym resolve,
    )
}

/// The function hook `s.index` is to run this time, stored in its slot when the answer
/// holds from now on.
extern "C" fn resolve(s: &Saved) -> usize {
    // What is done here (dlsym, dlopen and the engine's start, raw syscalls) may leave
    // errno changed; the program's call must find it as the program left it.
    let errno = sys::errno();
    let f = choose(s);
    sys::set_errno(errno);
    f
}

fn choose(s: &Saved) -> usize {
    let i = s.index;
    let (Some(&kind), Some(slot)) = (KINDS.get(i), SLOTS.get(i)) else {
        return fail_min1 as *const () as usize;
    };
    // prctl's option is an int: the register's upper half is not the caller's to set.
    let option = s.rdi as u32 as usize;
    if kind == Kind::Prctl
        && (option == PR_SET_NO_NEW_PRIVS || option == PR_SET_SECCOMP)
        && engine() != Engine::Loaded
        // A vfork child's sandbox is its own (it is about to exec), not its parent's.
        && own_process() != Some(false)
    {
        // Seen by a load under way too (`load_engine`).
        SANDBOXED.store(true, Ordering::SeqCst);
        move_engine(Engine::Unloaded, Engine::Off);
    }
    if engine() == Engine::Unloaded {
        let load = match kind {
            Kind::Open => may_load(Call::SignalSafe),
            Kind::Trigger => may_load(Call::Other),
            Kind::Map => file_mapping(s) && may_load(Call::Other),
            Kind::Prctl | Kind::Pass => false,
        };
        if load {
            load_engine();
        }
    }
    let state = engine();
    let (f, holds) = match state {
        Engine::Loaded => match engine_function(i) {
            Some(f) => (f, true),
            None => (real(i), true),
        },
        Engine::Off => (real(i), true),
        // Until the engine is loaded, a pass-through name keeps the real function (the
        // slots are emptied when it is); the others ask again at their next call.
        Engine::Unloaded => (real(i), kind == Kind::Pass),
        Engine::Loading => (real(i), false),
    };
    if holds {
        slot.store(f, Ordering::SeqCst);
        // A pass-through name's real function, kept while the engine was not loaded: had
        // the load emptied the slots just before this store, the slot would keep the real
        // function for good. The load moves the state before it empties them, so seeing
        // the state unmoved here means the emptying is still to come.
        if state == Engine::Unloaded && engine() != Engine::Unloaded {
            let _ = slot.compare_exchange(f, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
    f
}

const PR_SET_SECCOMP: usize = 22;
const PR_SET_NO_NEW_PRIVS: usize = 38;
const MAP_ANONYMOUS: usize = 0x20;

/// mmap(addr, len, prot, flags, fd, off): flags in rcx, fd in r8.
fn file_mapping(s: &Saved) -> bool {
    s.rcx & MAP_ANONYMOUS == 0 && (s.r8 as c_int) >= 0
}

#[derive(Clone, Copy, PartialEq)]
enum Call {
    /// May come from a signal handler (open): not while the signal mask is not the start's.
    SignalSafe,
    Other,
}

/// The process's pid at start, and in a fork's child (the at-fork handler): a pid that
/// differs is a vfork child's, or a child of a clone that ran no fork handlers.
static PID: AtomicI32 = AtomicI32::new(0);
/// A prctl that may precede a sandbox was seen: the engine is not to run.
static SANDBOXED: AtomicBool = AtomicBool::new(false);
/// The signal mask at start, and how many opens found another since.
static MASK: AtomicU64 = AtomicU64::new(0);
static OTHER_MASK: AtomicUsize = AtomicUsize::new(0);
const OTHER_MASK_OPENS: usize = 16;

/// Whether this is a process of its own: `Some(false)` for a vfork child, which shares its
/// parent's memory (a load there would set the engine up, threads and all, for a process
/// about to exec, in memory the parent goes on with), `None` when that can't be told.
fn own_process() -> Option<bool> {
    let pid = sys::getpid();
    if pid == PID.load(Ordering::Relaxed) {
        return Some(true);
    }
    // No fork handler ran for this pid: kcmp(KCMP_VM) with the parent says whether the
    // memory is shared. Refused (a seccomp filter, as containers have; no CONFIG_KCMP): not
    // known, and so not to be loaded.
    match sys::kcmp_vm(pid, sys::getppid()) {
        Ok(0) => Some(false),
        Ok(_) => {
            PID.store(pid, Ordering::Relaxed);
            Some(true)
        }
        Err(_) => None,
    }
}

/// Whether this call may load the engine now.
fn may_load(call: Call) -> bool {
    if own_process() != Some(true) {
        return false;
    }
    if call == Call::SignalSafe
        && sys::sigmask() != Some(MASK.load(Ordering::Relaxed))
        && OTHER_MASK.fetch_add(1, Ordering::Relaxed) < OTHER_MASK_OPENS
    {
        return false;
    }
    true
}

/// The engine's handle, once loaded.
static HANDLE: AtomicUsize = AtomicUsize::new(0);

const ENGINE_FILE: &[u8] = b"libdropbehind_engine.so\0";

/// dlopen of the engine beside this library, by one thread; the others run the real
/// functions meanwhile. Every slot is emptied after, to be filled again by the engine.
fn load_engine() {
    if !move_engine(Engine::Unloaded, Engine::Loading) {
        return;
    }
    let mut old = 0;
    // SAFETY: dlopen is no cancellation point, but the engine's constructor runs inside it:
    // a thread cancelled there would unwind through `first_call`, which has no unwind table.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let mut path = [0u8; 4096];
    let handle = match engine_path(&mut path) {
        // SAFETY: a NUL-terminated path; the engine's constructor is made for this (it
        // contains its own panics and keeps errno).
        Some(()) => unsafe { dlopen(path.as_ptr().cast(), RTLD_LAZY | RTLD_NODELETE) },
        None => core::ptr::null_mut(),
    };
    if handle.is_null() {
        // SAFETY: clears the failure's message (freed by the next dl call anyway).
        unsafe { dlerror() };
        ENGINE.store(Engine::Off, Ordering::SeqCst);
    } else {
        HANDLE.store(handle as usize, Ordering::Release);
        ENGINE.store(Engine::Loaded, Ordering::SeqCst);
        // A prctl during the load went to the real function, which the engine did not see:
        // it is not to run, then. (One after this store reaches the engine's own hook.)
        if SANDBOXED.load(Ordering::SeqCst) {
            ENGINE.store(Engine::Off, Ordering::SeqCst);
        }
    }
    // After the state moved: see `resolve`.
    for s in &SLOTS {
        s.store(0, Ordering::SeqCst);
    }
    // SAFETY: the state saved above.
    unsafe { pthread_setcancelstate(old, core::ptr::null_mut()) };
}

/// The working directory at start, where LD_PRELOAD named a library by a relative path:
/// the loader keeps that name, and the engine beside it is to be found from there even
/// after the program changed directory. Written once, by the constructor, before `CWD_LEN`.
struct Cwd(core::cell::UnsafeCell<[u8; 4096]>);
// SAFETY: written only by the constructor, before any thread could read it, and read only
// after `CWD_LEN` (Release, Acquire) says it was.
unsafe impl Sync for Cwd {}
static CWD: Cwd = Cwd(core::cell::UnsafeCell::new([0; 4096]));
static CWD_LEN: AtomicUsize = AtomicUsize::new(0);

/// Whether an LD_PRELOAD entry is a relative path (a bare name is searched for, and the
/// loader then keeps the path it found).
fn relative_preload() -> bool {
    let Some(v) = environment_entry(b"LD_PRELOAD=").and_then(|e| e.get(b"LD_PRELOAD=".len()..))
    else {
        return false;
    };
    v.split(|&b| b == b' ' || b == b':')
        .any(|e| e.first().is_some_and(|&b| b != b'/') && e.contains(&b'/'))
}

fn remember_cwd() {
    // SAFETY: the constructor, alone: nothing reads CWD before CWD_LEN is set.
    let buf = unsafe { &mut *CWD.0.get() };
    // getcwd(2) answers the length with its NUL.
    if let Ok(n) = sys::getcwd(buf) {
        CWD_LEN.store(n.saturating_sub(1), Ordering::Release);
    }
}

/// This library's directory and ENGINE_FILE, in `out`, NUL-terminated; a relative name
/// from the working directory at start, never from the present one (the program may have
/// moved to a directory where anybody can put a file of that name).
fn engine_path(out: &mut [u8; 4096]) -> Option<()> {
    let mut info = DlInfo {
        fname: core::ptr::null(),
        fbase: core::ptr::null_mut(),
        sname: core::ptr::null(),
        saddr: core::ptr::null_mut(),
    };
    // SAFETY: an address inside this library; dladdr fills `info`.
    if unsafe { dladdr(dropbehind_front_next as *const c_void, &mut info) } == 0
        || info.fname.is_null()
    {
        return None;
    }
    // SAFETY: dladdr gives the loader's name of the object, NUL-terminated, which lives as
    // long as the object.
    let me = unsafe { core::ffi::CStr::from_ptr(info.fname) }.to_bytes();
    let dir = me.get(..me.iter().rposition(|&b| b == b'/').map_or(0, |p| p + 1))?;
    let base: &[u8] = if me.first() == Some(&b'/') {
        &[]
    } else {
        let n = CWD_LEN.load(Ordering::Acquire);
        if n == 0 {
            return None;
        }
        // SAFETY: written before CWD_LEN, never again (`Cwd`).
        unsafe { &*CWD.0.get() }.get(..n)?
    };
    let mut at = 0;
    for part in [
        base,
        if base.is_empty() { &[][..] } else { b"/" },
        dir,
        ENGINE_FILE,
    ] {
        out.get_mut(at..at + part.len())?.copy_from_slice(part);
        at += part.len();
    }
    Some(())
}

/// The engine's function for hook `i`.
fn engine_function(i: usize) -> Option<usize> {
    let name = NAMES.get(i)?;
    // SAFETY: the engine's handle and a NUL-terminated name.
    let f = unsafe {
        dlsym(
            HANDLE.load(Ordering::Acquire) as *mut c_void,
            name.as_ptr().cast(),
        )
    };
    (!f.is_null()).then_some(f as usize)
}

/// The next library's function for hook `i`, or one that fails with ENOSYS.
fn real(i: usize) -> usize {
    let Some(cached) = REALS.get(i) else {
        return fail_min1 as *const () as usize;
    };
    let mut a = cached.load(Ordering::Acquire);
    if a == 0 {
        let f = NAMES
            .get(i)
            .map_or(core::ptr::null_mut(), |n| next(n.as_ptr().cast()));
        a = if f.is_null() { 1 } else { f as usize };
        cached.store(a, Ordering::Release);
    }
    if a != 1 {
        return a;
    }
    match FAILS.get(i) {
        Some(Fail::Null) => fail_null as *const () as usize,
        Some(Fail::Number) => fail_number as *const () as usize,
        _ => fail_min1 as *const () as usize,
    }
}

/// dlsym(RTLD_NEXT, name) as seen from this library: the definition after it in the
/// process's search order, skipping the front (and, were it in that order, the engine).
#[inline(never)]
fn next(name: *const c_char) -> *mut c_void {
    // SAFETY: a NUL-terminated name; RTLD_NEXT is taken relative to the caller, this
    // library (the result is used after the call, so it is no tail call from elsewhere).
    let f = unsafe { dlsym(RTLD_NEXT, name) };
    core::hint::black_box(f)
}

/// The real functions for the engine: dlsym(RTLD_NEXT) taken from the engine, loaded by
/// dlopen after the preloaded libraries, would skip them all and find libc's.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dropbehind_front_next(name: *const c_char) -> *mut c_void {
    next(name)
}

extern "C" fn fail_min1() -> isize {
    sys::set_errno(sys::ENOSYS);
    -1
}

extern "C" fn fail_null() -> usize {
    sys::set_errno(sys::ENOSYS);
    0
}

extern "C" fn fail_number() -> c_int {
    sys::ENOSYS
}

/// At start: the pid and signal mask the loads are checked against, and the engine at once
/// where it will surely be wanted or must speak (its variables are read and warned about
/// at its start).
extern "C" fn init() {
    let errno = sys::errno();
    PID.store(sys::getpid(), Ordering::Relaxed);
    // SAFETY: glibc's entry behind pthread_atfork, given this library's handle; the
    // handler is a plain function that lives as long as the library (never unloaded).
    unsafe { __register_atfork(None, None, Some(after_fork_child), &raw const __dso_handle) };
    MASK.store(sys::sigmask().unwrap_or(0), Ordering::Relaxed);
    if relative_preload() {
        remember_cwd();
    }
    if environment_has(b"DROPBEHIND_") || (0..3).any(sys::is_regular_file) {
        load_engine();
    }
    sys::set_errno(errno);
}

/// A fork's child is a process of its own (vfork and posix_spawn run no fork handlers).
extern "C" fn after_fork_child() {
    PID.store(sys::getpid(), Ordering::Relaxed);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

const RTLD_LAZY: c_int = 1;
const RTLD_NODELETE: c_int = 0x1000;
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
const PTHREAD_CANCEL_DISABLE: c_int = 1;

#[link(name = "c")]
unsafe extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
    fn __errno_location() -> *mut c_int;
    static __dso_handle: c_void;
    fn __register_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
        dso: *const c_void,
    ) -> c_int;
}

/// Raw syscalls: no libc symbol to bind at start for them.
mod sys {
    use core::ffi::c_int;

    pub const ENOSYS: c_int = 38;

    /// # Safety
    /// A syscall that only reads or writes the memory its arguments name.
    unsafe fn syscall(nr: usize, a: usize, b: usize, c: usize, d: usize, e: usize) -> isize {
        let r: isize;
        // SAFETY: the kernel's syscall convention; rcx and r11 are clobbered by `syscall`.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => r,
                in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") e,
                lateout("rcx") _, lateout("r11") _,
                options(nostack),
            );
        }
        r
    }

    fn result(r: isize) -> Result<usize, c_int> {
        if (-4095..0).contains(&r) {
            Err(-r as c_int)
        } else {
            Ok(r as usize)
        }
    }

    pub fn getpid() -> i32 {
        // SAFETY: no arguments.
        unsafe { syscall(39, 0, 0, 0, 0, 0) as i32 }
    }

    pub fn getppid() -> i32 {
        // SAFETY: no arguments.
        unsafe { syscall(110, 0, 0, 0, 0, 0) as i32 }
    }

    /// getcwd(2): the length written, its NUL included.
    pub fn getcwd(buf: &mut [u8]) -> Result<usize, c_int> {
        // SAFETY: getcwd writes at most `buf.len()` bytes into `buf`.
        result(unsafe { syscall(79, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0) })
    }

    /// kcmp(KCMP_VM): 0 when the two processes share their memory.
    pub fn kcmp_vm(a: i32, b: i32) -> Result<usize, c_int> {
        // SAFETY: pids only.
        result(unsafe { syscall(312, a as usize, b as usize, 1, 0, 0) })
    }

    /// This thread's signal mask.
    pub fn sigmask() -> Option<u64> {
        let mut set = 0u64;
        // SAFETY: rt_sigprocmask(SIG_BLOCK, NULL, &set, 8) writes the 8 bytes of `set`.
        let r = unsafe { syscall(14, 0, 0, &raw mut set as usize, 8, 0) };
        result(r).ok().map(|_| set)
    }

    pub fn is_regular_file(fd: c_int) -> bool {
        // struct stat on x86_64: st_mode is the u32 at byte 24.
        let mut st = [0u64; 18];
        // SAFETY: fstat writes one struct stat (144 bytes) into `st`.
        let r = unsafe { syscall(5, fd as usize, st.as_mut_ptr() as usize, 0, 0, 0) };
        result(r).is_ok() && (st[3] as u32) & 0o170000 == 0o100000
    }

    pub fn errno() -> c_int {
        // SAFETY: glibc's errno of this thread.
        unsafe { *super::__errno_location() }
    }

    pub fn set_errno(e: c_int) {
        // SAFETY: glibc's errno of this thread.
        unsafe { *super::__errno_location() = e };
    }
}
