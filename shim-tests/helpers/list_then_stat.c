// Lists a directory to its end, keeping the stream open, then stats every entry in inode
// order before it closes the stream: the pattern of fts (du, find) on a directory it
// reads in one go. Prints the count and the sum of the sizes. A second argument, seconds,
// is a pause between the listing and the stats (the prefetch's index walk then has the
// directory to itself); a negative one holds the stream open that long and stats nothing
// (what the prefetch alone brings in, for a program run after it to find). A third, N,
// lists at most N entries at a time, pausing and statting each such part before it reads
// on, as fts does with at most 100,000 (0: all at once). A fourth, microseconds, is slept
// after every 100 entries read past the first 2,000: fts's work per entry, which keeps
// `du` reading past the prefetch's listing of 100,000 entries, on a directory small
// enough for a test.
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "entries.h"

int main(int argc, char **argv) {
    DIR *d = argc > 1 ? opendir(argv[1]) : NULL;
    if (!d) { perror("opendir"); return 2; }
    size_t part = argc > 3 ? (size_t)atol(argv[3]) : 0, total = 0, cap = 1024;
    useconds_t per100 = argc > 4 ? (useconds_t)atol(argv[4]) : 0;
    struct ent *e = malloc(cap * sizeof *e);
    long long sum = 0;
    for (int more = 1; more;) {
        size_t n = 0;
        while (!part || n < part) {
            struct dirent *de = readdir(d);
            if (!de) { more = 0; break; }
            if (n == cap) e = realloc(e, (cap *= 2) * sizeof *e);
            e[n].ino = de->d_ino;
            snprintf(e[n].name, sizeof e[n].name, "%s", de->d_name);
            n++;
            if (per100 && total + n > 2000 && (total + n) % 100 == 0) usleep(per100);
        }
        int pause = argc > 2 ? atoi(argv[2]) : 0;
        if (pause) sleep(pause < 0 ? -pause : pause);
        if (pause < 0) { total += n; continue; }
        qsort(e, n, sizeof *e, by_ino);
        for (size_t i = 0; i < n; i++) {
            struct stat st;
            if (fstatat(dirfd(d), e[i].name, &st, AT_SYMLINK_NOFOLLOW) == 0) sum += st.st_size;
        }
        total += n;
    }
    closedir(d);
    printf("%zu entries, %lld bytes\n", total, sum);
    return 0;
}
