#!/bin/sh
# Fragment `go`: the Go toolchain from Debian (go, gofmt). Runs on base,
# alone or next to python and js.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

apt_install golang-go

sunaba_cleanup
