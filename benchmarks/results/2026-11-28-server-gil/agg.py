import collections
import sys

f = sys.argv[1]
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 1
leaf = collections.Counter()
thread = collections.Counter()
incl = collections.Counter()
tot = 0
for line in open(f):
    line = line.rstrip()
    if not line:
        continue
    stack, n = line.rsplit(" ", 1)
    n = int(n)
    tot += n
    frames = stack.split(";")
    thread[frames[0].split(" ")[0] if frames else "?"] += n
    leaf[";".join(frames[-depth:])] += n
    for fr in set(frames[1:]):
        incl[fr] += n
print("total", tot)
print("-- by thread")
[print(f"{c:6d} {c / tot:6.1%} {k}") for k, c in thread.most_common(15)]
print("-- by leaf")
[print(f"{c:6d} {c / tot:6.1%} {k[:200]}") for k, c in leaf.most_common(25)]
print("-- inclusive")
[print(f"{c:6d} {c / tot:6.1%} {k[:160]}") for k, c in incl.most_common(40)]
