#!/usr/bin/env bash
# Build an sdist of reporter and a wheel from it, install the wheel into a fresh virtual
# environment and render a stored run from that install, in Markdown and PDF: what `pip
# install` gives a user must work without the checkout (templates are package data).
# Run after setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'check-wheel: %s\n' "$*" >&2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The wheel is built from the sdist, so that both are checked: an sdist that missed a
# template would give a wheel that cannot render.
.venv/bin/python -c "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])" \
    "$work/dist" >/dev/null
sdist=$(ls "$work"/dist/reporter-*.tar.gz)
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$work/dist" "$sdist" 2>&1 | grep -v "^WARNING: Location" >&2 || true
wheel=$(ls "$work"/dist/reporter-*.whl)
base=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
"$base" -m venv --system-site-packages "$work/venv"
# The dependencies (torch among them) come from the system and the project's .venv,
# not from a download: .venv's site-packages joins the new environment's path.
# reporter itself comes only from the wheel (the editable install's hook is not run
# from there).
deps=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$deps" > "$site/reporter-deps.pth"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$wheel" 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
cp -r tests/fixtures/runs/cpu-transformer "$work/run"
cd "$work"  # away from the checkout: nothing may come from it
where=$("$work/venv/bin/python" -c 'import reporter.render.languages as r; print(r.__file__, r.builtin_templates())')
case "$where" in
    "$work/venv/"*) ;;
    *) say "reporter was imported from outside the wheel's install: $where"; exit 1 ;;
esac
for lang in en ru zh; do
    "$work/venv/bin/reporter" render "$work/run" --lang "$lang" --format md,pdf >/dev/null
done
for f in report.en.md report.ru.md report.zh.md report.en.pdf report.ru.pdf report.zh.pdf; do
    [ -s "$work/run/$f" ] || { say "missing $f"; exit 1; }
done
say "ok: $(basename "$wheel"), built from $(basename "$sdist"), installed in a fresh environment renders Markdown and PDF in en, ru, zh"
