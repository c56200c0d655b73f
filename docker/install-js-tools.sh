#!/bin/sh
# Fragment `js`: global JS/TS dev tools on base's Node. A repository's own
# node_modules/.bin wins over these at verify time; these are the fallback.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

: "${ESLINT_VERSION:?set by images.toml}"
: "${TYPESCRIPT_VERSION:?set by images.toml}"
: "${JEST_VERSION:?set by images.toml}"

npm_install_global \
	"eslint@${ESLINT_VERSION}" \
	"typescript@${TYPESCRIPT_VERSION}" \
	"jest@${JEST_VERSION}"

sunaba_cleanup
