#!/usr/bin/env python3
"""bench/wal_pages.py: what each WAL page of an intake commit is (bench/PROFILE.md, "Payload
compression").

    python3 bench/wal_pages.py raw|deflate BATCH

Builds a database in a temporary directory with portaria's own schema (read from
src/store/sqlite/schema.rs) and settings (1 KiB pages, incremental auto-vacuum, WAL), warms it with
3,000 bench-like events (the load generator's `charge.paid` shape, 800-1000 bytes, and its
request headers), checkpoints, then commits 200 more, BATCH per commit, the way the writer
does (the event row, then its payload: raw, or deflated as `store::payload` stores it). Then
it reads the WAL's frames and names each frame's page with SQLite's `dbstat`: frames per event
(what the commits wrote) and distinct pages per event (what a checkpoint copies)."""

import collections
import hashlib
import os
import re
import sqlite3
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wal_frames import frames, page_names  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = open(os.path.join(ROOT, "src/store/sqlite/schema.rs")).read()
def const(name):
    m = re.search(r'const %s: &str = "(.*?)";' % name, src, re.S)
    return m.group(1).replace('\\\\', '\\')
# What `migrate_in_one_transaction` runs for a new file, in its order.
schema = ''.join(const(n) for n in ['SCHEMA', 'DELIVERIES', 'V4_TO_V5', 'V5_TO_V6', 'V6_TO_V7', 'V8_TO_V9'])
deflate = sys.argv[1] == 'deflate'
batch = int(sys.argv[2])
work = tempfile.TemporaryDirectory()
db = os.path.join(work.name, "p.db")
c = sqlite3.connect(db, isolation_level=None)
c.executescript("PRAGMA page_size=1024; PRAGMA auto_vacuum=INCREMENTAL; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=0;")
c.executescript("BEGIN;" + schema + "COMMIT;")
headers = b"content-type: application/json\r\nx-hub-signature: sha256=" + b"3f"*32 + b"\r\nhost: 127.0.0.1:40151\r\ncontent-length: 917\r\n"
def body(n):
    h = hashlib.sha256(str(n).encode()).hexdigest()
    head = ('{"id":"hook_%06d%s","type":"charge.paid","created_at":"2026-11-13T09:41:27.118Z","data":{"id":"ch_%s","code":"%s","amount":25980,"status":"paid","currency":"BRL","payment_method":"credit_card","customer":{"id":"cus_%s","name":"Maria Souza","email":"maria.souza%d@example.com","document":"%s"},"order":{"id":"or_%s","items":[{"id":"oi_%s","description":"Camiseta basica","amount":12990,"quantity":2}],"address":{"line_1":"1500, Rua Augusta","zip_code":"01304001","city":"Sao Paulo","state":"SP","country":"BR"}},"last_transaction":{"id":"tran_%s","status":"captured","installments":3,"acquirer_tid":"%s","card":{"last_four_digits":"4444","brand":"Mastercard"}}},"metadata":{"note":"' % (n, h[:10], h[10:26], h[26:36].upper(), h[36:52], n % 999, h[52:63], h[:16], h[16:32], h[32:48], h[48:60]))
    pad = 800 + (n * 37) % 200 - len(head) - 4
    return (head + ''.join(' ' if i % 9 == 8 else 'x' for i in range(max(pad, 0))) + '"}}}').encode()
def insert(n):
    b = body(n)
    key = hashlib.sha256(b).hexdigest()
    dh = struct.unpack('>q', hashlib.sha256(b'pagarme\0' + key.encode()).digest()[:8])[0]
    c.execute("INSERT INTO events (endpoint, dedup_key, dedup_hash, event_type, content_type, payload_bytes, received_at, status) VALUES ('pagarme', ?, ?, 'charge.paid', 'application/json', ?, ?, 'stored')", (key, dh, len(b) + len(headers), 1796026524000 + n))
    stored, codec = b, 0
    if deflate:
        stored, codec = struct.pack('<I', len(b)) + zlib.compress(b, 1), 1
    c.execute("INSERT INTO payloads (event_id, headers, body, codec) VALUES (last_insert_rowid(), ?, ?, ?)", (headers, stored, codec))
n = 0
for _ in range(3000 // batch):   # a warm file
    c.execute("BEGIN IMMEDIATE")
    for _ in range(batch): insert(n); n += 1
    c.execute("COMMIT")
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
commits = 200 // batch
for _ in range(commits):
    c.execute("BEGIN IMMEDIATE")
    for _ in range(batch): insert(n); n += 1
    c.execute("COMMIT")
pages, _ = frames(db + '-wal')
names = page_names(c, db)
kinds = dict(c.execute("SELECT pageno, pagetype FROM dbstat"))
count = collections.Counter()
for p in pages:
    count[(names.get(p, '(freed)'), kinds.get(p, ''))] += 1
events = commits * batch
print(f"{'deflated' if deflate else 'raw'} batch {batch}: {len(pages)/events:.2f} WAL frames per event, {len(set(pages))/events:.2f} distinct pages")
for k, v in sorted(count.items(), key=lambda kv: -kv[1]):
    print(f"   {k[0]:<16} {k[1]:<9} {v/events:.2f}")
