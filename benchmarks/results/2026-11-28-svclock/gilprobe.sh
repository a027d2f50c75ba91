#!/bin/bash
# gilprobe.sh TREE OUTPREFIX [extra e2e args]: py-spy --gil on the e2e server child of TREE
tree=$1; out=$2; shift 2
cd $tree; export PYTHONPATH=$tree
nice -n 10 /work/main/.venv/bin/python benchmarks/client_gil_e2e.py --texts 48 --repeats ${REPEATS:-8} --threads 4 "$@" > $out.e2e.txt 2>&1 &
e2e=$!
child=""
for i in $(seq 60); do sleep 0.5; child=$(pgrep -P $e2e -f -- "--child"); [ -n "$child" ] && break; done
for i in $(seq 120); do sleep 0.5; grep -q "texts of" $out.e2e.txt && break; done
sleep 1
/tmp/sg-pyspy/bin/py-spy record -p $child -d 6 -r 100 --gil --nonblocking -f raw -o $out.gil.txt > $out.spy1.log 2>&1
wait $e2e
echo "$(basename $tree) $(grep -c . $out.gil.txt) stacks, $(awk '{s+=$NF} END {print s}' $out.gil.txt) lock samples of 600; $(tail -1 $out.e2e.txt)"
