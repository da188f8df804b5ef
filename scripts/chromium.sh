#!/usr/bin/env bash
# Install chromium for the HTML report's browser test (tests/reports/test_layout.py), with the system's package
# manager, where this user may: as root, or through sudo without a password. Nothing to do when a chromium is
# on PATH. Exit 0 when chromium is there afterwards, 1 (with one line saying why) when it is not: the
# browser test then fails naming this script (a test skipped on a clean machine would prove nothing).
set -uo pipefail
have() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }
if have; then exit 0; fi
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "setup: chromium not installed (not root and no passwordless sudo): tests/reports/test_layout.py will fail" \
         "until it is (apt-get install chromium, or your system's package)" >&2
    exit 1
fi
echo "setup: installing chromium with the system package manager (for tests/reports/test_layout.py)" >&2
if command -v apt-get >/dev/null 2>&1; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
elif command -v dnf >/dev/null 2>&1; then
    $SUDO dnf install -y -q chromium >/dev/null
elif command -v apk >/dev/null 2>&1; then
    $SUDO apk add -q chromium >/dev/null
elif command -v pacman >/dev/null 2>&1; then
    $SUDO pacman -S --noconfirm --needed chromium >/dev/null
fi
if have; then exit 0; fi
echo "setup: chromium could not be installed with this system's package manager: tests/reports/test_layout.py" \
     "will fail until it is" >&2
exit 1
