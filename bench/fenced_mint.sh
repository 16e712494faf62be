#!/usr/bin/env bash
# What a fenced acquisition costs Redis, exactly: instructions the server
# executes per call of lua/lock/acquire.lua with a fencing counter (a new
# hold by one owner, over and over), counted with callgrind as
# (I(12 000 calls) - I(2 000 calls)) / 10 000, so start-up cancels out;
# and the Redis commands the script runs per call (INFO commandstats).
# Compares the working tree's script with the one at a git revision:
#
#   bash bench/fenced_mint.sh e4ec2bf~1     # the INCR mint before issue 36
#
# Needs redis-server, redis-cli, redis-benchmark and valgrind
# (apt-get install redis-server valgrind). Takes about a minute.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev="${1:?usage: bench/fenced_mint.sh <git revision to compare with>}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
git show "$rev:lua/lock/acquire.lua" >"$dir/before.lua"
cp lua/lock/acquire.lua "$dir/now.lua"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Instructions of a server that ran the script $2 times ($1: before|now).
instructions() {
    local port out
    port="$(free_port)"
    out="$dir/callgrind.$1.$2"
    valgrind --tool=callgrind --callgrind-out-file="$out" \
        redis-server --port "$port" --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
    local sha
    sha="$(redis-cli -p "$port" script load "$(cat "$dir/$1.lua")")"
    redis-benchmark -p "$port" -c 1 -n "$2" -q evalsha "$sha" 6 lk mk qk gk rk ctr 30000 owner:1 1 >/dev/null
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    callgrind_annotate "$out" | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,
}

# Redis commands the script runs per call, by name ($1: before|now).
commands() {
    local port
    port="$(free_port)"
    redis-server --port "$port" --save "" --appendonly no --dir "$dir" --daemonize yes \
        --pidfile "$dir/commands.pid" >/dev/null
    for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    local sha
    sha="$(redis-cli -p "$port" script load "$(cat "$dir/$1.lua")")"
    redis-cli -p "$port" evalsha "$sha" 6 lk mk qk gk rk ctr 30000 owner:1 1 >/dev/null
    redis-cli -p "$port" config resetstat >/dev/null
    redis-benchmark -p "$port" -c 1 -n 1000 -q evalsha "$sha" 6 lk mk qk gk rk ctr 30000 owner:1 1 >/dev/null
    redis-cli -p "$port" info commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_\([a-z]*\):calls=\([0-9]*\),.*/\1 \2/p' |
        awk '$1 != "evalsha" && $1 != "config" { printf "%s %.1f  ", $1, $2 / 1000; n += $2 } END { printf "(%.1f in all)\n", n / 1000 }'
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
}

printf '%-8s %22s   %s\n' script "instructions per call" "commands per call"
for which in before now; do
    a="$(instructions "$which" 2000)"
    b="$(instructions "$which" 12000)"
    printf '%-8s %22s   %s\n' "$which" "$(((b - a) / 10000))" "$(commands "$which")"
done
