// Directory entries kept by name and inode number, sorted by inode as fts sorts a big
// directory's entries before it stats them (list_then_stat.c, dup_statx.c).
#include <dirent.h>
#include <stdlib.h>

struct ent { ino_t ino; char name[256]; };

static int by_ino(const void *a, const void *b) {
    ino_t x = ((const struct ent *)a)->ino, y = ((const struct ent *)b)->ino;
    return x < y ? -1 : x > y;
}
