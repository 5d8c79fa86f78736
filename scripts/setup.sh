#!/usr/bin/env bash
# Set reporter up in ./.venv: Python packages and the reporter command.
# Reuses an installed torch (the venv sees the system's site-packages); installs
# torch only when none is importable. Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
TORCH=${REPORTER_TORCH:-torch==2.13.0}   # used only when no torch is installed

say() { printf 'setup: %s\n' "$*" >&2; }

if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    say "reporter needs Python >= 3.10; $PY is $("$PY" -V 2>&1)"; exit 2
fi
# System packages: venv (Debian keeps it apart), Pango for WeasyPrint, fonts for
# Latin and Cyrillic (DejaVu) and Chinese (WenQuanYi Micro Hei: 5 MB installed,
# against 91 MB for fonts-noto-cjk, and it covers the reports' Chinese), and
# poppler-utils, with which the tests read the PDFs back; g++, with which torch.compile's
# Inductor builds its CPU kernels (transformer-compiled and its tests).
need=()
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
for pkg in libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fontconfig fonts-dejavu-core fonts-wqy-microhei \
           poppler-utils g++; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
        say "missing system packages: ${need[*]}; install them as root (apt-get install ...)"; exit 2
    fi
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    say "installing system packages: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    say "creating .venv (with access to the system's packages, so an installed torch is reused)"
    "$PY" -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
    say "no torch found: installing $TORCH"
    .venv/bin/python -m pip install -q "$TORCH"
fi
# REPORTER_EXTRAS: the optional dependencies to add (pyproject.toml), "test" unless set;
# empty for reporter alone (the GitHub Action's setup: scripts/action-setup.sh).
extras=${REPORTER_EXTRAS-test}
say "installing reporter (editable)${extras:+ with its extras: $extras}"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
# reporter's modules and report templates compiled now, as pip compiles a package it
# installs (an editable install is not; where PYTHONDONTWRITEBYTECODE is set, as in many
# containers, Python would compile them at every start: 0.06 s of each command): the
# templates go to ~/.cache/reporter/templates (reporter.render.report.template_cache).
.venv/bin/python -m compileall -q reporter \
    || say "reporter's modules were not compiled ahead; Python compiles them as it imports them"
.venv/bin/python -c 'from reporter.render.report import compile_templates as c; c()' \
    || say "the report templates were not compiled ahead; the first render compiles them"
say "ready: .venv/bin/reporter ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
