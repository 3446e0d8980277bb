/* stdio copier for the tests: fread/fwrite (or fgets/fputs with -l) from IN to OUT,
 * through glibc's FILE buffers, whose reads and writes the preload can't see directly. */
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int lines = argc > 1 && strcmp(argv[1], "-l") == 0;
    if (argc != 3 + lines) { fprintf(stderr, "usage: stdio_copy [-l] IN OUT\n"); return 2; }
    FILE *in = fopen(argv[1 + lines], "rb"), *out = fopen(argv[2 + lines], "wb");
    if (!in || !out) { perror("fopen"); return 1; }
    static char buf[65536];
    if (lines) {
        while (fgets(buf, sizeof buf, in)) fputs(buf, out);
    } else {
        size_t n;
        while ((n = fread(buf, 1, 32768, in)) > 0) fwrite(buf, 1, n, out);
    }
    if (ferror(in) || fclose(out) != 0) { perror("copy"); return 1; }
    fclose(in);
    return 0;
}
