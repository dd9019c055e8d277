#!/usr/bin/env bash
# Runs the conformance client (tests/conformance/run.py, see its README) with a Python 3 that
# has the `cryptography` package: the system's when it has it, else a virtual environment under
# the target directory with it installed from PyPI.
# Usage: tests/conformance/run.sh [--rally PATH] [--bench PATH]
set -euo pipefail
cd "$(dirname "$0")/../.."
python=python3
if ! "$python" -c 'import cryptography' 2>/dev/null; then
    venv="${CARGO_TARGET_DIR:-target}/conformance-venv"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" ||
            { rm -rf "$venv"; python3 -m pip install --user -q cryptography; }
    fi
    if [ -x "$venv/bin/python" ]; then
        "$venv/bin/python" -c 'import cryptography' 2>/dev/null ||
            "$venv/bin/python" -m pip install -q cryptography
        python="$venv/bin/python"
    fi
fi
exec "$python" tests/conformance/run.py "$@"
