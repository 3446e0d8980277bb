/* A program that writes a file (its windows go to the shim's writeback helper), then
 * sandboxes itself a moment later: PR_SET_NO_NEW_PRIVS, then a seccomp filter on all its
 * threads (TSYNC) that kills the process on the calls only the helper would still make
 * (nanosleep, madvise: a thread's exit, sync_file_range, fadvise64). Each of 16 children
 * waits a little longer after its writes (0-6 ms, busy, no system call), so that some
 * sandbox themselves while the helper is idle, and some while it still works. Usage:
 * wb_seccomp DIR. Prints how many children ended well. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* vDSO: no system call */
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void spin(double s) {
    double end = now() + s;
    while (now() < end) {
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: wb_seccomp DIR\n"); return 2; }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_nanosleep, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sync_file_range, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fadvise64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    static char buf[1 << 20];
    memset(buf, 'x', sizeof buf);
    char path[4096];
    int good = 0;
    for (int i = 0; i < 16; i++) {
        snprintf(path, sizeof path, "%s/wb_seccomp.%d", argv[1], i);
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            for (int k = 0; k < 6; k++)
                if (write(fd, buf, sizeof buf) != sizeof buf) _exit(3);
            spin(0.0004 * i);
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(4);
            if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) _exit(5);
            spin(1.2); /* a while under the filter, longer than a helper's idle sleep (1 s) */
            _exit(0);
        }
        int status;
        waitpid(c, &status, 0);
        unlink(path);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) good++;
        else printf("child %d %s %d\n", i, WIFSIGNALED(status) ? "killed by" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    printf("%d of 16 children ended well\n", good);
    return 0;
}
