"""Cut group tars into call folders: python3 scripts/carry/cut.py STAGE BUDGET_BYTES GROUP.tar ...

Call folder STAGE/cNN holds at most BUDGET_BYTES of pieces (`<group>.pNN`, byte ranges of the group's
tar, in order) plus MANIFEST (one line per group: name, piece count, sha256 of the whole tar), which
every folder carries so that the device can tell, after any call, which groups are complete. Groups
are laid out in the order given, a group's first piece filling what the previous one left of a call.
"""

from __future__ import annotations

import hashlib
import os
import sys


def main(stage: str, budget: int, tars: list[str]) -> None:
    if budget < 1 << 20:
        raise SystemExit(f"budget {budget} B per call is too small: the tree leaves no room for parts")
    calls: list[list[tuple[str, str, int, int]]] = [[]]  # per call: (piece name, tar, offset, size)
    room = budget
    manifest = []
    for tar in tars:
        group = os.path.basename(tar).removesuffix(".tar")
        size, offset, count = os.path.getsize(tar), 0, 0
        sha = hashlib.sha256()
        with open(tar, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                sha.update(block)
        while offset < size:
            if room == 0:
                calls.append([])
                room = budget
            take = min(room, size - offset)
            calls[-1].append((f"{group}.p{count:02d}", tar, offset, take))
            offset, room, count = offset + take, room - take, count + 1
        manifest.append(f"{group} {count} {sha.hexdigest()}")
    for index, pieces in enumerate(calls, start=1):
        folder = os.path.join(stage, f"c{index:02d}")
        os.makedirs(folder)
        with open(os.path.join(folder, "MANIFEST"), "w") as out:
            out.write("\n".join(manifest) + "\n")
        for name, tar, offset, take in pieces:
            with open(tar, "rb") as src, open(os.path.join(folder, name), "wb") as dst:
                src.seek(offset)
                dst.write(src.read(take))
    plan = "".join(f"c{i:02d}: {' '.join(p[0] for p in pieces)}\n" for i, pieces in enumerate(calls, start=1))
    with open(os.path.join(stage, "PLAN"), "w") as out:
        out.write(plan)
    print(plan, end="")
    print("\n".join(manifest))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
