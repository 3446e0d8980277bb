/* Edge cases a preload must not change: bad pointers, odd counts, fds closed behind its
 * back, sockets, seccomp. Prints one line per case; run with and without the preload and
 * compare. Usage: edge_cases FILE (FILE: a few MiB, readable). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define BAD ((void *)16)
static void say(const char *what, long r) { printf("%-40s r=%ld errno=%d\n", what, r, r < 0 ? errno : 0); }

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: edge_cases FILE\n"); return 2; }
    const char *path = argv[1];
    static char buf[1 << 20];
    int fd = open(path, O_RDONLY);
    /* Make the fd a sequential stream first, so the shim is really engaged. */
    for (int i = 0; i < 3; i++) read(fd, buf, sizeof buf);
    errno = 0; say("readv bad iov", readv(fd, BAD, 2));
    errno = 0; say("preadv bad iov", preadv(fd, BAD, 2, 0));
    errno = 0; say("preadv2 bad iov", preadv2(fd, BAD, 2, 0, 0));
    int out = open("/tmp/edge_cases.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    errno = 0; say("copy_file_range bad off_in", copy_file_range(fd, BAD, out, NULL, 4096, 0));
    errno = 0; say("sendfile bad off", sendfile(out, fd, BAD, 4096));
    errno = 0; say("read huge count, bad buffer", read(fd, buf, (size_t)1 << 47));
    errno = 0; say("read SIZE_MAX", read(fd, buf, SIZE_MAX));
    errno = 0; say("pread negative offset", pread(fd, buf, 10, -4096));
    errno = 0; say("copy_file_range len 0", copy_file_range(fd, NULL, out, NULL, 0, 0));
    errno = 0; say("copy_file_range bad flags", copy_file_range(fd, NULL, out, NULL, 4096, 1));
    /* A single copy call asking for exactly the file's size into a socket: never shortened. */
    struct stat st; fstat(fd, &st);
    int sv[2]; socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    int big = 8 << 20; setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    fflush(stdout);
    pid_t drain = fork();
    if (drain == 0) { close(sv[0]); while (read(sv[1], buf, sizeof buf) > 0) {} _exit(0); }
    close(sv[1]);
    off_t o = 0; size_t want = st.st_size < (2 << 20) ? st.st_size : (2 << 20);
    errno = 0; say("sendfile to socket, one call", sendfile(sv[0], fd, &o, want));
    close(sv[0]); waitpid(drain, NULL, 0);
    /* An fd closed behind the shim's back, its number reused by a pipe. */
    int f2 = open(path, O_RDONLY);
    for (int i = 0; i < 3; i++) read(f2, buf, 65536);
    syscall(SYS_close, f2);
    int p[2]; pipe(p);
    write(p[1], "hello", 5);
    errno = 0; long r = read(p[0], buf, 100);
    printf("%-40s r=%ld errno=%d fd=%d\n", "pipe on a recycled fd number", r, errno, p[0]);
    close(p[0]); close(p[1]);
    /* closefrom with a negative bound, then fds keep working. */
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        int keep = dup2(fd, 100);
        (void)keep;
        int q[2]; pipe(q); write(q[1], "x", 1);
        errno = 0; long rr = read(q[0], buf, 1);
        printf("%-40s r=%ld errno=%d\n", "child: pipe read before closefrom", rr, errno);
        fflush(stdout);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    /* Strict seccomp after a stream started: only read/write/exit are allowed now. */
    fflush(stdout);
    c = fork();
    if (c == 0) {
        int s = open(path, O_RDONLY);
        read(s, buf, 65536); read(s, buf, 65536);
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) _exit(3);
        long total = 0, n;
        while ((n = read(s, buf, sizeof buf)) > 0) total += n;
        char line[100];
        int len = snprintf(line, sizeof line, "%-40s total=%ld\n", "strict seccomp: rest of the file", total + 131072);
        write(1, line, len);
        syscall(SYS_exit, 0);
    }
    int status; waitpid(c, &status, 0);
    printf("%-40s %s %d\n", "strict seccomp child", WIFSIGNALED(status) ? "killed by" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    unlink("/tmp/edge_cases.out");
    return 0;
}
