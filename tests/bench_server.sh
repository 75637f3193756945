# Sourced by the bench tests (after setting $duet and $demo): a scratch folder $work, removed at exit with any server
# still running; start() runs `duet serve` on the demo with the given flags on a free port and sets $server and $url;
# stop() ends it.
work=$(mktemp -d)
server=""
trap '[[ -z $server ]] || kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
start() {
  # The files exist before the server's shell opens them: the loop below may read before the background job runs
  # (session 62: sed found no serve.out 0.05 s in, and `set -e` ended the test).
  : >"$work/serve.out"
  : >"$work/serve.log"
  "$duet" serve "$demo" --backend cpu --port 0 --parallel 2 "$@" >"$work/serve.out" 2>"$work/serve.log" &
  server=$!
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/serve.out")
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; echo "FAIL: duet serve exited"; exit 1; }
    sleep 0.2
  done
  url=http://127.0.0.1:$port
}
stop() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }
