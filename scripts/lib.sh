# Shared by scripts/demo and scripts/test: a project venv and, when asked, the pinned OPA, the
# pinned MCP Inspector (the stock client the gateway's end-to-end tests drive) and the pinned
# MCP reference memory server (the search benchmark's baseline).
# Sourced, not executed. Everything is installed by these scripts; nothing is assumed present.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
OPA_VERSION=v1.22.4
INSPECTOR_VERSION=2.12.0   # = scripts/inspector/package.json; tests/e2e/inspector.py reads this line
REFERENCE_MEMORY_VERSION=2026.8.31  # = scripts/reference-memory-server/package.json; bench/search_baselines.py reads this line
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

# Installs the npm tree pinned by scripts/$1/ (package.json and a package-lock.json written
# without registry URLs, so npm asks the configured registry; integrity hashes pin the bytes)
# with `npm ci` into $2, cached. It is installed into a scratch prefix and moved into place
# only when complete, so an interrupted install is never mistaken for a cached one; a changed
# lock file installs afresh. $3 is a file the install must contain; $4 names it for messages.
npm_ci_pinned() {
  local src="$ROOT/scripts/$1" dir=$2 want=$3 what=$4
  local lock="$src/package-lock.json"
  local stamp
  stamp="$(sha256sum "$lock" | cut -c1-16)"
  if [ ! -e "$want" ] || [ "$(cat "$dir/.engram-lock" 2>/dev/null)" != "$stamp" ]; then
    command -v npm >/dev/null || { echo "npm is required to install $what" >&2; exit 2; }
    step "installing $what with npm ci (cached in $dir)"
    mkdir -p "$TOOL_CACHE"
    local scratch
    scratch="$(mktemp -d "$TOOL_CACHE/.$(basename "$dir").XXXXXX")"
    cp "$src/package.json" "$lock" "$scratch/"
    # --loglevel=error: some packages ask for a newer Node than Debian's; they run on ours,
    # and the tests that use them are what prove that, not npm's engine warning.
    npm ci --prefix "$scratch" --no-audit --no-fund --loglevel=error >&2
    echo "$stamp" >"$scratch/.engram-lock"
    rm -rf "$dir"
    mv "$scratch" "$dir"
  fi
}

ensure_inspector() {
  # The MCP Inspector's CLI, the stock client tests/e2e drive.
  local dir="$TOOL_CACHE/inspector-$INSPECTOR_VERSION"
  local bin="$dir/node_modules/.bin/mcp-inspector"
  npm_ci_pinned inspector "$dir" "$bin" "the MCP Inspector $INSPECTOR_VERSION"
  export ENGRAM_INSPECTOR_BIN="$bin"
  local version
  version="$("$ENGRAM_INSPECTOR_BIN" --cli --version)"
  if [ "$version" != "$INSPECTOR_VERSION" ]; then
    echo "MCP Inspector in $dir is $version, not the pinned $INSPECTOR_VERSION" >&2
    exit 2
  fi
  echo "MCP Inspector $version" >&2
}

ensure_chromium() {
  # A real headless browser: tests/audit open `audit report`'s HTML in it (--dump-dom).
  if command -v chromium >/dev/null 2>&1; then
    echo "chromium present: $(command -v chromium)" >&2
    return 0
  fi
  step "installing Debian's chromium with apt-get (once; tests/audit open the audit report in it)"
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium
}

ensure_reference_memory_server() {
  # The MCP reference memory server that bench.search_scale compares against (and its smoke in
  # tests/bench runs): installed here, before pytest, so that no test installs anything.
  local dir="$TOOL_CACHE/server-memory-$REFERENCE_MEMORY_VERSION"
  local package="$dir/node_modules/@modelcontextprotocol/server-memory"
  npm_ci_pinned reference-memory-server "$dir" "$package/dist/index.js" \
    "the MCP reference memory server $REFERENCE_MEMORY_VERSION"
  export ENGRAM_REFERENCE_MEMORY_SERVER="$package/dist/index.js"
  local version
  version="$(node -p "require('$package/package.json').version")"
  if [ "$version" != "$REFERENCE_MEMORY_VERSION" ]; then
    echo "reference memory server in $dir is $version, not the pinned $REFERENCE_MEMORY_VERSION" >&2
    exit 2
  fi
  echo "MCP reference memory server $version" >&2
}
