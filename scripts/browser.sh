#!/usr/bin/env bash
# Installs Chromium and its WebDriver from the Debian/Ubuntu packages when they are missing, for the viewer's
# browser tests (tests/cli/test_viewer_browser.py). Needs root (or sudo without a password); without it, or without
# apt-get, it says so and the browser tests skip with that reason.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "browser: no apt-get here; install Chromium and chromedriver to run the viewer's browser tests" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
        echo "browser: not root; run 'apt-get install chromium chromium-driver' to run the viewer's browser tests" >&2
        exit 0
    fi
fi
echo "browser: installing chromium and chromium-driver (Debian packages) for the viewer's browser tests"
$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver \
    >/dev/null || echo "browser: apt-get could not install chromium; the viewer's browser tests will skip" >&2
exit 0
