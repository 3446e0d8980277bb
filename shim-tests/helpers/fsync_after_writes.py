# Writes MIB MiB to PATH 1 MiB at a time, fsyncs and closes it, and prints what each step
# returned (the first failed write ends the writing): the writeback-error checks of
# t_errors.sh. With TRIGGER, removes that file (the failing device's switch) halfway: the
# device then fails only writes made before, which without the shim are none.
import os
import sys

path, mib = sys.argv[1], int(sys.argv[2])
trigger = sys.argv[3] if len(sys.argv) > 3 else None
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = os.urandom(1 << 20)
res = []
for i in range(mib):
    if trigger and i == mib // 2:
        os.unlink(trigger)
    try:
        os.write(fd, buf)
    except OSError as e:
        res.append(f"write {i}: {os.strerror(e.errno)}")
        break
try:
    os.fsync(fd)
    res.append("fsync: ok")
except OSError as e:
    res.append(f"fsync: {os.strerror(e.errno)}")
try:
    os.close(fd)
    res.append("close: ok")
except OSError as e:
    res.append(f"close: {os.strerror(e.errno)}")
print("; ".join(res))
