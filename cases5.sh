case_() { for s in SIGINT SIGTERM SIGKILL; do python3 sweep.py "$1" $s "$2" "${@:3}"; done; }
case_ try-aff-bursty 4 try pid:16681.affinity=0 --no-history
case_ try-aff-cmd 4 try pid:16681.affinity=0 --no-history --measure 'cmd:sh -c "sleep 8 & sleep 9; echo 5"' --metric '(?P<value>\d+)'
