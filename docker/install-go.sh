#!/bin/sh
# Fragment `go`: the Go toolchain from Debian (go, gofmt). Runs on base,
# alone or next to python and js.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh
# shellcheck source=docker/lib/go-cache-seed.sh
. /run/sunaba/lib/go-cache-seed.sh

apt_install golang-go

go_seed_build_cache "$(go env GOROOT)"
sunaba_cleanup
