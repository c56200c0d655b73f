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
go_seed_build_cache() {
	_goroot=$1
	_seed=/usr/local/lib/sunaba/go-build-seed
	_warm=$(mktemp -d)
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
	(
		cd "$_warm" || exit 1
		export GOCACHE="$_seed" GOTOOLCHAIN=local GOFLAGS='' GOPATH=/tmp/sunaba-gopath
		"$_goroot/bin/go" vet ./...
		"$_goroot/bin/go" test ./...
	)
	rm -rf "$_warm" /tmp/sunaba-gopath
	chmod -R a+rX "$_seed"

	# Never write through a link: that would replace the real binary.
	rm -f /usr/local/bin/go
	cat >/usr/local/bin/go <<WRAPPER
#!/bin/sh
# go: the image's Go ($_goroot). On the first call in a container, seed the
# writable GOCACHE with links to the image's prebuilt standard library
# (docker/lib/go-cache-seed.sh).
seed=$_seed
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
}
