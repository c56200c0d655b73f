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

# The image's runtime ENV (the template's posture block, images.toml
# [fragments.*.env]) points caches at the sandbox user's HOME. Fragments run
# as root, a child's after its parent's ENV is in force: keep build-time
# caches in /tmp (sunaba_cleanup empties it; the posture step fails the build
# if anything lands in that HOME) and let pip byte-compile what it installs.
export HOME=/root
export XDG_CACHE_HOME=/tmp/sunaba-build-cache
export NPM_CONFIG_CACHE=/tmp/sunaba-build-cache/npm
unset PYTHONDONTWRITEBYTECODE PYTEST_ADDOPTS

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

# pip_install SPEC...: install into the system interpreter's /usr/local
# prefix. Debian marks its Python externally managed (PEP 668); an image is
# the one place where owning the system interpreter is intended.
pip_install() {
	python3 -m pip install --no-cache-dir --break-system-packages "$@"
}

# npm_install_global NAME@VERSION...: global npm packages under /usr/local.
npm_install_global() {
	npm install --global --omit=dev --no-fund --no-audit --no-update-notifier "$@"
}

# sunaba_cleanup: drop every cache and download the fragment produced, so the
# layer holds only installed files. Call it last, in the same RUN step.
sunaba_cleanup() {
	apt-get clean
	rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
		/var/log/apt/* /var/log/dpkg.log \
		/var/cache/debconf/*-old /var/lib/dpkg/*-old
	rm -rf /root/.cache /root/.npm /root/.config/pip /root/.local/share/uv \
		/usr/local/share/.cache
	# Node writes npm logs and node-gyp headers here; pip and npm unpack here.
	find /tmp /var/tmp -mindepth 1 -maxdepth 1 -exec rm -rf {} +
}
