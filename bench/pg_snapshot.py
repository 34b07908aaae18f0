#!/usr/bin/env python3
"""bench/pg_snapshot.py PSQL URL SQLITE_OUT: copies what bench/check.py reads of a PostgreSQL
portaria database (events, payloads, deliveries, attempts) into a new SQLite file, so the
PostgreSQL benchmark's correctness checks are check.py's own. Reads through the `psql` client
(CSV, bytea as hex), so it needs no Python driver."""

import csv
import io
import sqlite3
import subprocess
import sys

TABLES = {
    "events": ("id", "endpoint", "dedup_key", "status", "received_at", "finished_at"),
    "payloads": ("event_id", "headers", "body"),
    "deliveries": ("event_id", "route", "status", "attempts", "finished_at", "delivered_ms"),
    "attempts": ("id", "event_id", "route", "started_at", "duration_ms", "outcome"),
}
BYTEA = {"headers", "body"}


def rows(psql, url, table, columns):
    query = f"COPY (SELECT {', '.join(columns)} FROM {table}) TO STDOUT WITH (FORMAT csv)"
    out = subprocess.run([psql, "-X", "-q", "-d", url, "-c", query], check=True,
                         capture_output=True).stdout.decode()
    for row in csv.reader(io.StringIO(out)):
        values = []
        for column, value in zip(columns, row):
            if value == "":
                values.append(None)
            elif column in BYTEA:
                values.append(bytes.fromhex(value[2:]))
            else:
                values.append(int(value) if value.lstrip("-").isdigit() else value)
        yield values


def main(psql, url, out):
    conn = sqlite3.connect(out)
    for table, columns in TABLES.items():
        conn.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
        marks = ", ".join("?" * len(columns))
        conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows(psql, url, table, columns))
    # PostgreSQL keeps bodies as received (TOAST compresses there): check.py's codec 0.
    conn.execute("ALTER TABLE payloads ADD COLUMN codec INTEGER NOT NULL DEFAULT 0")
    conn.commit()
    conn.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
