#!/usr/bin/env python3
"""bench/chunked_rss.py: what bodies sent as one-byte chunks cost portaria in memory (issue 23).

    python3 bench/chunked_rss.py [--binary target/release/portaria] [--connections 8]
                                 [--body-bytes 1048576]

Starts the binary on loopback with a temporary database and `max_body_bytes` = the body size,
opens the connections, and on each sends a chunked request (a wrong signature) whose body is
that many bytes as one-byte chunks, all but the last byte. Once the kernel says the server has
read every byte (/proc/net/tcp: no queue of the port holds any), every body is buffered at
once: it prints VmRSS before and then, sends the last bytes, reads the answers (401) and
prints VmHWM. The growth is to be compared with connections x body bytes
(docs/guarantees/input.md, "Memory").
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time


def memory(pid, name):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit(f"no {name} for {pid}")


def all_read(port):
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local = int(fields[1].split(":")[1], 16)
            remote = int(fields[2].split(":")[1], 16)
            tx, rx = (int(x, 16) for x in fields[4].split(":"))
            if (local == port and rx) or (remote == port and tx):
                return False
    return True


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--binary", default="target/release/portaria")
    args.add_argument("--connections", type=int, default=8)
    args.add_argument("--body-bytes", type=int, default=1 << 20)
    args = args.parse_args()
    n, size = args.connections, args.body_bytes

    work = tempfile.mkdtemp(prefix="portaria-chunked-")
    config = os.path.join(work, "portaria.toml")
    with open(config, "w") as f:
        f.write(
            f'[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "off"\n'
            f"max_body_bytes = {size}\nbody_timeout_secs = 300\n"
            f'[storage]\npath = "{work}/portaria.db"\n'
            f'[[endpoint]]\npath = "/w"\nprovider = "pagarme"\nsecret = "bench-secret"\n'
        )
    server = subprocess.Popen(
        [args.binary, "serve", "--config", config], stderr=subprocess.PIPE, text=True
    )
    try:
        port = None
        for line in server.stderr:
            found = re.search(r"addr=127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        if port is None:
            raise SystemExit("portaria did not start")
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        time.sleep(0.5)
        before = memory(server.pid, "VmRSS")

        head = (
            b"POST /w HTTP/1.1\r\nhost: x\r\nx-hub-signature: sha256=" + b"0" * 64
            + b"\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        wire = head + b"1\r\nx\r\n" * (size - 1)
        streams = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        started = time.time()
        senders = [threading.Thread(target=s.sendall, args=(wire,)) for s in streams]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        while not all_read(port):
            time.sleep(0.05)
        took = time.time() - started
        buffered = memory(server.pid, "VmRSS")
        statuses = []
        for s in streams:
            s.sendall(b"1\r\nx\r\n0\r\n\r\n")
        for s in streams:
            statuses.append(s.recv(64).split(b" ")[1].decode())
        peak = memory(server.pid, "VmHWM")
        mib = 1 << 20
        print(
            f"{n} bodies of {size} bytes in one-byte chunks (read in {took:.1f} s): "
            f"VmRSS {before / mib:.1f} MiB before, {buffered / mib:.1f} MiB with all buffered; "
            f"VmHWM {peak / mib:.1f} MiB; growth {(peak - before) / mib:.2f} MiB for "
            f"{n * size / mib:.2f} MiB of bodies; answers {sorted(set(statuses))}"
        )
    finally:
        server.kill()
        server.wait()
        subprocess.run(["rm", "-rf", work], check=False)


if __name__ == "__main__":
    sys.exit(main())
