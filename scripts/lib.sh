# Shared by scripts/demo and scripts/test: a project venv and, when asked, the pinned OPA.
# Sourced, not executed. Everything is installed by these scripts; nothing is assumed present.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
OPA_VERSION=v1.22.4
TOOL_CACHE=${ENGRAM_TOOL_CACHE:-$HOME/.cache/engram-memory/tools}

# Bold only when stderr is a terminal and NO_COLOR is unset: no escapes in pipes or logs.
step() {
  if [ -t 2 ] && [ -z "${NO_COLOR:-}" ]; then
    printf '\033[1m==> %s\033[0m\n' "$*" >&2
  else
    printf '==> %s\n' "$*" >&2
  fi
}

ensure_venv() {
  local extras=${1:-}
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
  # The stamp makes re-runs fast; it changes whenever pyproject.toml does.
  local stamp="$VENV/.engram-installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)$extras"
  if [ ! -f "$stamp" ]; then
    step "installing engram-memory${extras:+ with $extras} into the virtualenv"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT$extras"
    touch "$stamp"
  fi
}

ensure_opa() {
  # OPA is built from its Go module (no prebuilt binaries can be downloaded here) and cached.
  local dir="$TOOL_CACHE/opa-$OPA_VERSION"
  if [ ! -x "$dir/opa" ]; then
    command -v go >/dev/null || { echo "go is required to build OPA $OPA_VERSION" >&2; exit 2; }
    step "building OPA $OPA_VERSION from its Go module (cached in $dir; takes a few minutes once)"
    mkdir -p "$dir"
    GOBIN="$dir" GOFLAGS=-mod=mod go install "github.com/open-policy-agent/opa@$OPA_VERSION"
  fi
  export ENGRAM_OPA_BIN="$dir/opa"
  # Not `| head -1`: under pipefail, head closing the pipe early can kill opa with SIGPIPE.
  local version
  version="$("$ENGRAM_OPA_BIN" version)"
  echo "${version%%$'\n'*}" >&2
}
