import collections
import sys

f = sys.argv[1]
by = collections.defaultdict(collections.Counter)
tot = collections.Counter()
for line in open(f):
    line = line.rstrip()
    if not line:
        continue
    stack, n = line.rsplit(" ", 1)
    n = int(n)
    frames = stack.split(";")
    th = frames[0]
    # role: find a marker frame
    role = "other"
    for key in (
        "prefetch.<locals>.produce",
        "_worker (concurrent",
        "_stream_response_in_pool",
        "MicroBatcher._run",
        "_serve",
        "channel_spin",
        "_run_piece",
        "Thread.run",
    ):
        if any(key in fr for fr in frames):
            role = key
            break
    tot[role] += n
    by[role][";".join(x.split(" (")[0] for x in frames[-2:])] += n
for role, c in tot.most_common():
    print(f"== {role}: {c}")
    for k, v in by[role].most_common(8):
        print(f"   {v:6d} {v / c:6.1%} {k[:150]}")
