//! States kept in atomics, typed: `atomic_enum!` declares an enum and an atomic holding
//! one of its values, so that a call site reads `Managed::Tracked`, never a bare integer.

/// `atomic_enum!(pub enum Name in AtomicName(u8 as AtomicU8) { A = 0, B = 1, })`: the
/// enum (the first variant is what an impossible raw value reads as) and its atomic.
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
            pub fn load(&self, order: std::sync::atomic::Ordering) -> $name {
                $name::from_raw(self.0.load(order))
            }
            #[inline]
            pub fn store(&self, v: $name, order: std::sync::atomic::Ordering) {
                self.0.store(v as $int, order)
            }
            #[inline]
            pub fn swap(&self, v: $name, order: std::sync::atomic::Ordering) -> $name {
                $name::from_raw(self.0.swap(v as $int, order))
            }
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $name,
                new: $name,
                success: std::sync::atomic::Ordering,
                failure: std::sync::atomic::Ordering,
            ) -> Result<$name, $name> {
                self.0
                    .compare_exchange(current as $int, new as $int, success, failure)
                    .map($name::from_raw)
                    .map_err($name::from_raw)
            }
        }
    };
}
