# Shared by scripts/demo and scripts/test: a project venv and, when asked, the pinned OPA and
# the pinned MCP Inspector (the stock client the gateway's end-to-end tests drive).
# Sourced, not executed. Everything is installed by these scripts; nothing is assumed present.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
OPA_VERSION=v1.22.4
INSPECTOR_VERSION=2.12.0   # = scripts/inspector/package.json; tests/e2e/inspector.py reads this line
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

ensure_inspector() {
  # The MCP Inspector's CLI from the npm registry, cached like OPA. scripts/inspector/ pins
  # the whole dependency tree (package-lock.json, written without registry URLs, so npm asks
  # the configured registry), and `npm ci` installs exactly that tree. It is installed into a
  # scratch prefix and moved into place only when complete, so an interrupted install is never
  # mistaken for a cached one; a changed lock file installs afresh.
  local dir="$TOOL_CACHE/inspector-$INSPECTOR_VERSION"
  local bin="$dir/node_modules/.bin/mcp-inspector"
  local lock="$ROOT/scripts/inspector/package-lock.json"
  local stamp
  stamp="$(sha256sum "$lock" | cut -c1-16)"
  if [ ! -x "$bin" ] || [ "$(cat "$dir/.engram-lock" 2>/dev/null)" != "$stamp" ]; then
    command -v npm >/dev/null || { echo "npm is required to install the MCP Inspector" >&2; exit 2; }
    step "installing the MCP Inspector $INSPECTOR_VERSION with npm ci (cached in $dir)"
    mkdir -p "$TOOL_CACHE"
    local scratch
    scratch="$(mktemp -d "$TOOL_CACHE/.inspector-$INSPECTOR_VERSION.XXXXXX")"
    cp "$ROOT/scripts/inspector/package.json" "$lock" "$scratch/"
    # --loglevel=error: the package asks for a newer Node than Debian's; its CLI runs on ours,
    # and the end-to-end tests are what prove that, not npm's engine warning.
    npm ci --prefix "$scratch" --no-audit --no-fund --loglevel=error >&2
    echo "$stamp" >"$scratch/.engram-lock"
    rm -rf "$dir"
    mv "$scratch" "$dir"
  fi
  export ENGRAM_INSPECTOR_BIN="$bin"
  local version
  version="$("$ENGRAM_INSPECTOR_BIN" --cli --version)"
  if [ "$version" != "$INSPECTOR_VERSION" ]; then
    echo "MCP Inspector in $dir is $version, not the pinned $INSPECTOR_VERSION" >&2
    exit 2
  fi
  echo "MCP Inspector $version" >&2
}
