#!/usr/bin/env python3
"""bench/check.py: the benchmark's correctness checks and its summary, for bench/run.sh.

Reads portaria's SQLite file read-only with Python's standard sqlite3 module (so the checks
share no code with portaria), and the load generator's JSON report and key files. Each check
subcommand writes one JSON verdict ({"phase", "ok", "misses", "facts"}) and exits 1 on any
miss; `summary` puts every phase's figures next to issue 5's targets, writes
bench/results/latest.json, and exits 1 if any phase missed.

Subcommands:
  intake    DB LOADGEN_JSON ACKED BAD OUT   every acked event stored once, nothing else stored
  delivered DB ACKED OUT [--wait S] [--seen-ids FILE | --seen-keys FILE]
            wait until every acked event is delivered, then check the target saw each one
  routes    DB ACKED OUT --wait S --route NAME SEEN_FILE [--route NAME SEEN_FILE ...]
            wait until every acked event is delivered, then check each route delivered each
            event once (its `deliveries` row delivered, its command saw the id once)
  summary   WORK_DIR MODE RESULTS_JSON      the table and the results file
"""

import hashlib
import json
import sqlite3
import sys
import time
import zlib


# Every delivery attempt: the failed and interrupted ones are rows of `attempts`; a delivered
# one is recorded on its `deliveries` row (schema 4), which holds its duration.
ALL_ATTEMPTS = (
    "(SELECT started_at, duration_ms, outcome FROM attempts UNION ALL "
    "SELECT finished_at - delivered_ms AS started_at, delivered_ms AS duration_ms, "
    "'delivered' AS outcome FROM deliveries "
    "WHERE status = 'delivered' AND delivered_ms IS NOT NULL)"
)


def read_lines(path):
    with open(path, encoding="ascii") as f:
        return [line.strip() for line in f if line.strip()]


def inflate(stored):
    """A deflated body as portaria stores it: its length (4 bytes, little-endian), then a zlib
    stream. None if it does not decode to that length."""
    if len(stored) < 4:
        return None
    length = int.from_bytes(stored[:4], "little")
    try:
        body = zlib.decompress(stored[4:])
    except zlib.error:
        return None
    return body if len(body) == length else None


def connect(db):
    # Read-only and never the one to checkpoint: portaria may still be running.
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.execute("PRAGMA query_only = ON")
    return conn


def verdict(out, phase, misses, facts):
    result = {"phase": phase, "ok": not misses, "misses": misses, "facts": facts}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    for miss in misses:
        print(f"CORRECTNESS MISS [{phase}]: {miss}", file=sys.stderr)
    return 0 if not misses else 1


def intake(db, loadgen_json, acked_path, bad_path, out, endpoint="pagarme"):
    """Every acknowledged unique event is in `events` exactly once, with its exact body;
    duplicates and bad signatures are stored zero times; no 5xx and no dropped request."""
    with open(loadgen_json, encoding="utf-8") as f:
        report = json.load(f)
    acked = set(read_lines(acked_path))
    bad = set(read_lines(bad_path))
    misses = []

    statuses = report["status"]
    server_errors = {s: n for s, n in statuses.items() if s.startswith("5")}
    if server_errors:
        misses.append(f"5xx answers: {server_errors}")
    if statuses.get("error"):
        misses.append(
            f"{statuses['error']} requests got no answer (connection error or timeout): "
            f"{report.get('first_errors')}"
        )
    by_kind = report["by_kind"]
    for kind in ("original", "racing_copy", "late_copy"):
        not_ok = {s: n for s, n in by_kind.get(kind, {}).items() if not s.startswith("2")}
        if not_ok:
            misses.append(f"validly signed {kind} requests answered {not_ok}")
    bad_answers = by_kind.get("bad_signature", {})
    if any(s != "401" for s in bad_answers):
        misses.append(f"bad signatures answered {bad_answers} (expected 401 only)")
    expected = report["expected"]
    if len(acked) != expected["unique_events"]:
        misses.append(
            f"{expected['unique_events'] - len(acked)} of {expected['unique_events']} "
            "unique events sent never got a 2xx"
        )

    conn = connect(db)
    rows = conn.execute(
        "SELECT dedup_key, count(*) FROM events WHERE endpoint = ? GROUP BY dedup_key",
        (endpoint,),
    ).fetchall()
    stored = dict(rows)
    twice = [key for key, count in stored.items() if count > 1]
    if twice:
        misses.append(f"{len(twice)} events stored more than once, e.g. {twice[:3]}")
    missing = sorted(acked - stored.keys())
    if missing:
        misses.append(f"{len(missing)} acknowledged events are not in the database, e.g. {missing[:3]}")
    bad_stored = sorted(bad & stored.keys())
    if bad_stored:
        misses.append(f"{len(bad_stored)} bad-signature events were stored, e.g. {bad_stored[:3]}")
    total = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    if total != len(acked):
        extra = sorted(stored.keys() - acked)
        misses.append(
            f"the database holds {total} events but {len(acked)} were acknowledged "
            f"(unacknowledged rows, e.g. {extra[:3]})"
        )
    # The raw body, exactly as sent: for body-sha256 dedup its hash is the key. A body stored
    # deflated (`payloads.codec` 1, schema 7) is decoded here independently of portaria.
    body_mismatch = 0
    no_headers = 0
    deflated = 0
    stored_bytes = 0
    for key, body, headers, codec in conn.execute(
        "SELECT dedup_key, body, headers, codec FROM events JOIN payloads ON event_id = id "
        "WHERE endpoint = ?",
        (endpoint,),
    ):
        stored_bytes += len(body)
        if codec == 1:
            deflated += 1
            body = inflate(body)
        elif codec != 0:
            body = None
        if body is None or hashlib.sha256(body).hexdigest() != key:
            body_mismatch += 1
        if not headers or b"x-hub-signature" not in bytes(headers).lower():
            no_headers += 1
    if body_mismatch:
        misses.append(f"{body_mismatch} stored bodies differ from what was sent")
    if no_headers:
        misses.append(f"{no_headers} rows lack the request headers")
    no_payload = conn.execute(
        "SELECT count(*) FROM events WHERE id NOT IN (SELECT event_id FROM payloads)"
    ).fetchone()[0]
    if no_payload:
        misses.append(f"{no_payload} events have no stored headers and body")
    by_status = dict(conn.execute("SELECT status, count(*) FROM events GROUP BY status").fetchall())
    conn.close()

    facts = {
        "acked_unique": len(acked),
        "rows": total,
        "rows_by_status": by_status,
        "bad_signatures_sent": expected["bad_signatures"],
        "duplicates_sent": expected["duplicates"],
        "bodies_deflated": deflated,
        "body_bytes_stored": stored_bytes,
    }
    return verdict(out, "intake:" + report.get("label", "?"), misses, facts)


def delivered(db, acked_path, out, wait_secs, seen_ids=None, seen_keys=None, phase="delivery"):
    """Waits (bounded) until every acknowledged event is `delivered`, then checks the target
    saw every one of them at least once."""
    acked = set(read_lines(acked_path))
    misses = []
    deadline = time.monotonic() + wait_secs
    started = time.monotonic()
    while True:
        conn = connect(db)
        rows = conn.execute("SELECT id, dedup_key, status FROM events").fetchall()
        conn.close()
        status_of = {key: status for _, key, status in rows}
        waiting = [k for k in acked if status_of.get(k) != "delivered"]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    waited = time.monotonic() - started
    if waiting:
        counts = {}
        for k in waiting:
            s = status_of.get(k, "missing")
            counts[s] = counts.get(s, 0) + 1
        misses.append(
            f"{len(waiting)} acknowledged events not delivered after {wait_secs} s: {counts}"
        )

    id_of = {key: event_id for event_id, key, _ in rows}
    deliveries = None
    if seen_ids:
        lines = [line.split() for line in read_lines(seen_ids)]
        seen = [fields[0] for fields in lines]
        deliveries = len(seen)
        # `ID KEY SHA256-OF-STDIN`: for body-sha256 dedup the key is the body's hash, so the
        # command must have read exactly the body the gateway sent.
        wrong_body = [f[0] for f in lines if len(f) >= 3 and f[2] != f[1]]
        if wrong_body:
            misses.append(
                f"the command read a body other than the one sent for {len(wrong_body)} "
                f"deliveries, e.g. events {wrong_body[:3]}"
            )
        seen_set = set(seen)
        unseen = sorted(k for k in acked if str(id_of.get(k)) not in seen_set)
        if unseen:
            misses.append(
                f"the command never ran for {len(unseen)} acknowledged events, e.g. {unseen[:3]}"
            )
    if seen_keys:
        seen = read_lines(seen_keys)
        deliveries = len(seen)
        unseen = sorted(acked - set(seen))
        if unseen:
            misses.append(
                f"the HTTP target never received {len(unseen)} acknowledged events, e.g. {unseen[:3]}"
            )

    conn = connect(db)
    spans = conn.execute(
        f"SELECT started_at, started_at + duration_ms FROM {ALL_ATTEMPTS}"
    ).fetchall()
    failed_attempts = conn.execute(
        "SELECT count(*) FROM attempts WHERE outcome != 'delivered'"
    ).fetchone()[0]
    timing = conn.execute(
        "SELECT min(received_at), max(finished_at), count(*) FROM events WHERE status = 'delivered'"
    ).fetchone()
    attempts = conn.execute(
        "SELECT count(*), avg(duration_ms), sum(outcome = 'delivered'), "
        f"min(started_at), max(started_at + duration_ms) FROM {ALL_ATTEMPTS}"
    ).fetchone()
    conn.close()
    # At least once allows a repeat only after an attempt that did not end delivered; with
    # every attempt delivered, a second delivery means two slots took the same event.
    if deliveries is not None and deliveries > len(acked) and failed_attempts == 0:
        misses.append(
            f"{deliveries - len(acked)} events were delivered twice with no failed attempt "
            f"to explain it"
        )
    facts = {
        "acked_unique": len(acked),
        "delivered": sum(1 for k in acked if status_of.get(k) == "delivered"),
        "target_deliveries_seen": deliveries,
        "redeliveries": None if deliveries is None else deliveries - len(acked),
        "waited_secs": round(waited, 3),
        "first_received_ms": timing[0],
        "last_finished_ms": timing[1],
        "attempts": attempts[0],
        "attempts_delivered": attempts[2],
        "mean_attempt_ms": None if attempts[1] is None else round(attempts[1], 3),
        "first_attempt_ms": attempts[3],
        "last_attempt_end_ms": attempts[4],
        "ms_by_attempts_in_flight": in_flight_histogram(spans),
    }
    return verdict(out, phase, misses, facts)


def routes(db, acked_path, out, wait_secs, routes_seen, phase="routes"):
    """Every acknowledged event delivered once per route it matched: each route's delivery
    row is `delivered`, and that route's command saw the event's id exactly once (twice only
    after a failed attempt of that route)."""
    acked = set(read_lines(acked_path))
    names = [name for name, _ in routes_seen]
    misses = []
    deadline = time.monotonic() + wait_secs
    started = time.monotonic()
    while True:
        conn = connect(db)
        rows = conn.execute("SELECT id, dedup_key, status FROM events").fetchall()
        conn.close()
        status_of = {key: status for _, key, status in rows}
        waiting = [k for k in acked if status_of.get(k) != "delivered"]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    waited = time.monotonic() - started
    if waiting:
        misses.append(f"{len(waiting)} acknowledged events not delivered after {wait_secs} s")
    id_of = {key: str(event_id) for event_id, key, _ in rows}
    conn = connect(db)
    per_route = {}
    for name, seen_path in routes_seen:
        delivered = {
            str(r[0])
            for r in conn.execute(
                "SELECT event_id FROM deliveries WHERE route = ? AND status = 'delivered'", (name,)
            )
        }
        failed = conn.execute(
            "SELECT count(*) FROM attempts WHERE route = ? AND outcome != 'delivered'", (name,)
        ).fetchone()[0]
        seen = [line.split()[0] for line in read_lines(seen_path)]
        counts = {}
        for event_id in seen:
            counts[event_id] = counts.get(event_id, 0) + 1
        not_delivered = sorted(k for k in acked if id_of.get(k) not in delivered)
        unseen = sorted(k for k in acked if counts.get(id_of.get(k), 0) == 0)
        twice = sorted(i for i, n in counts.items() if n > 1)
        if not_delivered:
            misses.append(f"route {name}: {len(not_delivered)} events without a delivered row")
        if unseen:
            misses.append(f"route {name}: the command never ran for {len(unseen)} events")
        if twice and failed == 0:
            misses.append(
                f"route {name}: {len(twice)} events delivered twice with no failed attempt, "
                f"e.g. {twice[:3]}"
            )
        per_route[name] = {"delivered_rows": len(delivered), "seen": len(seen), "failed": failed}
    other = conn.execute(
        "SELECT count(*) FROM deliveries WHERE route NOT IN (%s)" % ",".join("?" * len(names)),
        names,
    ).fetchone()[0]
    conn.close()
    if other:
        misses.append(f"{other} deliveries to a route that is not configured")
    facts = {"acked_unique": len(acked), "waited_secs": round(waited, 3), "routes": per_route}
    return verdict(out, phase, misses, facts)


def in_flight_histogram(spans):
    """Milliseconds spent with 0, 1, 2... attempts running, between the first attempt's start
    and the last one's end: shows whether the configured concurrency is actually used."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    histogram, running, last = {}, 0, None
    for t, step in edges:
        if last is not None and t > last:
            histogram[running] = histogram.get(running, 0) + (t - last)
        running += step
        last = t
    return {str(k): v for k, v in sorted(histogram.items())}


def attempt_window(db, after_ms):
    """Attempts that started at or after `after_ms` (unix ms): count and their span."""
    conn = connect(db)
    row = conn.execute(
        "SELECT count(*), min(started_at), max(started_at + duration_ms), avg(duration_ms) "
        f"FROM {ALL_ATTEMPTS} WHERE started_at >= ?",
        (after_ms,),
    ).fetchone()
    conn.close()
    return row


# ---- summary ----

MIB = 1024 * 1024


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_metrics(path):
    metrics = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition(" ")
                if not key:
                    continue
                try:
                    metrics[key] = float(value) if "." in value else int(value)
                except ValueError:
                    metrics[key] = value
    except OSError:
        pass
    return metrics


def fmt(x, digits=1):
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def summary(work, mode, results_path):
    m = load_metrics(f"{work}/metrics.txt")
    main = load_json(f"{work}/intake.json") or {}
    ceiling = load_json(f"{work}/ceiling.json") or {}
    paced = load_json(f"{work}/paced.json")
    ceiling_paced = load_json(f"{work}/ceiling-paced.json")
    verdicts = {}
    rounds = [main] + [load_json(f"{work}/intake-{r}.json") or {} for r in (2, 3)
                       if load_json(f"{work}/intake-{r}.json") is not None]
    ceilings = [ceiling] + [load_json(f"{work}/ceiling-{r}.json") or {} for r in (2, 3)
                            if load_json(f"{work}/ceiling-{r}.json") is not None]
    extra = [f"intake-{r}" for r in (2, 3) if load_json(f"{work}/check-intake-{r}.json")]
    for name in ("intake", "paced", "command", "command-intake", "routes", "routes-intake",
                 "http", "http-intake", *extra):
        v = load_json(f"{work}/check-{name}.json")
        if v is not None:
            verdicts[name] = v
    tick = m.get("clk_tck", 100)

    # With several rounds (full mode), each figure is the median over the rounds, and the
    # share of the ceiling is the median of each round's own share.
    def median(values):
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    def each(reports, *path):
        out = []
        for report in reports:
            value = report
            for key in path:
                value = (value or {}).get(key)
            out.append(value)
        return out

    rps = median(each(rounds, "throughput_rps"))
    ceiling_rps = median(each(ceilings, "throughput_rps"))
    ratio = median(
        [a / b for a, b in zip(each(rounds, "throughput_rps"), each(ceilings, "throughput_rps"))
         if a and b]
    )
    p99 = median(each(rounds, "latency_ms", "p99"))

    def spread(values, digits=0):
        values = [v for v in values if v is not None]
        if len(values) < 2:
            return ""
        return "rounds: " + " / ".join(fmt(v, digits) for v in values)
    paced_p99 = paced.get("latency_ms", {}).get("p99") if paced else None
    accepted = (verdicts.get("intake") or {}).get("facts", {}).get("rows")
    written = m.get("intake_write_bytes")
    wal = m.get("intake_wal_bytes", 0)
    per_event = written / accepted if written is not None and accepted else None
    per_event_bound = (written + wal) / accepted if written is not None and accepted else None
    extra_route = None
    if m.get("routes_delivered_events") and m.get("delivered_events") and \
            "routes_total_write_bytes" in m and "command_total_write_bytes" in m:
        extra_route = (m["routes_total_write_bytes"] / m["routes_delivered_events"]
                       - m["command_total_write_bytes"] / m["delivered_events"])
    cpu_load = m.get("intake_cpu_ticks")
    idle_ticks = m.get("idle_cpu_ticks")
    idle_secs = m.get("idle_cpu_window_secs")

    def mean_in_flight(name):
        histogram = (verdicts.get(name) or {}).get("facts", {}).get("ms_by_attempts_in_flight")
        total = sum(histogram.values()) if histogram else 0
        if not total:
            return None
        return sum(int(k) * v for k, v in histogram.items()) / total

    rows = [
        ("Durable intake, requests/s", fmt(rps, 0), ">= 30,000", rps is not None and rps >= 30000),
        ("  " + spread(each(rounds, "throughput_rps")), "", "", None),
        ("  share of bare hyper ceiling", f"{ratio:.1%}" if ratio else "n/a", ">= 40 %",
         ratio is not None and ratio >= 0.40),
        ("  bare hyper ceiling, requests/s", fmt(ceiling_rps, 0), "(measured)", None),
        ("  " + spread(each(ceilings, "throughput_rps")), "", "", None),
        ("  p99 latency under that load, ms", fmt(p99, 2), "< 10", p99 is not None and p99 < 10),
        ("  " + spread(each(rounds, "latency_ms", "p99"), 2), "", "", None),
        ("  p50 / p90 / max, ms (first round)",
         " / ".join(fmt(main.get("latency_ms", {}).get(k), 2) for k in ("p50", "p90", "max")),
         "", None),
        ("p99 at 1,000 req/s, ms", fmt(paced_p99, 2) if paced else "(full mode)", "< 2",
         None if paced_p99 is None else paced_p99 < 2),
        ("  bare hyper at 1,000 req/s, p99 ms",
         fmt(ceiling_paced.get("latency_ms", {}).get("p99"), 2) if ceiling_paced else "(full mode)",
         "(floor)", None),
        ("Command delivery overhead per event, ms", fmt(m.get("command_overhead_ms"), 2), "< 1",
         None if m.get("command_overhead_ms") is None else m["command_overhead_ms"] < 1),
        ("  command deliveries/s (4 lanes)", fmt(m.get("command_deliveries_per_sec"), 0), "", None),
        ("  the command alone, runs/s (4 at once)", fmt(m.get("command_baseline_per_sec"), 0), "", None),
        ("  mean command runs in flight (of 4)", fmt(mean_in_flight("command"), 2), "", None),
        ("  disk written per delivered event, KiB",
         fmt(m["delivery_write_bytes"] / m["delivered_events"] / 1024, 2)
         if m.get("delivered_events") else "n/a", "", None),
        ("Disk written per delivered event, all in (1 command route), KiB",
         fmt(m["command_total_write_bytes"] / m["delivered_events"] / 1024, 2)
         if m.get("delivered_events") and "command_total_write_bytes" in m else "n/a", "<= 6",
         None if not m.get("delivered_events") or "command_total_write_bytes" not in m
         else m["command_total_write_bytes"] / m["delivered_events"] <= 6 * 1024),
        ("  per extra route (2 command routes), KiB",
         fmt(extra_route / 1024, 2) if extra_route is not None else "n/a", "<= 1.5",
         None if extra_route is None else extra_route <= 1.5 * 1024),
        ("HTTP forward deliveries/s (4 lanes)", fmt(m.get("http_deliveries_per_sec"), 0), "", None),
        ("RSS at idle, MiB", fmt(m.get("idle_rss_kib", 0) / 1024, 1) if "idle_rss_kib" in m else "n/a",
         "< 6", m.get("idle_rss_kib", 1e12) < 6 * 1024),
        ("Peak RSS under load, MiB", fmt(m.get("peak_rss_kib", 0) / 1024, 1) if "peak_rss_kib" in m else "n/a",
         "< 24", m.get("peak_rss_kib", 1e12) < 24 * 1024),
        ("Release binary, stripped, MiB", fmt(m.get("binary_bytes", 0) / MIB, 2), "< 6",
         m.get("binary_bytes", 1e12) < 6 * MIB),
        ("CPU seconds for the load (user+sys)", fmt(cpu_load / tick, 2) if cpu_load is not None else "n/a",
         "", None),
        (f"CPU seconds idle over {idle_secs or 10} s after load",
         fmt(idle_ticks / tick, 2) if idle_ticks is not None else "(full mode)", "~ 0",
         None if idle_ticks is None else idle_ticks / tick <= 0.02 * max(idle_secs or 1, 1)),
        ("Disk written per accepted event, KiB", fmt(per_event / 1024, 2) if per_event else "n/a",
         "< 3", None if per_event is None else per_event < 3 * 1024),
        ("  with the WAL still to checkpoint, KiB", fmt(per_event_bound / 1024, 2) if per_event_bound else "n/a",
         "< 3", None if per_event_bound is None else per_event_bound < 3 * 1024),
        ("  at 1,000 req/s (about one event per commit), KiB",
         fmt(m["paced_write_bytes"] / m["paced_accepted"] / 1024, 2)
         if m.get("paced_accepted") else "(full mode)", "", None),
        ("  database / WAL after load, MiB",
         f"{fmt(m.get('intake_db_bytes', 0) / MIB, 2)} / {fmt(wal / MIB, 2)}", "", None),
        ("  database after shutdown, MiB", fmt(m.get("intake_db_bytes_closed", 0) / MIB, 2), "", None),
    ]

    rows = [r for r in rows if r[0].strip()]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'figure':<{width}}  {'measured':>18}  {'target':>10}  met"]
    for name, value, target, met in rows:
        mark = "" if met is None else ("yes" if met else "NO")
        lines.append(f"{name:<{width}}  {value:>18}  {target:>10}  {mark}")
    misses = [f"[{v['phase']}] {miss}" for v in verdicts.values() for miss in v["misses"]]
    for key in ("shutdown_misses",):
        if m.get(key):
            misses.append(str(m[key]))
    print("\n".join(lines), file=sys.stderr)
    print(file=sys.stderr)
    print(
        "correctness: "
        + ("all checks passed" if not misses else f"{len(misses)} MISS(ES)"),
        file=sys.stderr,
    )
    for miss in misses:
        print(f"  - {miss}", file=sys.stderr)

    results = {
        "mode": mode,
        "machine": m.get("machine"),
        "command": m.get("command"),
        "finished_at": m.get("finished_at"),
        "targets": [
            {"figure": name.strip(), "measured": value, "target": target, "met": met}
            for name, value, target, met in rows
        ],
        "metrics": m,
        "loadgen": {"intake": main, "ceiling": ceiling, "paced": paced,
                    "intake_rounds": rounds, "ceiling_rounds": ceilings,
                    "ceiling_paced": ceiling_paced,
                    "command": load_json(f"{work}/command-load.json"),
                    "http": load_json(f"{work}/http-load.json")},
        "checks": verdicts,
        "correctness_ok": not misses,
        "misses": misses,
    }
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    return 0 if not misses else 1


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    command, args = argv[1], argv[2:]
    if command == "intake":
        return intake(*args[:5])
    if command == "delivered":
        db, acked, out = args[:3]
        opts = dict(zip(args[3::2], args[4::2]))
        return delivered(
            db,
            acked,
            out,
            float(opts.get("--wait", 60)),
            seen_ids=opts.get("--seen-ids"),
            seen_keys=opts.get("--seen-keys"),
            phase=opts.get("--phase", "delivery"),
        )
    if command == "routes":
        db, acked, out = args[:3]
        rest = args[3:]
        wait, routes_seen, i = 60.0, [], 0
        while i < len(rest):
            if rest[i] == "--wait":
                wait, i = float(rest[i + 1]), i + 2
            elif rest[i] == "--route":
                routes_seen.append((rest[i + 1], rest[i + 2]))
                i += 3
            else:
                print(f"check.py routes: unknown argument {rest[i]}", file=sys.stderr)
                return 2
        return routes(db, acked, out, wait, routes_seen)
    if command == "window":
        count, first, last, mean = attempt_window(args[0], int(args[1]))
        print(f"{count} {first or 0} {last or 0} {mean or 0}")
        return 0
    if command == "summary":
        return summary(*args[:3])
    print(f"check.py: unknown subcommand {command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
