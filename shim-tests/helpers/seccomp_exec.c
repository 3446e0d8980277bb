/* Runs a command already under a seccomp filter: PR_SET_NO_NEW_PRIVS, then a filter that
 * kills the process on xfs's single-inode bulkstat ioctl and on setpriority (calls the
 * shim makes only for itself) and allows everything else; then execs the command, which
 * keeps the filter.
 * A service sandboxed before it starts looks like this. Usage: seccomp_exec CMD [ARG...]. */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* _IOWR('X', 102, struct xfs_fsop_bulkreq): XFS_IOC_FSBULKSTAT_SINGLE on 64-bit. */
#define BULKSTAT_SINGLE 0xC0205866u

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: seccomp_exec CMD [ARG...]\n"); return 2; }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setpriority, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 2),
        /* The request's low 32 bits (x86-64 is little-endian). */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, BULKSTAT_SINGLE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) { perror("no_new_privs"); return 4; }
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) { perror("seccomp"); return 5; }
    execvp(argv[1], argv + 1);
    perror("execvp");
    return 127;
}
