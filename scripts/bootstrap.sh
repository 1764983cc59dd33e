#!/usr/bin/env bash
# Creates .venv with a Python >= 3.12 found on this machine and installs strands-tito with its dev tools: the four
# distributions of this repository (core/, exporters/, collector/ and the root's agent side), all editable.
# Re-running is cheap: it reinstalls only when a pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    local candidates=(python3.13 python3.12 python3)
    if command -v pyenv >/dev/null 2>&1; then
        local root; root=$(pyenv root)
        for v in "$root"/versions/3.1[2-9]*/bin/python "$root"/versions/3.1[2-9]*.*/bin/python; do
            [ -x "$v" ] && candidates+=("$v")
        done
    fi
    for c in "${candidates[@]}"; do
        if command -v "$c" >/dev/null 2>&1 &&
            "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

stamp=.venv/.installed
want=$(cat pyproject.toml core/pyproject.toml exporters/pyproject.toml collector/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

if [ ! -x .venv/bin/python ]; then
    py=$(find_python) || {
        echo "strands-tito needs Python >= 3.12 (with venv). None found: tried python3.13, python3.12, python3" >&2
        echo "and pyenv's versions. Install one, e.g. 'pyenv install 3.12' or your OS package python3.12-venv." >&2
        exit 1
    }
    echo "bootstrap: creating .venv with $py ($("$py" --version))"
    "$py" -m venv .venv
fi
# pip's own output, condensed to a line per distribution of the checkout and one every ten packages (the first install takes minutes and would
# otherwise be silent), its errors and warnings passed on; all of it in .venv/pip-install.log. Unbuffered, so that
# each line shows when pip writes it.
progress() {
    local started=$SECONDS seen=0 line name
    while IFS= read -r line; do
        case "$line" in
        Obtaining*)
            name=${line#Obtaining file://"$PWD"}
            echo "bootstrap: preparing .$name from the checkout ($((SECONDS - started)) s)" ;;
        Collecting* | "Requirement already satisfied"*)
            seen=$((seen + 1))
            if [ $((seen % 10)) -eq 1 ]; then
                name=${line#*: }; name=${name#Collecting }
                echo "bootstrap: $seen packages checked ($((SECONDS - started)) s; now ${name%% *})"
            fi ;;
        "Installing collected packages"*)
            echo "bootstrap: $seen packages checked; installing ($((SECONDS - started)) s)" ;;
        "Successfully installed"*)
            echo "bootstrap: installed in $((SECONDS - started)) s" ;;
        *"is ignored"*) ;;
        ERROR* | error* | WARNING*) echo "$line" ;;
        esac
    done
}

echo "bootstrap: installing strands-tito and its dev tools into .venv (the first time takes a few minutes)"
PYTHONUNBUFFERED=1 .venv/bin/python -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
PYTHONUNBUFFERED=1 .venv/bin/python -m pip install --progress-bar off -e ./core -e ./exporters -e ./collector \
    -e ".[dev]" 2>&1 | tee .venv/pip-install.log | progress || true
# fail here if the install did not work
if ! .venv/bin/python -c "import strands_tito, strands_tito.trajectory, strands_tito.collector, pytest, mypy"; then
    echo "bootstrap: the install did not work; the end of pip's output (all of it: .venv/pip-install.log):" >&2
    tail -n 30 .venv/pip-install.log >&2
    exit 1
fi
echo "$want" > "$stamp"
