//! What both preloaded libraries share, without std (the front has none): states kept in
//! atomics, typed (`atomic_enum!`: a call site reads `Managed::Tracked`, never a bare
//! integer), names kept inline in statics, and the environment read raw (before main,
//! without getenv's lock or copies).

#![no_std]

use core::ffi::c_char;

/// `atomic_enum!(pub enum Name in AtomicName(u8 as AtomicU8) { A = 0, B = 1, })`: the
/// enum (the first variant is what an impossible raw value reads as) and its atomic.
#[macro_export]
macro_rules! atomic_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident in $atomic:ident($int:ty as $raw:ty) {
            $(#[$fmeta:meta])* $first:ident = $fnum:literal,
            $($(#[$vmeta:meta])* $variant:ident = $num:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr($int)]
        $vis enum $name {
            $(#[$fmeta])* $first = $fnum,
            $($(#[$vmeta])* $variant = $num,)*
        }

        impl $name {
            #[inline]
            const fn from_raw(raw: $int) -> $name {
                match raw {
                    $($num => $name::$variant,)*
                    _ => $name::$first,
                }
            }
        }

        #[doc = concat!("An atomic `", stringify!($name), "`.")]
        $vis struct $atomic($raw);

        #[allow(dead_code)]
        impl $atomic {
            pub const fn new(v: $name) -> $atomic {
                $atomic(<$raw>::new(v as $int))
            }
            #[inline]
            pub fn load(&self, order: ::core::sync::atomic::Ordering) -> $name {
                $name::from_raw(self.0.load(order))
            }
            #[inline]
            pub fn store(&self, v: $name, order: ::core::sync::atomic::Ordering) {
                self.0.store(v as $int, order)
            }
            #[inline]
            pub fn swap(&self, v: $name, order: ::core::sync::atomic::Ordering) -> $name {
                $name::from_raw(self.0.swap(v as $int, order))
            }
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $name,
                new: $name,
                success: ::core::sync::atomic::Ordering,
                failure: ::core::sync::atomic::Ordering,
            ) -> Result<$name, $name> {
                self.0
                    .compare_exchange(current as $int, new as $int, success, failure)
                    .map($name::from_raw)
                    .map_err($name::from_raw)
            }
        }
    };
}

/// `bytes`, zero-padded, in an array of `N`: a name kept inline in a static (a pointer
/// there would be a relocation the loader writes at every start). Longer than `N`: a
/// compile-time error where it is used to build a static.
pub const fn inline_name<const N: usize>(bytes: &[u8]) -> [u8; N] {
    assert!(bytes.len() <= N, "a name longer than its inline room");
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// The first environment string that starts with `prefix`, whole ("NAME=value").
///
/// For constructors: environ is read as it is, which no other thread may change meanwhile.
pub fn environment_entry(prefix: &[u8]) -> Option<&'static [u8]> {
    // SAFETY: environ is null or a null-terminated array of NUL-terminated strings (a
    // constructor runs before the program could change it from another thread); each
    // string is read no further than its first byte that differs from `prefix`, at worst
    // its NUL, and the one returned lives as long as the process keeps its environment.
    unsafe {
        let mut e = environ;
        while !e.is_null() && !(*e).is_null() {
            let v = (*e).cast::<u8>();
            if prefix.iter().enumerate().all(|(i, &b)| *v.add(i) == b) {
                return Some(core::ffi::CStr::from_ptr(v.cast()).to_bytes());
            }
            e = e.add(1);
        }
    }
    None
}

/// Whether some environment variable's name starts with `prefix`.
pub fn environment_has(prefix: &[u8]) -> bool {
    environment_entry(prefix).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_zero_padded() {
        assert_eq!(inline_name::<6>(b"read\0"), *b"read\0\0");
    }

    #[test]
    fn the_environment_is_read_as_set() {
        // The test binary's own environment: PATH is set wherever cargo runs.
        let path = environment_entry(b"PATH=").expect("PATH in the environment");
        assert!(path.starts_with(b"PATH="));
        assert!(environment_has(b"PAT"));
        assert!(!environment_has(b"DROPBEHIND_NO_SUCH_VARIABLE_AT_ALL="));
    }
}
