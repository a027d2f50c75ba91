#!/bin/bash
# spy_ab.sh TAG ROUNDS [send_drain args]: py-spy --gil (200 Hz) on send_drain.py, the trees $BASE (before)
# and $NEW (after) alternating (NEW first in even rounds); raw stacks and outputs to $OUT/TAG-*,
# a line a run to $OUT/TAG.txt (the drain threads' lock samples: handler, encode, codec pool, batcher)
tag=$1; rounds=$2; shift 2
for r in $(seq $rounds); do
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for t in $order; do
    if [ $t = base ]; then tree=$BASE; else tree=$NEW; fi
    cd $tree
    PYTHONPATH=$tree nice -n 10 ${PYSPY:-py-spy} record --gil -r 200 -f raw -o $OUT/$tag-$t-r$r.gil.txt -- /work/main/.venv/bin/python benchmarks/send_drain.py "$@" > $OUT/$tag-$t-r$r.out 2>&1
    n=$(grep -E "main.<locals>.drain|prefetch.<locals>.produce|_worker \(concurrent|_Threads._serve|MicroBatcher._loop" $OUT/$tag-$t-r$r.gil.txt | awk '{s+=$NF} END {print s}')
    echo "$t r$r: drain-thread lock samples $n; $(grep texts $OUT/$tag-$t-r$r.out)" >> $OUT/$tag.txt
  done
done
