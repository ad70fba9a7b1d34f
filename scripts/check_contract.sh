#!/usr/bin/env bash
# Contract hygiene: buf lint on proto/, then buf breaking against the previous commit,
# so that offsetstore.v1 only grows. Exit status is buf's (100 = a rule was broken).
#
#   scripts/check_contract.sh            # against HEAD~1
#   scripts/check_contract.sh origin/main
#   CONTRACT_BASE=<ref> scripts/check_contract.sh
#
# The working tree is compared with the base commit, so uncommitted proto edits are
# checked too. Breaking is skipped, with a message, where there is nothing to compare
# with: no previous commit (the first one, or a shallow clone that cannot deepen), or
# a base commit without proto/.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${BUF:-}" ]]; then
    buf=$BUF
elif [[ -x .venv/bin/buf ]]; then
    buf=.venv/bin/buf
elif command -v buf >/dev/null 2>&1; then
    buf=buf
else
    echo "check_contract: buf not found; pip install buf-bin (in the dev extra)" >&2
    exit 2
fi

base=${1:-${CONTRACT_BASE:-HEAD~1}}

echo "check_contract: buf lint"
"$buf" lint

if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "check_contract: not a git checkout; skipping buf breaking"
    exit 0
fi

resolve() { git rev-parse --verify --quiet "$1^{commit}" 2>/dev/null; }

commit=$(resolve "$base") || commit=""
if [[ -z $commit && $(git rev-parse --is-shallow-repository) == true ]]; then
    # A shallow CI clone: fetch one more commit of history if a remote is there.
    git fetch --quiet --deepen=1 2>/dev/null || true
    commit=$(resolve "$base") || commit=""
fi
if [[ -z $commit ]]; then
    echo "check_contract: no commit $base to compare with (first commit or shallow clone); skipping buf breaking"
    exit 0
fi
if ! git cat-file -e "$commit:proto" 2>/dev/null; then
    echo "check_contract: $base ($commit) has no proto/; skipping buf breaking"
    exit 0
fi

echo "check_contract: buf breaking against $base ($commit)"
# --against-config: read the base with today's buf.yaml, which also works for a base
# that predates buf.yaml (without it buf would see proto/... paths and report every
# file as deleted).
# A level declared where there was none (IDEMPOTENCY_UNKNOWN before) is a promise added, not
# one broken; buf reports every change of the option, so those findings are shown and let
# through. Changing a declared level, and every other finding, fails with buf's status.
status=0
found=$("$buf" breaking --against ".git#ref=$commit" --against-config buf.yaml 2>&1) || status=$?
declared='changed option "idempotency_level" from "IDEMPOTENCY_UNKNOWN" to '
rest=$(printf '%s\n' "$found" | grep -v -F "$declared" | grep -v '^$' || true)
if [[ -n $found ]]; then
    printf '%s\n' "$found" | grep -F "$declared" | sed 's/^/check_contract: allowed (a level declared): /' || true
fi
if [[ $status -ne 0 && -n $rest ]]; then
    printf '%s\n' "$rest"
    exit "$status"
fi
