#!/usr/bin/env python3
"""What writing a tree of small files back one file at a time costs on this disk.

    scripts/tree-write-floor.py [--files N] [--kib K] [--reps R] [--batches B,...] DIR

Writes N files of K KiB (100 directories) under DIR three ways, caches dropped before
each, interleaved, R rounds, and prints the time until on disk (the writes, then `sync`):
  merged   plain writes, then one sync: the flusher's pass merges neighbours
  per-file sync_file_range(WRITE) on each file as it is closed, never waited for
           (what any bounded copy must do for a file it cannot keep dirty)
  helper   the same calls from a second thread, on a duplicate of each fd, as the
           shim's writeback helper makes them
  batch-B  the helper holds B files' duplicates and starts their writeback back to back
           once B are waiting (--batches, default 512,4096): the most a process could do
           to let the block layer merge neighbours, at the price of B held descriptors
           (4096 files of 8 KiB are 32 MiB dirty, inside a 64 MiB bound)
No reads and no shim: the difference between the two is what starting each file's
writeback separately costs, whoever starts it. Root (drop_caches)."""
import argparse, ctypes, os, queue, shutil, statistics, threading, time

SYNC_FILE_RANGE_WRITE = 2
libc = ctypes.CDLL(None, use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]


def start_writeback(fd):
    if libc.sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "sync_file_range")


def helper(q, batch):
    held = []
    while True:
        fd = q.get()
        if fd is not None:
            held.append(fd)
        if len(held) >= batch or (fd is None and held):
            for h in held:
                start_writeback(h)
            for h in held:
                os.close(h)
            held = []
        if fd is None:
            return


def write_requests(path):
    """Write requests the disk under `path` has completed (after the block layer's merges)."""
    st = os.stat(path)
    with open(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat") as f:
        return int(f.read().split()[4])


def run(root, files, data, way):
    os.makedirs(root)
    for d in range(100):
        os.mkdir(os.path.join(root, f"d{d:03}"))
    q = queue.SimpleQueue()
    batch = int(way[6:]) if way.startswith("batch-") else 1
    worker = threading.Thread(target=helper, args=(q, batch))
    worker.start()
    t0 = time.monotonic()
    for i in range(files):
        fd = os.open(os.path.join(root, f"d{i % 100:03}", f"f{i:06}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, data)
        if way == "per-file":
            start_writeback(fd)
        elif way == "helper" or way.startswith("batch-"):
            q.put(os.dup(fd))
        os.close(fd)
    q.put(None)
    worker.join()
    os.sync()
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=50000)
    ap.add_argument("--kib", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="512,4096")
    ap.add_argument("dir")
    a = ap.parse_args()
    data = os.urandom(a.kib * 1024)
    root = os.path.join(a.dir, "tree-write-floor")
    ways = ["merged", "per-file", "helper"] + [f"batch-{b}" for b in a.batches.split(",") if b]
    times = {w: [] for w in ways}
    reqs = {w: [] for w in ways}
    for r in range(a.reps):
        for way in (ways if r % 2 == 0 else ways[::-1]):
            shutil.rmtree(root, ignore_errors=True)
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            w0 = write_requests(a.dir)
            times[way].append(run(root, a.files, data, way))
            reqs[way].append(write_requests(a.dir) - w0)
            print(f"round {r + 1}: {way} {times[way][-1]:.2f} s, {reqs[way][-1]} write requests", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    m = {k: statistics.median(v) for k, v in times.items()}
    print(f"{a.files} files of {a.kib} KiB, until on disk, median of {a.reps}: merged {m['merged']:.2f} s"
          + "".join(f", {w} {m[w]:.2f} s ({m[w] / m['merged']:.2f}x)" for w in ways[1:]))
    print("write requests, median: " + ", ".join(f"{w} {statistics.median(reqs[w]):.0f}" for w in ways))


if __name__ == "__main__":
    main()
