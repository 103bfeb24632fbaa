"""Round trips of the Python client against a daemon (CORDON_HOST,
CORDON_API_KEY): a command, a file write and read, a sandbox's create and
kill. python3 clients/python/bench.py [N]"""

import statistics
import sys
import time

from cordon import Sandbox


def measure(name, n, fn):
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    print("%-28s p50 %6.2f ms  p99 %6.2f ms  (n=%d)" % (name, statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))], n))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with Sandbox() as sbx:
        measure("commands.run('true')", n, lambda: sbx.commands.run("true"))
        measure("files.write 1 KiB", n, lambda: sbx.files.write("f.txt", "x" * 1024))
        measure("files.read 1 KiB", n, lambda: sbx.files.read("f.txt"))
    measure("Sandbox() + kill()", max(1, n // 4), lambda: Sandbox().kill())


if __name__ == "__main__":
    main()
