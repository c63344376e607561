#!/bin/bash
# Seed 003's spike against hooklane as Procfile runs it: `hooklane web` and
# `hooklane worker` as processes of their own beside a redis-server of their
# own, 4 subscribers on a receiver answering 200, and vegeta (an open-loop
# generator in its own process) posting single events: 200/s for 10 s,
# 2,000/s for 15 s, 200/s for 20 s, one token at the ingest limit of 1,000/s
# + 2,000 burst. Everything on 127.0.0.1. It prints, per stage, the answers
# by status and the accepted publishes' latency (p50, p99, max), vegeta's CPU
# (seed 003: under 60 % of a core, or the run measured the generator), and
# what the receiver got. deploy/BENCHMARKS.md, "The publish path under a
# spike".
#
#   make build && deploy/spike-vegeta.sh
#   NOWORKER=1 deploy/spike-vegeta.sh            # the publish path alone
#   BIN=/path/to/hooklane deploy/spike-vegeta.sh # another build
#
# Needs redis-server, python3, and Go to fetch vegeta (v12.13.0) once.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/.hooklane/bin/hooklane}
D=$(mktemp -d /tmp/hooklane-spike.XXXXXX)
RP=${REDIS_PORT:-26400} WP=${WEB_PORT:-18080} SP=${SINK_PORT:-18090}
TOK=spike-token-0123456789abcdef
pids=()
cleanup() { # the processes first, so that the worker stops with its Redis
	kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
	redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
}
trap cleanup EXIT

GOBIN=$D go install github.com/tsenart/vegeta/v12@v12.13.0
mkdir "$D/sink"
cat >"$D/sink/main.go" <<'GO'
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
)

func main() {
	var n atomic.Int64
	http.HandleFunc("/got", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, n.Load()) })
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); n.Add(1) })
	fmt.Fprintln(os.Stderr, http.ListenAndServe("127.0.0.1:"+os.Args[1], nil))
}
GO
printf 'module sink\ngo 1.26\n' >"$D/sink/go.mod"
(cd "$D/sink" && go build -o sink .)

redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --logfile "$D/redis.log"
"$D/sink/sink" "$SP" 2>"$D/sink.log" &
pids+=($!)
export REDIS_URL=redis://127.0.0.1:$RP/0 HOOKLANE_API_TOKEN=$TOK HOOKLANE_ALLOWED_CIDRS=127.0.0.0/8
HOOKLANE_ADDR=127.0.0.1:$WP "$BIN" web >"$D/web.log" 2>&1 &
pids+=($!)
if [ -z "${NOWORKER:-}" ]; then
	"$BIN" worker >"$D/worker.log" 2>&1 &
	pids+=($!)
fi
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$WP/readyz" >/dev/null && break; sleep 0.2; done
for i in 0 1 2 3; do
	curl -sf -o /dev/null -X PUT -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' \
		-d "{\"url\":\"http://127.0.0.1:$SP/s$i\",\"event_types\":[\"video.*\"],\"rate_limit\":{\"rate\":100000,\"burst\":100000,\"period\":\"1s\"},\"max_in_flight\":1000}" \
		"http://127.0.0.1:$WP/v1/subscribers/s$i"
done

# vegeta's targets: one event each, a new id each
python3 - "$D" "$WP" "$TOK" <<'PY'
import base64, json, sys
d, port, tok = sys.argv[1:]
def targets(name, first, n):
    with open(f"{d}/{name}.json", "w") as f:
        for i in range(first, first + n):
            body = json.dumps({"id": "e%06d" % i, "type": "video.trending",
                               "data": {"video_id": "vv_%06x" % i, "region": "NL", "velocity": 224.0}})
            f.write(json.dumps({"method": "POST", "url": f"http://127.0.0.1:{port}/v1/events",
                                "body": base64.b64encode(body.encode()).decode(),
                                "header": {"Authorization": ["Bearer " + tok], "Content-Type": ["application/json"]}}) + "\n")
targets("before", 0, 2000)
targets("spike", 2000, 30000)
targets("after", 32000, 4000)
PY
for stage in "before 200 10s" "spike 2000 15s" "after 200 20s"; do
	set -- $stage
	/usr/bin/time -f "$1: vegeta CPU %U s user + %S s system over $3" -a -o "$D/cpu.log" \
		"$D/vegeta" attack -format=json -targets="$D/$1.json" -rate="$2/s" -duration="$3" \
		-workers=50 -max-workers=5000 -name="$1" >"$D/$1.bin"
done
for stage in before spike after; do
	"$D/vegeta" encode --to csv <"$D/$stage.bin" | python3 -c '
import csv, math, sys
took, codes = [], {}
for r in csv.reader(sys.stdin):
    codes[r[1]] = codes.get(r[1], 0) + 1
    if r[1] == "202":
        took.append(int(r[2]) / 1e6)
took.sort()
q = lambda p: took[max(0, math.ceil(p * len(took)) - 1)] if took else 0
print("%-6s %d answered, by status %s; accepted p50 %.1f, p99 %.1f, max %.1f ms" % (sys.argv[1], sum(codes.values()), dict(sorted(codes.items())), q(0.5), q(0.99), q(1)))
' "$stage"
done
cat "$D/cpu.log"
sleep 3
echo "the receiver got $(curl -s "http://127.0.0.1:$SP/got") requests (4 a publish accepted when a worker ran); logs in $D"
