# shellcheck shell=sh
# go_seed_build_cache GOROOT: a build cache of the standard library for the
# sandbox's GOCACHE, and a `go` wrapper that seeds it. Sourced by
# install-go.sh after the toolchain is installed.
#
# Debian's Go ships no compiled standard library: on the fresh tmpfs HOME of
# every sandbox the first `go vet`/`go test` compiles fmt, testing, ... (42 s
# on two busy cores, measured). Go cannot use a read-only GOCACHE (the first
# entry it has to write is fatal), so the seed is built here and `go`
# (/usr/local/bin, ahead of /usr/bin on PATH) is a wrapper that, on its first
# call in a container, fills the writable $GOCACHE with symbolic links to it
# (~2,500 links, ~0.2 s, no copy) and stamps trim.txt, so the seed's old
# mtimes do not get it trimmed. Packages outside the seed compile and cache
# as usual.
#
# The seed is reproducible (issue 18): Go's compiled packages are, given
# the same sources at the same paths and times, so the warm-up module lives
# at a fixed path (a mktemp name would reach the vet config and action IDs)
# and its files have the time SOURCE_DATE_EPOCH (one action's key holds
# their mtimes: measured, the one entry that differed between builds); the test
# binary is built and run with -count=1, so no test result (which carries
# the run's duration) is cached; and the one clock value Go writes into the
# cache, the time in each `-a` action entry and trim.txt, is set to
# SOURCE_DATE_EPOCH.
#
# Everything runs once. An action whose key held something of the run would
# be a volatile entry: never reused, and a different file name in every
# build. The seed used to run vet and test a second time in the same cache
# to find and drop such entries; with the times above fixed that run added
# nothing (Go 1.27, 2026-12-03), and what it dropped were 11 deterministic
# `srcfiles` lists (and their action entries) of packages only the test
# main links (go/ast, os/signal, runtime/pprof, ...), not volatile, so it
# cost ~4 s (2 % of the seed) for no change in what a sandbox compiles
# (docs/lab-notes.md, "The Go seed's cost"). A volatile action now shows as
# a different `go` (and `full`) image digest between two --no-cache builds:
# scripts/bench-repro, and `pins verify --rebuild` before a release. To find
# one: in a container from the image, vet and test the warm-up module twice
# in one empty GOCACHE; the files the second run adds are the volatile ones.
#
# Go telemetry: in its default mode (local) every go command writes
# counters named after the day to $HOME/.config/go/telemetry. The build
# turns it off (GOTELEMETRY=off for Go versions that read it, the mode file
# for those that do not) and removes that directory; in a sandbox the
# wrapper writes mode `off` on the first call unless the user chose a mode
# (the image's ENV says GOTELEMETRY=off too): nothing a sandbox does is
# collected.
go_telemetry_off() {
	export GOTELEMETRY=off
	mkdir -p "$HOME/.config/go/telemetry"
	printf 'off\n' >"$HOME/.config/go/telemetry/mode"
}

go_seed_build_cache() {
	_goroot=$1
	_seed=/usr/local/lib/sunaba/go-build-seed
	go_telemetry_off
	_warm=/tmp/sunaba-gowarm
	rm -rf "$_warm"
	mkdir -p "$_warm"
	_series=$("$_goroot/bin/go" env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')
	printf 'module sunaba.invalid/gowarm\n\ngo %s\n' "$_series" >"$_warm/go.mod"
	{
		printf '// Package gowarm imports what sandbox projects use most.\npackage gowarm\n\nimport (\n'
		for _pkg in bufio bytes context crypto/sha256 embed encoding/json errors \
			flag fmt io io/fs log log/slog maps math math/rand/v2 net/http \
			net/http/httptest os os/exec path/filepath regexp slices sort \
			strconv strings sync testing time unicode/utf8; do
			printf '\t_ "%s"\n' "$_pkg"
		done
		printf ')\n'
	} >"$_warm/warm.go"
	printf 'package gowarm\n\nimport "testing"\n\nfunc TestWarm(t *testing.T) {}\n' >"$_warm/warm_test.go"
	touch -d "@${SOURCE_DATE_EPOCH:-0}" "$_warm" "$_warm"/*
	(
		cd "$_warm" || exit 1
		export GOCACHE="$_seed" GOTOOLCHAIN=local GOFLAGS='' GOPATH=/tmp/sunaba-gopath
		"$_goroot/bin/go" vet ./...
		"$_goroot/bin/go" test -count=1 ./...
	)
	rm -rf "$_warm" /tmp/sunaba-gopath
	# An action entry is `v1 <action> <output> <size:%20d> <time:%20d>\n`
	# (175 bytes; Go refuses any other length): the time becomes
	# SOURCE_DATE_EPOCH in nanoseconds, the rest stays. One sed per batch of
	# files: ~1,750 entries, for which an awk and a mv each took 22-25 s
	# (~10 % of the seed), this under 4 s. An entry it did not
	# rewrite fails the build here rather than as a digest that differs
	# between builds.
	_ns=$(printf '%20s' "${SOURCE_DATE_EPOCH:-0}000000000")
	find "$_seed" -type f -name '*-a' -exec sed -i -E \
		"s/^(v1 [0-9a-f]{64} [0-9a-f]{64} [ 0-9]{20}) [ 0-9]{20}\$/\\1 $_ns/" {} +
	_unrewritten=$(find "$_seed" -type f -name '*-a' -exec grep -L -x -E \
		"v1 [0-9a-f]{64} [0-9a-f]{64} [ 0-9]{20} $_ns" {} + || :)
	[ -z "$_unrewritten" ] || {
		sunaba_log "go seed: action entries not in Go's format, their times not rewritten: $_unrewritten"
		exit 1
	}
	printf '%s\n' "${SOURCE_DATE_EPOCH:-0}" >"$_seed/trim.txt"
	chmod -R a+rX "$_seed"

	# Never write through a link: that would replace the real binary.
	rm -f /usr/local/bin/go
	cat >/usr/local/bin/go <<WRAPPER
#!/bin/sh
# go: the image's Go ($_goroot). On the first call in a container, seed the
# writable GOCACHE with links to the image's prebuilt standard library
# (docker/lib/go-cache-seed.sh).
seed=$_seed
# Telemetry off unless the user chose a mode (go telemetry on|local|off).
telemetry="\${XDG_CONFIG_HOME:-\${HOME:-/nonexistent}/.config}/go/telemetry"
if [ ! -e "\$telemetry/mode" ] && mkdir -p "\$telemetry" 2>/dev/null; then
	printf 'off\\n' >"\$telemetry/mode" 2>/dev/null
fi
if [ -n "\${GOCACHE:-}" ] && [ ! -e "\$GOCACHE/README" ] && [ -d "\$seed" ] &&
	mkdir -p "\$GOCACHE" 2>/dev/null && [ -w "\$GOCACHE" ]; then
	cp -as "\$seed/." "\$GOCACHE/" 2>/dev/null
	rm -f "\$GOCACHE/trim.txt"
	date +%s >"\$GOCACHE/trim.txt" 2>/dev/null
fi
exec $_goroot/bin/go "\$@"
WRAPPER
	chmod 0755 /usr/local/bin/go
	# The wrapper must reach the real Go, not itself.
	[ "$(/usr/local/bin/go env GOROOT)" = "$_goroot" ] || {
		sunaba_log "go wrapper: \`go env GOROOT\` is not $_goroot"
		exit 1
	}
	# Last: the wrapper's check above would write the mode file again.
	rm -rf "$HOME/.config/go"
	rmdir "$HOME/.config" 2>/dev/null || true
}
