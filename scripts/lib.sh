# shellcheck shell=bash
# Shared by scripts/test and scripts/demo (sourced, not executed).

step() { printf '\n==> %s\n' "$*" >&2; }

ensure_uv() { # uv on PATH, installed with pip into the current Python if missing
    if command -v uv >/dev/null 2>&1; then
        return 0
    fi
    local python
    python=$(command -v python3 || command -v python || true)
    if [[ -z "$python" ]]; then
        echo "error: uv is not installed and there is no python3 to install it with (pip install uv)" >&2
        exit 1
    fi
    step "installing uv with pip"
    "$python" -m pip install --quiet uv
    # pip's script directory may not be on PATH (user installs, pyenv without a rehash)
    if ! command -v uv >/dev/null 2>&1; then
        command -v pyenv >/dev/null 2>&1 && pyenv rehash 2>/dev/null || true
    fi
    if ! command -v uv >/dev/null 2>&1; then
        local bindir
        bindir=$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
        export PATH="$bindir:$HOME/.local/bin:$PATH"
    fi
    command -v uv >/dev/null 2>&1 || {
        echo "error: installed uv with pip but cannot find it on PATH" >&2
        exit 1
    }
}
