#!/bin/sh
# Fragment `go`: the Go toolchain (go, gofmt) of the series images.toml pins
# (GO_SERIES), from trixie-backports. Runs on base, alone or next to python
# and js.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh
# shellcheck source=docker/lib/go-cache-seed.sh
. /run/sunaba/lib/go-cache-seed.sh

: "${GO_SERIES:?set by images.toml}"

# golang-$GO_SERIES-go exists only in trixie-backports, so naming it is
# enough (backports stays at priority 100 for everything else). trixie's own
# golang-go is 1.24: a module whose go.mod says `go 1.25` or later would not
# build with GOTOOLCHAIN=local.
apt_add_backports
# Go's own test suite and the standard library's testdata (~54 MB) are never
# read by a sandbox's go vet/test/build (dpkg's globs match across '/').
cat >/etc/dpkg/dpkg.cfg.d/sunaba-go <<'DPKG'
path-exclude /usr/share/go-*/test/*
path-exclude /usr/share/go-*/src/*/testdata/*
DPKG
apt_install "golang-$GO_SERIES-go"

# The package ships no /usr/bin/go (that is golang-go's, which would pull in
# 1.24). Go finds its GOROOT from its own path through the links; `go` on
# PATH is the seeding wrapper go_seed_build_cache writes (a file of its own:
# a link here would have the wrapper overwrite the real binary through it).
ln -sfn "go-$GO_SERIES" /usr/lib/go
ln -sf "/usr/lib/go-$GO_SERIES/bin/gofmt" /usr/local/bin/gofmt

go_seed_build_cache "/usr/lib/go-$GO_SERIES"
sunaba_cleanup
