//! prctl: a program about to sandbox itself with seccomp gets no more syscalls from the
//! shim. Filters are installed after PR_SET_NO_NEW_PRIVS (unprivileged programs, libseccomp)
//! or with PR_SET_SECCOMP; an fstat or cachestat the filter didn't expect could kill the
//! program. (A privileged program calling the seccomp syscall directly is not seen.)

use crate::engine;
use libc::{c_int, c_ulong};

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn prctl(
    option: c_int,
    a2: c_ulong,
    a3: c_ulong,
    a4: c_ulong,
    a5: c_ulong,
) -> c_int {
    if option == libc::PR_SET_NO_NEW_PRIVS || option == libc::PR_SET_SECCOMP {
        crate::entry::even_inside((), engine::disable);
    }
    call_real!(PRCTL(option, a2, a3, a4, a5) or enosys)
}
