/* A program that opens a big directory (a cold one starts the shim's prefetch threads),
 * then sandboxes itself: PR_SET_NO_NEW_PRIVS, then a seccomp filter on all its threads
 * (TSYNC) that kills the process on statx or getdents64, calls only the shim's threads
 * would still make. It then carries on for a while. Usage: dir_seccomp DIR. Prints how the
 * child ended. */
#define _GNU_SOURCE
#include <dirent.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: dir_seccomp DIR\n"); return 2; }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_statx, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getdents64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        DIR *d = opendir(argv[1]);
        if (!d || !readdir(d)) _exit(3);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(4);
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) _exit(5);
        usleep(500000); /* a while under the filter, as a program would */
        printf("still alive under the filter\n");
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(c, &status, 0);
    printf("child %s %d\n", WIFSIGNALED(status) ? "killed by" : "exit",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return 0;
}
