#!/bin/bash
# usage: gilprobe.sh OUTPREFIX [extra e2e args]; py-spy on the e2e server child
out=$1; shift
cd /work/wt-servergil; export PYTHONPATH=/work/wt-servergil
nice -n 10 /work/main/.venv/bin/python ${E2E:-benchmarks/client_gil_e2e.py} --texts 48 --repeats ${REPEATS:-8} --threads 4 "$@" > $out.e2e.txt 2>&1 &
e2e=$!
child=""
for i in $(seq 60); do sleep 0.5; child=$(pgrep -P $e2e -f -- "--child"); [ -n "$child" ] && break; done
# wait for the first (computing) pass and the replays to start
for i in $(seq 120); do sleep 0.5; grep -q "texts of" $out.e2e.txt && break; done
sleep 1
/tmp/sg-pyspy/bin/py-spy record -p $child -d 6 -r 100 --nonblocking --idle --threads -f raw -o $out.busy.txt > $out.spy2.log 2>&1
/tmp/sg-pyspy/bin/py-spy record -p $child -d 6 -r 100 --gil --nonblocking -f raw -o $out.gil.txt > $out.spy1.log 2>&1
wait $e2e
cat $out.e2e.txt | tail -2; tail -2 $out.spy1.log $out.spy2.log
