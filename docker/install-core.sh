#!/bin/sh
# Fragment `core` (variant base): the language-neutral tools every sandbox
# owes. Tools and their contracts: [fragments.core] / [tools.*] in images.toml.
set -eu
# shellcheck source=docker/lib/common.sh
. /run/sunaba/lib/common.sh

: "${NPM_VERSION:?set by images.toml}"
: "${AST_GREP_VERSION:?set by images.toml}"

# No `npm` package: Debian's pulls ~350 node-* packages, python3 and
# libssl-dev (~400 MB) and cannot be pinned. npm comes from its registry below.
apt_install \
	ca-certificates \
	git \
	gh \
	ripgrep \
	sd \
	fd-find \
	universal-ctags \
	jq \
	nodejs \
	tzdata

# Debian installs fd as `fdfind` (a name clash with fdclone); the sandbox
# answers to `fd`.
ln -sf /usr/bin/fdfind /usr/local/bin/fd

# npm, pinned, from the npm registry. There is no npm yet to fetch it with, so
# Node does: it checks the tarball against the registry's sha512 integrity,
# exactly as npm would. The tarball bundles all of npm's dependencies.
work=$(mktemp -d)
node - "$NPM_VERSION" "$work/npm.tgz" <<'JS'
'use strict';
const https = require('https');
const crypto = require('crypto');
const fs = require('fs');

const [version, dest] = process.argv.slice(2);
const registry = (process.env.NPM_CONFIG_REGISTRY || 'https://registry.npmjs.org').replace(/\/+$/, '');

function get(url, redirects = 5) {
  return new Promise((resolve, reject) => {
    https.get(url, (res) => {
      if (res.statusCode >= 300 && res.statusCode < 400 && res.headers.location && redirects > 0) {
        res.resume();
        resolve(get(new URL(res.headers.location, url).toString(), redirects - 1));
        return;
      }
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`GET ${url}: HTTP ${res.statusCode}`));
        return;
      }
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks)));
      res.on('error', (e) => reject(new Error(`GET ${url}: ${e.message}`)));
    }).on('error', (e) => reject(new Error(`GET ${url}: ${e.message}`)));
  });
}

// Registries and resolvers have transient failures (EAI_AGAIN, resets, 5xx);
// npm itself retries, so this does too. A 4xx is final.
async function fetchRetrying(url) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await get(url);
    } catch (e) {
      if (attempt >= 4 || / HTTP 4[0-9][0-9]$/.test(e.message)) throw e;
      console.error(`sunaba: ${e.message}; retrying (${attempt}/3)`);
      await new Promise((r) => setTimeout(r, 2000 * 2 ** (attempt - 1)));
    }
  }
}

(async () => {
  const meta = JSON.parse(await fetchRetrying(`${registry}/npm/${version}`));
  const integrity = meta.dist.integrity;
  const dash = integrity.indexOf('-');
  const algo = integrity.slice(0, dash);
  const want = integrity.slice(dash + 1);
  const tgz = await fetchRetrying(meta.dist.tarball);
  const got = crypto.createHash(algo).update(tgz).digest('base64');
  if (got !== want) {
    throw new Error(`npm ${version}: integrity mismatch: registry says ${integrity}, got ${algo}-${got}`);
  }
  fs.writeFileSync(dest, tgz);
})().catch((e) => {
  console.error(`sunaba: fetching npm ${version} failed: ${e.message}`);
  process.exit(1);
});
JS
npm_dir=/usr/local/lib/node_modules/npm
mkdir -p "$npm_dir"
tar -xzf "$work/npm.tgz" -C "$npm_dir" --strip-components=1 --no-same-owner
ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
# npm's builtin config (read from its own directory). Node lives in /usr, so
# npm would otherwise install globals into dpkg's /usr/lib/node_modules. The
# sandbox runs offline: no update or funding checks.
cat > "$npm_dir/npmrc" <<'NPMRC'
prefix=/usr/local
update-notifier=false
fund=false
audit=false
NPMRC

# ast-grep is not packaged by Debian. @ast-grep/cli would install three 45 MB
# copies of the binary, so take the one platform package it depends on and
# install just its binary.
case "$(dpkg --print-architecture)" in
amd64) ast_grep_pkg=cli-linux-x64-gnu ;;
arm64) ast_grep_pkg=cli-linux-arm64-gnu ;;
*)
	sunaba_log "ast-grep: no prebuilt package for $(dpkg --print-architecture)"
	exit 1
	;;
esac
mkdir "$work/ast-grep"
npm pack --silent --pack-destination "$work/ast-grep" "@ast-grep/${ast_grep_pkg}@${AST_GREP_VERSION}" >/dev/null
tar -xzf "$work/ast-grep/"*.tgz -C "$work/ast-grep" --no-same-owner package/ast-grep
install -m 0755 "$work/ast-grep/package/ast-grep" /usr/local/bin/ast-grep
# The design note's name for it: /usr/local/bin comes before login's
# /usr/bin/sg (newgrp) on PATH, so `sg` is ast-grep.
ln -sf ast-grep /usr/local/bin/sg

rm -rf "$work"
sunaba_cleanup
