"""Summaries of py-spy's collapsed stacks (`py-spy record --format raw`).

python summarize.py FILE [DEPTH]   # by thread, by leaf (DEPTH frames), inclusive
python summarize.py FILE --roles   # by the role a marker frame gives the thread
"""

import collections
import sys

ROLES = (  # the first marker frame found names the sample's role
    "prefetch.<locals>.produce",
    "_worker (concurrent",
    "_stream_response_in_pool",
    "MicroBatcher._run",
    "_serve",
    "channel_spin",
    "_run_piece",
    "Thread.run",
)


def samples(path):
    """(frames, count) of each line of a collapsed-stack file."""
    for line in open(path):
        line = line.rstrip()
        if line:
            stack, n = line.rsplit(" ", 1)
            yield stack.split(";"), int(n)


def by_frames(path, depth):
    leaf, thread, incl = (collections.Counter() for _ in range(3))
    tot = 0
    for frames, n in samples(path):
        tot += n
        thread[frames[0].split(" ")[0] if frames else "?"] += n
        leaf[";".join(frames[-depth:])] += n
        for fr in set(frames[1:]):
            incl[fr] += n
    print("total", tot)
    for title, counts, top, width in (
        ("by thread", thread, 15, 200),
        ("by leaf", leaf, 25, 200),
        ("inclusive", incl, 40, 160),
    ):
        print(f"-- {title}")
        for k, c in counts.most_common(top):
            print(f"{c:6d} {c / tot:6.1%} {k[:width]}")


def by_roles(path):
    by = collections.defaultdict(collections.Counter)
    tot = collections.Counter()
    for frames, n in samples(path):
        role = next((key for key in ROLES if any(key in fr for fr in frames)), "other")
        tot[role] += n
        by[role][";".join(x.split(" (")[0] for x in frames[-2:])] += n
    for role, c in tot.most_common():
        print(f"== {role}: {c}")
        for k, v in by[role].most_common(8):
            print(f"   {v:6d} {v / c:6.1%} {k[:150]}")


if __name__ == "__main__":
    if sys.argv[2:] == ["--roles"]:
        by_roles(sys.argv[1])
    else:
        by_frames(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
