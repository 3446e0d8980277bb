/* When the front (libdropbehind.so) maps the engine: after each step of a scenario, prints
 * "engine" or "front" (whether libdropbehind_engine.so is in this process's maps), one word
 * per step on one line. The maps are read by raw syscalls, which no hook sees.
 *
 *   front_load idle            nothing, then a write to /dev/null and an anonymous mmap
 *   front_load open FILE       an open
 *   front_load map FILE        a file opened by raw syscall, then mapped
 *   front_load vfork FILE      a vfork child's open, then the parent's
 *   front_load prctl FILE      prctl(PR_SET_NO_NEW_PRIVS), then an open
 *   front_load handler FILE    an open in a signal handler, then one outside it
 *   front_load errno FILE      errno set, then a first close, lseek and open that succeed:
 *                              prints "kept" or "changed" after each instead
 *   front_load vfork-prctl FILE  a vfork child's prctl(PR_SET_NO_NEW_PRIVS), then the
 *                              parent's open
 *   front_load vfork-nokcmp FILE  the same as vfork, under a seccomp filter (installed by
 *                              raw syscalls) that fails kcmp with EPERM
 *   front_load chdir DIR FILE  chdir(DIR), then an open of FILE (an absolute path)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <unistd.h>

static const char *file;

static void step(void)
{
    static char buf[1 << 16];
    int fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY);
    size_t n = 0;
    long r;
    while (fd >= 0 && n < sizeof buf - 1 && (r = syscall(SYS_read, fd, buf + n, sizeof buf - 1 - n)) > 0)
        n += r;
    buf[n] = 0;
    syscall(SYS_close, fd);
    printf("%s ", strstr(buf, "libdropbehind_engine.so") ? "engine" : "front");
}

static void open_close(void)
{
    int fd = open(file, O_RDONLY);
    if (fd >= 0)
        close(fd);
}

/* A vfork child's open, the parent waiting for its exit. */
static void vfork_open(void)
{
    pid_t pid = vfork();
    if (pid == 0) {
        open_close();
        _exit(0);
    }
    waitpid(pid, NULL, 0);
}

static void on_signal(int sig)
{
    (void)sig;
    open_close();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "idle";
    file = argc > 2 ? argv[2] : "/dev/null";
    if (!strcmp(mode, "idle")) {
        step();
        int fd = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_WRONLY);
        write(fd, "x", 1);
        void *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(p, 1 << 20);
        step();
    } else if (!strcmp(mode, "open")) {
        step();
        open_close();
        step();
    } else if (!strcmp(mode, "map")) {
        int fd = syscall(SYS_openat, AT_FDCWD, file, O_RDONLY);
        step();
        void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        step();
        if (p != MAP_FAILED)
            munmap(p, 4096);
    } else if (!strcmp(mode, "vfork")) {
        vfork_open();
        step();
        open_close();
        step();
    } else if (!strcmp(mode, "vfork-prctl")) {
        pid_t pid = vfork();
        if (pid == 0) {
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            _exit(0);
        }
        waitpid(pid, NULL, 0);
        open_close();
        step();
    } else if (!strcmp(mode, "vfork-nokcmp")) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kcmp, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {sizeof f / sizeof f[0], f};
        syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) {
            printf("no-seccomp\n");
            return 0;
        }
        vfork_open();
        step();
    } else if (!strcmp(mode, "chdir")) {
        if (chdir(argv[2]))
            return 2;
        file = argv[3];
        open_close();
        step();
    } else if (!strcmp(mode, "prctl")) {
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        open_close();
        step();
    } else if (!strcmp(mode, "handler")) {
        signal(SIGUSR1, on_signal);
        raise(SIGUSR1);
        step();
        open_close();
        step();
    } else if (!strcmp(mode, "errno")) {
        int fd = syscall(SYS_openat, AT_FDCWD, file, O_RDONLY);
        errno = EBADMSG;
        close(fd);
        printf("%s ", errno == EBADMSG ? "kept" : "changed");
        fd = syscall(SYS_openat, AT_FDCWD, file, O_RDONLY);
        errno = EBADMSG;
        lseek(fd, 0, SEEK_SET);
        printf("%s ", errno == EBADMSG ? "kept" : "changed");
        errno = EBADMSG;
        fd = open(file, O_RDONLY);
        printf("%s ", errno == EBADMSG && fd >= 0 ? "kept" : "changed");
        step();
    } else {
        fprintf(stderr, "front_load: unknown mode %s\n", mode);
        return 2;
    }
    printf("\n");
    return 0;
}
