#!/bin/sh
# handoffs.sh DIR: per call, in each trace TestForwardTrace wrote to DIR, the
# goroutines made runnable (by the scheduler, which is netpoll or a timer
# run while no goroutine ran; by a running goroutine, with the frame that
# did it) and the processors started (an idle P given work: a thread woken).
for tr in "$1"/*.trace; do
	name=$(basename "$tr" .trace)
	calls=$(cat "$1/$name.calls")
	go tool trace -d=parsed "$tr" 2>/dev/null | awk -v calls="$calls" -v name="$name" '
	function flush() { if (inU) { by[key]++; total++ } inU = 0 }
	/^M=/ { flush() }
	/^M=.*StateTransition.*ProcID=[0-9]+ Idle->Running/ { procs++ }
	/^M=.*StateTransition.*GoID=[0-9]+ Waiting->Runnable/ {
		match($0, / G=-?[0-9]+ /); g = substr($0, RSTART + 3, RLENGTH - 4)
		inU = 1; nst = 0; key = (g == "-1") ? "scheduler (netpoll, timers)" : "goroutine"
		next
	}
	inU && /^\t[a-zA-Z]/ {
		nst++
		if (nst == 2 && key == "goroutine") key = key " " $1
	}
	END {
		flush()
		printf "%s: %.2f unblocks/call, %.2f Ps started/call\n", name, total / calls, procs / calls
		for (k in by) if (by[k] / calls >= 0.01) printf "\t%.2f %s\n", by[k] / calls, k
	}'
done
