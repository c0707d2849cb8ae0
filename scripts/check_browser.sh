#!/usr/bin/env bash
# The dashboard's browser test drives Debian's headless Chromium (tests/ui/test_dashboard_browser.py).
# Install it when it is missing and we are root with apt-get; otherwise say plainly why not.
set -u
CHROMIUM=/usr/bin/chromium
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "sluice: installing Debian's chromium for the dashboard's browser test ..." >&2
  if apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; then
    [ -x "$CHROMIUM" ] && exit 0
  fi
  echo "sluice: could not install chromium with apt-get; tests/ui/test_dashboard_browser.py will fail." >&2
  exit 0
fi
echo "sluice: $CHROMIUM is missing and this is not root with apt-get, so it cannot be installed here;" >&2
echo "  tests/ui/test_dashboard_browser.py will fail. Install it: sudo apt-get install -y chromium" >&2
exit 0
