# Shell functions the benchmark scripts share; source it from a script
# after cd-ing to the repository's root: . scripts/lib.sh

# free_port prints a loopback port nothing listens on, never one it
# printed before (listed in $tmp/ports: the caller's temporary directory).
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		if ! grep -qx "$p" "$tmp/ports" 2>/dev/null && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p" >>"$tmp/ports"
			echo "$p"
			return
		fi
	done
}

# wait_port PORT waits up to 10 s for a listener on PORT, and exits the
# script if none comes.
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
		sleep 0.1
	done
	echo "$(basename "$0"): nothing listens on port $1" >&2
	exit 1
}

# cpu PID prints its user and system time in clock ticks.
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# build_ab REV builds limiterd at the git revision REV ($tmp/limiterd-A,
# from a worktree at $tmp/a that remove_ab removes) and in the working
# tree ($tmp/limiterd-B), and limiter-bench ($tmp/limiter-bench).
build_ab() {
	git worktree add --quiet --detach "$tmp/a" "$1"
	(cd "$tmp/a" && go build -o "$tmp/limiterd-A" ./cmd/limiterd)
	go build -o "$tmp/limiterd-B" ./cmd/limiterd
	go build -o "$tmp/limiter-bench" ./cmd/limiter-bench
}

# remove_ab removes build_ab's worktree and $tmp.
remove_ab() {
	git worktree remove --force "$tmp/a" 2>/dev/null || true
	rm -rf "$tmp"
}
