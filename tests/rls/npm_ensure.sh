#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs the gRPC client tests/integration/test_rls.c uses (tests/rls/
# package.json, pinned by package-lock.json) into a cache directory outside
# the repository, once per lock file, and prints its node_modules path.
#   tests/rls/npm_ensure.sh        exit 0: path printed; 77: npm or the
#                                  registry unreachable (the test skips);
#                                  1: anything else
# The cache: $DIVVY_NPM_CACHE, else /var/cache/divvy-npm when writable, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/divvy-npm; one directory per lock hash.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "npm_ensure: node or npm missing (apt-get install nodejs npm)" >&2
    exit 77
fi
if [ -n "${DIVVY_NPM_CACHE:-}" ]; then
    base=$DIVVY_NPM_CACHE
elif mkdir -p /var/cache/divvy-npm 2>/dev/null && [ -w /var/cache/divvy-npm ]; then
    base=/var/cache/divvy-npm
else
    base=${XDG_CACHE_HOME:-$HOME/.cache}/divvy-npm
fi
hash=$(sha256sum "$here/package-lock.json" | cut -c1-16)
dir=$base/$hash
if [ -f "$dir/.complete" ]; then
    echo "$dir/node_modules"
    exit 0
fi
mkdir -p "$base" || exit 1
# An unreachable registry fails within seconds, not npm's minutes of retries.
fetch="--fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000"
tmp=$(mktemp -d "$base/.install.XXXXXX") || exit 1
cp "$here/package.json" "$here/package-lock.json" "$tmp/"
# No install scripts: the client needs none (protobufjs' only prints a notice).
# shellcheck disable=SC2086
if ! (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error $fetch \
        --cache "$base/.npm" >"$tmp/npm.log" 2>&1); then
    # shellcheck disable=SC2086
    if ! npm ping $fetch --cache "$base/.npm" >/dev/null 2>&1; then
        echo "npm_ensure: the npm registry is unreachable" >&2
        rm -rf "$tmp"
        exit 77
    fi
    cat "$tmp/npm.log" >&2
    rm -rf "$tmp"
    exit 1
fi
touch "$tmp/.complete"
# Another run may have finished first: keep whichever is there.
mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
echo "$dir/node_modules"
