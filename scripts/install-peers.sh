#!/usr/bin/env bash
# Installs the pinned external agent runtimes ("peers") that the opt-in peer suite
# (crates/knife/tests/e2e_peers.rs, KNIFE_PEERS=1) drives, each into its own npm
# prefix under a cache folder outside the repository. Idempotent: a peer whose
# binary already reports the pinned version is left alone.
#
#   scripts/install-peers.sh                 # all four peers
#   scripts/install-peers.sh --only codex    # one peer (repeatable)
#   KNIFE_PEERS_DIR=/some/dir scripts/install-peers.sh
#
# Prints one line per peer: `<name>=<absolute binary path>` (stdout), progress on stderr.
# The test suite reads the same paths through KNIFE_PEER_<NAME>_BIN or finds them
# under KNIFE_PEERS_DIR (default ~/.cache/knife-peers).
set -euo pipefail

PEERS_DIR="${KNIFE_PEERS_DIR:-${HOME:-/root}/.cache/knife-peers}"

# name | npm package@version | binary path inside the prefix | version string the binary prints
PEERS=(
  "codex|@openai/codex@0.169.0|node_modules/.bin/codex|0.169.0"
  "claude-agent-acp|@zed-industries/claude-agent-acp@0.23.1|node_modules/.bin/claude-agent-acp|0.23.1"
  "gemini|@google/gemini-cli@0.61.0|node_modules/.bin/gemini|0.61.0"
  "opencode|opencode-ai@1.18.33|node_modules/.bin/opencode|1.18.33"
)

usage() {
  echo "usage: $0 [--only <codex|claude-agent-acp|gemini|opencode>]... [--dir <folder>]" >&2
  exit 2
}

ONLY=()
while [ $# -gt 0 ]; do
  case "$1" in
    --only) [ $# -ge 2 ] || usage; ONLY+=("$2"); shift 2 ;;
    --dir) [ $# -ge 2 ] || usage; PEERS_DIR="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "install-peers: unknown argument '$1'" >&2; usage ;;
  esac
done

if ! command -v npm >/dev/null 2>&1; then
  echo "install-peers: npm is not on PATH; install Node.js 20+ (apt-get install nodejs npm)" >&2
  exit 1
fi

wanted() {
  local name="$1"
  [ ${#ONLY[@]} -eq 0 ] && return 0
  local o
  for o in "${ONLY[@]}"; do [ "$o" = "$name" ] && return 0; done
  return 1
}

# Every --only name must be a known peer.
for o in "${ONLY[@]+"${ONLY[@]}"}"; do
  known=0
  for spec in "${PEERS[@]}"; do [ "${spec%%|*}" = "$o" ] && known=1; done
  if [ $known -eq 0 ]; then echo "install-peers: unknown peer '$o'" >&2; usage; fi
done

# Is the package already installed at the pinned version? Checked from the
# installed package.json (cheap and offline; some peers are slow to start).
installed_version() {
  local prefix="$1" pkg="$2"
  local pj="$prefix/node_modules/$pkg/package.json"
  [ -f "$pj" ] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version || "")' "$pj" 2>/dev/null || true
}

mkdir -p "$PEERS_DIR"
for spec in "${PEERS[@]}"; do
  IFS='|' read -r name pkgver bin version <<<"$spec"
  wanted "$name" || continue
  pkg="${pkgver%@*}"
  prefix="$PEERS_DIR/$name"
  if [ "$(installed_version "$prefix" "$pkg")" = "$version" ] && [ -x "$prefix/$bin" ]; then
    echo "install-peers: $name $version already installed in $prefix" >&2
  else
    echo "install-peers: installing $pkgver into $prefix" >&2
    mkdir -p "$prefix"
    # A package.json of our own keeps npm from walking up to a parent project.
    [ -f "$prefix/package.json" ] || echo '{"name":"knife-peer-'"$name"'","private":true}' >"$prefix/package.json"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error --save-exact "$pkgver" >&2
    got="$(installed_version "$prefix" "$pkg")"
    if [ "$got" != "$version" ]; then
      echo "install-peers: $name installed as '$got', expected $version" >&2
      exit 1
    fi
  fi
  if [ ! -x "$prefix/$bin" ]; then
    echo "install-peers: $name has no executable at $prefix/$bin" >&2
    exit 1
  fi
  echo "$name=$prefix/$bin"
done
