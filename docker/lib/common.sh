# shellcheck shell=sh
# Shared by every install fragment. Sourced (not executed) from
# /run/sunaba/lib/common.sh, where the rendered Dockerfiles bind-mount
# docker/lib for the duration of one RUN step; nothing here lands in a layer.
#
# Fragments may run alone (python on base) or after one another in the same
# image (full = python + go + js on base): helpers here only add, never remove
# what another fragment installed.

# A TLS-intercepting proxy's CA bundle arrives as an optional BuildKit secret.
# It is only ever referenced by path, so it never enters a layer.
SUNABA_CA_BUNDLE=/run/secrets/ca_bundle
if [ -f "$SUNABA_CA_BUNDLE" ] && [ -s "$SUNABA_CA_BUNDLE" ]; then
	# pip reads PIP_CERT; requests-based tools REQUESTS_CA_BUNDLE; OpenSSL,
	# curl-likes and uv (which adds it to its roots) SSL_CERT_FILE; Node
	# NODE_EXTRA_CA_CERTS (adds to its built-in roots); npm NPM_CONFIG_CAFILE;
	# git GIT_SSL_CAINFO.
	export PIP_CERT="$SUNABA_CA_BUNDLE"
	export REQUESTS_CA_BUNDLE="$SUNABA_CA_BUNDLE"
	export SSL_CERT_FILE="$SUNABA_CA_BUNDLE"
	export CURL_CA_BUNDLE="$SUNABA_CA_BUNDLE"
	export NODE_EXTRA_CA_CERTS="$SUNABA_CA_BUNDLE"
	export NPM_CONFIG_CAFILE="$SUNABA_CA_BUNDLE"
	export GIT_SSL_CAINFO="$SUNABA_CA_BUNDLE"
fi

export DEBIAN_FRONTEND=noninteractive
# Caches would only bloat the layer; version checks and funding notes only
# slow the build down.
export PIP_NO_CACHE_DIR=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_ROOT_USER_ACTION=ignore
export UV_NO_CACHE=1
export NPM_CONFIG_UPDATE_NOTIFIER=false
export NPM_CONFIG_FUND=false
export NPM_CONFIG_AUDIT=false
# npm waits this long for a response to begin (its default is five minutes);
# a request that hangs is then a network error npm_ci_prefix tries again.
# It does not bound a body that is arriving.
export NPM_CONFIG_FETCH_TIMEOUT=60000

# The image's runtime ENV (the template's posture block, images.toml
# [fragments.*.env]) points caches at the sandbox user's HOME. Fragments run
# as root, a child's after its parent's ENV is in force: keep build-time
# caches in /tmp (sunaba_cleanup empties it; the posture step fails the build
# if anything lands in that HOME) and let pip byte-compile what it installs.
export HOME=/root
export XDG_CACHE_HOME=/tmp/sunaba-build-cache
export NPM_CONFIG_CACHE=/tmp/sunaba-build-cache/npm
unset PYTHONDONTWRITEBYTECODE PYTEST_ADDOPTS

# The fragment's lock files (docker/locks/<fragment>/), bind-mounted like
# this directory.
SUNABA_LOCK_DIR=/run/sunaba/lock

# When this step started: sunaba_cleanup clamps the times of every file
# written since to SOURCE_DATE_EPOCH.
_sunaba_step_start=$(date +%s)

sunaba_log() {
	printf 'sunaba: %s\n' "$*" >&2
}

_sunaba_apt_updated=
# apt_install PKG...: install Debian packages without recommends. Versions
# are not pinned here (the archive only serves the current one); the tool
# contract's `min` in images.toml is the guard.
apt_install() {
	if [ -z "$_sunaba_apt_updated" ]; then
		apt-get update
		_sunaba_apt_updated=1
	fi
	apt-get install -y --no-install-recommends "$@"
}

# apt_add_backports: trixie-backports as a deb822 source at the default (low)
# backports priority: only packages named by their backports-only name (or
# with -t) come from it.
apt_add_backports() {
	cat >/etc/apt/sources.list.d/debian-backports.sources <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
	_sunaba_apt_updated=
}

# pip_install SPEC...: install into the system interpreter's /usr/local
# prefix. Debian marks its Python externally managed (PEP 668); an image is
# the one place where owning the system interpreter is intended.
pip_install() {
	python3 -m pip install --no-cache-dir --break-system-packages "$@"
}

# pip_install_locked FILE: every distribution FILE names, each checked
# against the sha256 hashes it carries (pip refuses an unhashed or unlisted
# one), wheels only, no resolution. --ignore-installed: Debian's python3-pip
# pulls python3-packaging, which pip cannot uninstall (no RECORD); the locked
# copy in /usr/local shadows it.
pip_install_locked() {
	pip_install --require-hashes --no-deps --only-binary :all: --ignore-installed -r "$1"
}

# lock_requires FILE NAME==VERSION...: the lock pins what images.toml pins
# (render --check says so first; this names the package if a stale lock
# slips through).
lock_requires() {
	_file=$1
	shift
	for _pin in "$@"; do
		if ! grep -qi "^$_pin " "$_file"; then
			sunaba_log "${_file##*/} does not pin $_pin (re-run \`sunaba-images lock\`)"
			return 1
		fi
	done
}

# npm_ci_prefix DIR LOCKDIR BIN...: install the tree LOCKDIR's package.json
# and package-lock.json describe into DIR/node_modules with `npm ci` (every
# tarball checked against the lock's integrity, nothing resolved), then link
# each BIN into /usr/local/bin. Install scripts run only for the packages the
# lock approves (package.json's allowScripts, which npm 12 enforces); with
# none approved, none run at all.
npm_ci_prefix() {
	_dir=$1 _lock=$2
	shift 2
	mkdir -p "$_dir"
	cp "$_lock/package.json" "$_lock/package-lock.json" "$_dir/"
	if jq -e '(.allowScripts // {}) | length == 0' "$_dir/package.json" >/dev/null; then
		set -- --ignore-scripts "$@"
	elif [ "$(npm --version | cut -d. -f1)" -lt 12 ]; then
		sunaba_log "$_lock approves install scripts (allowScripts), which needs npm 12 or later"
		return 1
	else
		set -- --foreground-scripts "$@"
	fi
	# npm's EINTEGRITY names only the hash: name the package the lock gives it.
	# A network failure (npm already retried each request) is tried again
	# whole, up to three times: npm ci starts from an empty node_modules and
	# the cache keeps what did arrive. A wrong hash is never tried again.
	_err=$(mktemp)
	_attempt=1
	while ! (cd "$_dir" && npm ci "$1" --no-fund --no-audit --no-update-notifier) 2>"$_err"; do
		cat "$_err" >&2
		_code=$(sed -n 's/^npm error code \([A-Z0-9_]*\)$/\1/p' "$_err" | head -n 1)
		# A request that got no response in time is FETCH_ERROR, a code npm
		# shares with errors that are not the network's: the message says which.
		if [ "$_code" = FETCH_ERROR ] && grep -q '^npm error network timeout at: ' "$_err"; then
			_code="FETCH_ERROR (network timeout)"
		fi
		if [ "$_attempt" -lt 3 ] && npm_network_code "$_code"; then
			_delay=$((_attempt * ${SUNABA_NPM_RETRY_SECONDS:-10}))
			sunaba_log "npm ci: network error $_code (attempt $_attempt of 3); trying again in $_delay s"
			sleep "$_delay"
			_attempt=$((_attempt + 1))
			continue
		fi
		_wanted=$(sed -n 's/.*integrity checksum failed when using [a-z0-9]*: wanted \([^ ]*\) but got.*/\1/p' "$_err" | head -n 1)
		if [ -n "$_wanted" ]; then
			_pkg=$(jq -r --arg i "$_wanted" '.packages | to_entries[]
				| select(.value.integrity == $i)
				| "\(.key | sub("^.*node_modules/"; ""))@\(.value.version)"' "$_dir/package-lock.json" | head -n 1)
			sunaba_log "npm ci: ${_pkg:-a package} does not match its integrity in $_lock/package-lock.json (EINTEGRITY)"
		fi
		rm -f "$_err"
		return 1
	done
	rm -f "$_err"
	shift
	for _bin in "$@"; do
		if [ ! -x "$_dir/node_modules/.bin/$_bin" ]; then
			sunaba_log "npm ci in $_dir: no bin $_bin"
			return 1
		fi
		ln -sf "$_dir/node_modules/.bin/$_bin" "/usr/local/bin/$_bin"
	done
}

# npm_network_code CODE: whether npm's error code is the network's (a
# connection that failed or broke, a name that did not resolve, the registry
# busy or down) rather than the request's.
npm_network_code() {
	case "$1" in
	ETIMEDOUT | ESOCKETTIMEDOUT | ERR_SOCKET_TIMEOUT | EAI_AGAIN | ECONNRESET | ECONNREFUSED | \
		ENETUNREACH | EHOSTUNREACH | EPIPE | E429 | E500 | E502 | E503 | E504 | \
		"FETCH_ERROR (network timeout)") return 0 ;;
	*) return 1 ;;
	esac
}

# npm_require_version DIR NAME VERSION: the package npm ci put in DIR is the
# version images.toml pins.
npm_require_version() {
	_got=$(jq -r .version "$1/node_modules/$2/package.json")
	if [ "$_got" != "$3" ]; then
		sunaba_log "$2: the lock installs $_got, images.toml pins $3 (re-run \`sunaba-images lock\`)"
		return 1
	fi
}

# lock_integrity PACKAGE VERSION: the integrity committed for an npm
# registry tarball in the fragment's downloads.lock (PACKAGE VERSION
# INTEGRITY lines); fails naming the package when there is none.
lock_integrity() {
	_line=$(awk -v p="$1" -v v="$2" '$1 == p && $2 == v { print $3 }' "$SUNABA_LOCK_DIR/downloads.lock")
	if [ -z "$_line" ]; then
		sunaba_log "$1@$2: not in downloads.lock (re-run \`sunaba-images lock\`)"
		return 1
	fi
	printf '%s\n' "$_line"
}

# npm_tarball_url PACKAGE VERSION: where the registry serves it.
npm_tarball_url() {
	_registry=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}
	printf '%s/%s/-/%s-%s.tgz\n' "${_registry%/}" "$1" "${1##*/}" "$2"
}

# verify_integrity FILE INTEGRITY NAME: FILE against an SRI value
# (sha512-<base64>, as npm's dist.integrity and package-lock.json write it).
verify_integrity() {
	case "$2" in
	sha512-*) ;;
	*)
		sunaba_log "$3: unsupported integrity $2"
		return 1
		;;
	esac
	_want=$(printf '%s' "${2#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
	_got=$(sha512sum "$1" | cut -d ' ' -f 1)
	if [ "$_want" != "$_got" ]; then
		sunaba_log "$3: integrity mismatch: the lock says $2 (sha512 $_want), the download has sha512 $_got"
		return 1
	fi
}

# fetch_verified PACKAGE VERSION DEST: download an npm registry tarball and
# check it against the integrity committed in downloads.lock (never against
# metadata fetched now) before anything reads it.
fetch_verified() {
	_integrity=$(lock_integrity "$1" "$2")
	curl --fail --silent --show-error --location --retry 4 --retry-connrefused \
		--output "$3" "$(npm_tarball_url "$1" "$2")"
	verify_integrity "$3" "$_integrity" "$1@$2"
}

# sunaba_cleanup: drop every cache and download the fragment produced, so the
# layer holds only installed files. Call it last, in the same RUN step.
sunaba_cleanup() {
	apt-get clean
	rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
		/var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log \
		/var/cache/debconf/*-old /var/lib/dpkg/*-old
	rm -rf /root/.cache /root/.npm /root/.config/pip /root/.local/share/uv \
		/usr/local/share/.cache
	# Node writes npm logs and node-gyp headers here; pip and npm unpack here.
	find /tmp /var/tmp -mindepth 1 -maxdepth 1 -exec rm -rf {} +
	# ldconfig's cache of inode numbers and times differs on every build.
	rm -f /var/cache/ldconfig/aux-cache
	sunaba_clamp_times
}

# sunaba_clamp_times: every file and directory this step wrote gets the time
# SOURCE_DATE_EPOCH (the commit time, a build argument), so a rebuild of the
# same inputs writes the same layer. Files that kept the time their package
# gave them (dpkg, npm tarballs) are older than the step and stay as they are.
# The engine's own mounts (/etc/hosts and friends, the bind-mounted scripts
# and secrets) are not part of the layer and are left alone; a time that
# still cannot be set costs reproducibility, never the build.
sunaba_clamp_times() {
	[ -n "${SOURCE_DATE_EPOCH:-}" ] || return 0
	find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run/sunaba \
		-o -path /run/secrets -o -path /etc/hosts -o -path /etc/hostname \
		-o -path /etc/resolv.conf \) -prune -o -newermt "@$((_sunaba_step_start - 1))" -print0 |
		xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH" ||
		sunaba_log "some file times could not be set to SOURCE_DATE_EPOCH"
}
