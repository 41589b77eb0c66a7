#!/usr/bin/env bash
# A newcomer's first minutes (issue 15), run by .ci/run after the test suite: a fresh clone, the Quick
# start's `make run` (fresh venv, simulator-only install), a second `make run` (must not install again),
# then every command of the README's first "Using it" block that is not marked (minutes) or (server),
# exactly as printed, each within 60 s; then the README's live-service lines marked (live), as written: the
# extras' install, a local launch, `serve ... &` (kept running until the end), a submission that must succeed.
# Exits non-zero on the first failure.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/elastisched"
[ -d "$src/../shared" ] && ln -s "$(cd "$src/../shared" && pwd)" "$work/shared"
cd "$work/elastisched"

echo "==> newcomer: make run (fresh clone)"
make run > make-run.log 2>&1 || { tail -40 make-run.log; exit 1; }
grep -q "Report: results/quickstart/report.html" make-run.log
t0=$(date +%s)
make run > make-run2.log 2>&1 || { tail -40 make-run2.log; exit 1; }
t1=$(date +%s)
if grep -q "pip install" make-run2.log; then echo "second make run installed again"; exit 1; fi
echo "    second make run (no install): $((t1 - t0)) s"

# shellcheck disable=SC1091
source .venv/bin/activate
python3 - > commands.txt <<'PY'
import re
text = open("README.md", encoding="utf-8").read()
block = re.search(r"## Using it.*?```bash\n(.*?)```", text, re.S).group(1)
cmd = ""
for line in block.splitlines():
    cmd += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
    if line.rstrip().endswith("\\"):
        continue
    if cmd.strip() and "(minutes)" not in cmd and "(server)" not in cmd:
        print(cmd.strip())
    cmd = ""
PY
n=0
while IFS= read -r c; do
  n=$((n + 1))
  echo "==> newcomer: $c"
  s=$(date +%s)
  timeout 60 bash -c "$c" > out.log 2>&1 || { echo "FAILED (or over 60 s): $c"; tail -30 out.log; exit 1; }
  echo "    ok in $(( $(date +%s) - s )) s"
done < commands.txt
[ "$n" -ge 5 ] || { echo "only $n README commands found"; exit 1; }

python3 - > live.txt <<'PY'
import re
text = open("README.md", encoding="utf-8").read()
for block in re.findall(r"```bash\n(.*?)```", text.split("## Using it", 1)[1].split("\n## ", 1)[0], re.S):
    for line in block.splitlines():
        if "(live)" in line:
            print(line.strip())
PY
[ "$(wc -l < live.txt)" -ge 4 ] || { echo "the README's (live) lines are missing"; cat live.txt; exit 1; }
server_pid=""
stop_server() {  # the server's whole session (serve and its jobs); SIGINT first, then whatever is left
  if [ -n "$server_pid" ]; then
    kill -INT -- "-$server_pid" 2>/dev/null || true
    sleep 2
    kill -KILL -- "-$server_pid" 2>/dev/null || true
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT
while IFS= read -r c; do
  echo "==> newcomer (live): $c"
  code="${c%%#*}"
  if [[ "$code" =~ \&[[:space:]]*$ ]]; then  # a server: started in the background, kept until the end
    setsid bash -c "${code%&*}" > serve.log 2>&1 &
    server_pid=$!
    for _ in $(seq 120); do grep -q "^per-user tokens" serve.log && break; sleep 1; done
    grep -q "^per-user tokens" serve.log || { echo "serve did not start"; tail -30 serve.log; exit 1; }
    continue
  fi
  timeout 900 bash -c "$c" > out.log 2>&1 || { echo "FAILED: $c"; tail -30 out.log; tail -20 serve.log; exit 1; }
  cat out.log | tail -5
done < live.txt
[ -n "$server_pid" ] || { echo "no (live) server line"; exit 1; }
for _ in $(seq 180); do
  states=$(elastisched ls --json | python3 -c "import json,sys; print(' '.join(j['state'] for j in json.load(sys.stdin)))")
  case "$states" in *PENDING*|*RUNNING*|*RESTARTING*|*SUSPENDED*|"") sleep 1 ;; *) break ;; esac
done
echo "    submitted jobs: $states"
[[ "$states" =~ ^(SUCCEEDED ?)+$ ]] || { echo "the README's submission did not succeed: $states"; tail -30 serve.log; exit 1; }
stop_server
server_pid=""
echo "newcomer: make run twice, $n README commands and the README's live-service lines passed"
