#!/usr/bin/env bash
# The action's first step (action.yml): the Python that runs reporter, as the step output
# `python`. With $INPUT_PYTHON, that interpreter, which must import reporter; without it,
# scripts/setup.sh sets reporter up in this copy's .venv (it reuses an installed torch),
# without the test tools (pytest, transformers, ...) that a job does not run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'reporter: error [action]: %s\n' "$*" >&2; }

if [ -n "${INPUT_PYTHON:-}" ]; then
    py=$INPUT_PYTHON
    if ! command -v "$py" >/dev/null; then
        say "input python: $py is not a program here"; exit 2
    fi
    # From / : in the workspace a `reporter/` folder of the user's would be imported.
    if ! (cd / && "$py" -c 'import reporter.cli, reporter.action') 2>/dev/null; then
        say "input python: $py cannot import reporter; install it there, or leave python empty"
        exit 2
    fi
else
    REPORTER_EXTRAS="" bash "$root/scripts/setup.sh"  # reporter alone, without its test tools
    py=$root/.venv/bin/python
fi
echo "python=$py" >> "${GITHUB_OUTPUT:-/dev/null}"
echo "reporter-action: $(cd / && "$py" -m reporter --version) ($py)" >&2
