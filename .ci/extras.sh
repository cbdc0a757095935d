#!/usr/bin/env bash
# Each documented extra installed alone in a fresh virtual environment, then one short script on
# its real backend (.ci/extras/check_EXTRA.py): an extra that does not bring all it needs fails here.
# `.ci/run` hides this, since `.[test]` installs every extra's packages (and some they forget).
#
#   .ci/extras.sh [EXTRA ...]      default: all; `core` is `pip install tarry` with no extra
#
# The wheel is built once and installed non-editable in each environment, so the packaged files
# are what runs. pip's cache is shared, so after the first run the installs download nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
scripts=$repo/.ci/extras
if [ $# -gt 0 ]; then extras=("$@"); else extras=(core postgres celery mcp web openai anthropic gemini otel pydantic-ai langgraph openai-agents notify); fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS
if ! python3 -m pip wheel -q --no-deps --wheel-dir "$work/dist" "$repo" >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "extras: the wheel did not build"
    exit 1
fi
wheel=$(ls "$work"/dist/tarry-*.whl)

failed=()
for extra in "${extras[@]}"; do
    began=$SECONDS
    venv=$work/venv-$extra
    log=$work/$extra.log
    spec=$wheel
    [ "$extra" = core ] || spec="$wheel[$extra]"
    # A clean environment: the scripts' folder is the only import path added, and the venv's
    # commands (tarry, celery) come first on PATH.
    # The environment gets no pip of its own (ensurepip costs seconds): this pip installs into it.
    if python3 -m venv --without-pip "$venv" >"$log" 2>&1 &&
        python3 -m pip --python "$venv/bin/python" install -q "$spec" >>"$log" 2>&1 &&
        (cd "$work" && env -u PYTHONPATH -u VIRTUAL_ENV PATH="$venv/bin:$PATH" PYTHONPATH="$scripts" \
            timeout 600 "$venv/bin/python" "$scripts/check_$extra.py") >>"$log" 2>&1; then
        echo "PASS  $extra ($((SECONDS - began)) s): $(tail -n 1 "$log")"
    else
        echo "FAIL  $extra ($((SECONDS - began)) s); the last lines of its log:"
        grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 40 | sed 's/^/    /'
        failed+=("$extra")
    fi
    rm -rf "$venv"
done

if [ ${#failed[@]} -eq 0 ]; then
    echo "extras: all ${#extras[@]} installed alone and worked ($((SECONDS - started)) s)"
else
    echo "extras: ${#failed[@]} of ${#extras[@]} did not work alone: ${failed[*]} ($((SECONDS - started)) s)"
    exit 1
fi
