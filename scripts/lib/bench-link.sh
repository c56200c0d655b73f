#!/usr/bin/env bash
# Sourced, not run: what the benchmarks that release through the shaped link
# (sunaba-link) share.

# start_link OUT BIN ADDR [FLAGS...]: sunaba-link (the program BIN) forwarding
# to $SUNABA_REGISTRY, listening on ADDR, with FLAGS (`--rate 100mbit`, `--rtt
# 40ms`), its output in the file OUT; sets link_pid (for the caller's
# cleanup) and admin (its admin endpoints), and exits the script unless it
# listens there within 5 s.
start_link() {
    local out=$1 bin=$2 addr=$3
    shift 3
    "$bin" --upstream "$SUNABA_REGISTRY" --listen "$addr" "$@" >"$out" &
    # shellcheck disable=SC2034 # the caller's cleanup kills it
    link_pid=$!
    for _ in $(seq 50); do
        [[ -s $out ]] && break
        sleep 0.1
    done
    [[ $(head -n1 "$out") == "$addr" ]] || {
        echo "$(basename "$0"): the link did not start on $addr" >&2
        exit 1
    }
    admin=http://$addr/_link
}

# set_shape JSON: the link's bandwidth and latency from now on.
set_shape() { curl -sf -X PUT -H 'Content-Type: application/json' -d "$1" "$admin/shape" >/dev/null; }

# bench_project DIR REPOSITORY: a checkout of HEAD in DIR whose local profile
# releases to REPOSITORY.
bench_project() {
    local dir=$1 repo=$2
    mkdir -p "$dir"
    git archive HEAD | tar -x -C "$dir"
    sed -i "s|^repository = \"127.0.0.1:5000/sunaba/sandbox\"|repository = \"$repo\"|" "$dir/images.toml"
    grep -qF "repository = \"$repo\"" "$dir/images.toml" || {
        echo "$(basename "$0"): images.toml's local profile has no 127.0.0.1:5000/sunaba/sandbox" >&2
        exit 1
    }
}
