#!/usr/bin/env bash
# The system packages the test suite needs that pip cannot install: Debian's Chromium,
# which the web console's browser tests drive through Playwright (from the test extra;
# Playwright is given this Chromium and downloads no browser of its own).
#
# Does nothing when Chromium is there (/usr/bin/chromium, or $ODRADEK_CHROMIUM); else
# installs Debian's `chromium` package with apt-get, as root or through sudo. On a
# machine without apt-get it says what to do and fails, rather than let the browser
# tests fail later.
set -euo pipefail

chromium="${ODRADEK_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "test-system-deps: no Chromium at $chromium and no apt-get to install it:" \
        "install Chromium, and set ODRADEK_CHROMIUM to its path if it is elsewhere" >&2
    exit 1
fi
as_root=()
if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "test-system-deps: installing chromium needs root (or sudo)" >&2
        exit 1
    fi
    as_root=(sudo)
fi
echo "test-system-deps: installing Debian's chromium for the console's browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q >&2
"${as_root[@]}" apt-get install -y -q chromium >&2
