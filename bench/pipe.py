#!/usr/bin/env python3
"""bench/pipe.py: forwarding to a Python handler, `command` (one process per event) against
`pipe` (one process for all), in events/s and CPU per event. One command:

    python3 bench/pipe.py [--events 1000] [--concurrency 1] [--binary target/release/portaria]

All on loopback with a temporary database. First the queue is filled: portaria takes N signed
Pagar.me-style events with a forward that fails at once and has no retries (`/bin/false`,
`retry = []`), so every event ends `dead` without a handler having seen it. Then, for each
target, a fresh portaria on a copy of that database gets `portaria events replay --dead`, and
the clock runs from the first event the handler wrote down to the last (then /metrics must
count every one delivered). CPU is portaria's
and its children's (the handler processes: each command run, or the one pipe handler, reaped
at shutdown), from getrusage, minus the replay command's. Both handlers do the same work:
append the event to a file, which is then checked to hold each event exactly once.
Writes bench/results/pipe.json; exits non-zero if a check fails.
"""
import argparse, hashlib, hmac, http.client, json, os, re, resource, shutil, signal
import subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "bench-pagarme-secret"

CONFIG = """
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "{db}"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret = "{secret}"
{forward}
"""

COMMAND_HANDLER = """import os, sys
body = sys.stdin.buffer.read()
with open(os.environ["PIPE_HANDLER_FILE"], "a") as f:
    f.write(os.environ["PORTARIA_EVENT_ID"] + "\\n")
"""


def body(n):
    return json.dumps({"id": f"hook_{n}", "type": "charge.paid", "created_at": "2026-11-30T08:00:00Z",
                       "data": {"id": f"ch_{n}", "amount": 1000 + n, "status": "paid",
                                "customer": {"name": "Maria " * 20, "email": f"c{n}@example.com"}}}).encode()


class Server:
    """portaria serve on a config, its log read for the addresses."""

    def __init__(self, binary, config, env):
        self.proc = subprocess.Popen([binary, "serve", "--config", config], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.addrs = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                m = re.search(rb"addr=(\S+) admin=(\S+)", line)
                if m and not self.addrs:
                    self.addrs = [a.decode() for a in m.groups()]
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(20):
            sys.exit("portaria did not start")

    def conn(self, which):
        host, port = self.addrs[which].rsplit(":", 1)
        return http.client.HTTPConnection(host, int(port), timeout=10)

    def deliveries(self):
        c = self.conn(1)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        out = {}
        for m in re.finditer(r'portaria_deliveries_total\{[^}]*outcome="(\w+)"[^}]*\} (\d+)', text):
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def handled_count(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_for(what, check, limit=300, every=0.005):
    """Polls `check` every 5 ms by default: a pipe handles 1,000 events in well under a
    second, so a coarser clock would blur its rate."""
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(every)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/portaria"))
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "portaria"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="portaria-pipe-bench-")
    env = dict(os.environ, RUST_LOG="info")  # as bench/run.sh: the log is part of the cost
    env.pop("PORTARIA_CONFIG", None)
    n = args.events

    def config(name, db, forward):
        path = os.path.join(work, name + ".toml")
        with open(path, "w") as f:
            f.write(CONFIG.format(db=db, secret=SECRET, forward=forward))
        return path

    # The queue: N events, dead without a handler having seen them.
    filled = os.path.join(work, "filled.db")
    server = Server(args.binary, config("fill", filled, 'forward = { command = ["/bin/false"] }\nretry = []'), env)
    c = server.conn(0)
    for i in range(n):
        b = body(i)
        sig = hmac.new(SECRET.encode(), b, hashlib.sha256).hexdigest()
        c.request("POST", "/webhooks/pagarme", b, {"content-type": "application/json", "x-hub-signature": f"sha256={sig}"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"event {i}: {r.status}")
    wait_for("the queue to fill", lambda: server.deliveries().get("dead", 0) == n, every=0.1)
    server.stop()

    command_handler = os.path.join(work, "command-handler.py")
    with open(command_handler, "w") as f:
        f.write(COMMAND_HANDLER)
    modes = {
        "command": f'forward = {{ command = ["python3", "{command_handler}"] }}',
        "pipe": f'forward = {{ pipe = ["python3", "{os.path.join(ROOT, "contrib/pipe-handler.py")}"] }}',
    }
    results = {}
    for mode, forward in modes.items():
        db = os.path.join(work, mode + ".db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(filled + suffix):
                shutil.copy(filled + suffix, db + suffix)
        handled = os.path.join(work, mode + ".handled")
        cfg = config(mode, db, forward + f"\nconcurrency = {args.concurrency}")
        menv = dict(env, PIPE_HANDLER_FILE=handled)
        before = children_cpu()
        server = Server(args.binary, cfg, menv)
        cli_before = children_cpu()
        subprocess.run([args.binary, "events", "replay", "--dead", "--config", cfg], env=menv, check=True,
                       stdout=subprocess.DEVNULL)
        cli = children_cpu() - cli_before
        # The clock reads the handler's file, not portaria: polling /metrics would put work
        # on the writer thread the deliveries themselves wait for.
        wait_for("the first event handled", lambda: handled_count(handled) > 0)
        first = time.monotonic()
        wait_for("every event handled", lambda: handled_count(handled) >= n)
        took = time.monotonic() - first
        wait_for("every delivery recorded", lambda: server.deliveries().get("delivered", 0) >= n, every=0.1)
        failed = server.deliveries().get("failed", 0)
        server.stop()
        cpu = children_cpu() - before - cli
        with open(handled) as f:
            ids = [json.loads(line)["id"] if line.startswith("{") else int(line) for line in f]
        if len(ids) != n or len(set(ids)) != n or failed:
            sys.exit(f"{mode}: {len(ids)} handled ({len(set(ids))} distinct), {failed} failed, for {n} events")
        results[mode] = {"events": n, "events_per_sec": round(n / took, 1),
                         "cpu_ms_per_event": round(cpu * 1000 / n, 3), "seconds": round(took, 2)}

    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    machine = f"{os.cpu_count()} cores, {cpu_model}"
    print(f"machine: {machine}; concurrency {args.concurrency}; Python handler")
    print(f"{'target':8} {'events':>7} {'events/s':>10} {'CPU ms/event':>13}")
    for mode, r in results.items():
        print(f"{mode:8} {r['events']:>7} {r['events_per_sec']:>10} {r['cpu_ms_per_event']:>13}")
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/pipe.json"), "w") as f:
        json.dump({"machine": machine, "concurrency": args.concurrency, **results}, f, indent=2)
        f.write("\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
