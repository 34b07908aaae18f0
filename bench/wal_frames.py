#!/usr/bin/env python3
"""Which b-tree each page written to the WAL belongs to (bench/PROFILE.md, "Disk writes per
delivered event").

    bench/wal_frames.py WAL_BEFORE WAL_AFTER DB EVENTS

WAL_BEFORE and WAL_AFTER are copies of portaria's `-wal` file taken before and after a phase
(no checkpoint in between: the WAL must only have grown), DB the database once portaria has
stopped (its pages then hold what the WAL held), EVENTS how many events the phase delivered.
Every page a commit touched is one frame in the WAL; a frame's page number is mapped to its
table or index through SQLite's `dbstat`, or named a pointer-map page (auto_vacuum: every
page allocated or moved rewrites its entry there); a page in neither was freed by then (say, a
leaf of an index that emptied). Prints frames and commits per event, then frames per b-tree,
most first.
"""

import collections
import sqlite3
import struct
import sys


def frames(path):
    """The page number of every valid frame in a WAL file, and how many commits it holds."""
    data = open(path, "rb").read()
    if len(data) < 32:
        return [], 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salt = data[16:24]
    pages, commits, off = [], 0, 32
    while off + 24 + page_size <= len(data):
        page, db_size = struct.unpack(">II", data[off : off + 8])
        if data[off + 8 : off + 16] != salt:
            break  # a frame left over from before the WAL last started over
        pages.append(page)
        commits += db_size != 0
        off += 24 + page_size
    return pages, commits


def page_names(conn, db):
    """Each page of the database `conn` has open (file `db`) by its table or index, from
    `dbstat`, and its pointer-map pages (with auto_vacuum) as "(pointer map)"."""
    names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0]:
        # The first pointer-map page is page 2; each maps the usable_size / 5 pages after it.
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        reserved = open(db, "rb").read(100)[20]
        step = (page_size - reserved) // 5 + 1
        last = conn.execute("PRAGMA page_count").fetchone()[0]
        names.update((p, "(pointer map)") for p in range(2, last + step, step))
    return names


def main():
    before, after, db, events = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    f0, c0 = frames(before)
    f1, c1 = frames(after)
    if f1[: len(f0)] != f0:
        sys.exit("the WAL started over between the two copies (a checkpoint): no comparison")
    new, commits = f1[len(f0) :], c1 - c0
    names = page_names(sqlite3.connect(db), db)
    per = collections.Counter(names.get(p, "(freed)") for p in new)
    print(
        f"frames {len(new)} ({len(new) / events:.2f} per event), "
        f"commits {commits} ({commits / events:.2f} per event)"
    )
    for name, n in per.most_common():
        print(f"  {name:28} {n:6}  {n / events:.2f} per event")


if __name__ == "__main__":
    main()
