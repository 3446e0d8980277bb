// A thread cancelled while blocked in read() (the shim's hook) on an empty pipe: glibc's
// forced unwind runs through the hook's frame, and the thread's cleanup handler must run.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int p[2];
static int cleaned;

static void cleanup(void *a) { (void)a; cleaned = 1; }

static void *reader(void *a) {
    char c;
    (void)a;
    pthread_cleanup_push(cleanup, 0);
    if (read(p[0], &c, 1) < 0) perror("read");
    pthread_cleanup_pop(0);
    return 0;
}

int main(void) {
    pthread_t t;
    void *r;
    if (pipe(p) || pthread_create(&t, 0, reader, 0)) return 2;
    usleep(100000);
    pthread_cancel(t);
    pthread_join(t, &r);
    printf("cancelled %d, cleanup %d\n", r == PTHREAD_CANCELED, cleaned);
    return 0;
}
