# bench/procs.sh — sourced by the bench scripts that start processes: every
# process started with `start` is killed when the script exits. Needs $OUT.

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
start() { # start NAME CMD… (background, log in $OUT/NAME.log, PID in NAME_pid)
  local name=$1; shift
  "$@" >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}
wait_port() { # wait_port PORT: until something accepts connections there
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing answers on port $1" >&2; exit 1
}
