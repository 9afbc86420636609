#!/usr/bin/env bash
# buf breaking against the last commit: when proto/ has uncommitted changes,
# compare them with HEAD; on a clean tree (CI), compare HEAD with HEAD~1.
# The old tree is checked out into a temporary workspace beside a copy of the
# buf/validate protos, so nothing is fetched from a registry.
set -euo pipefail
if ! git rev-parse -q --verify HEAD >/dev/null; then
  echo "buf breaking: no commit yet, skipped"; exit 0
fi
against=HEAD
if git diff --quiet HEAD -- proto buf.yaml && [ -z "$(git status --porcelain -- proto)" ]; then
  if ! git rev-parse -q --verify HEAD~1 >/dev/null; then echo "buf breaking: no previous commit, skipped"; exit 0; fi
  against=HEAD~1
fi
if ! git cat-file -e "$against:proto" 2>/dev/null || ! git cat-file -e "$against:buf.yaml" 2>/dev/null; then
  echo "buf breaking: $against has no proto workspace, skipped"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git archive "$against" proto buf.yaml | tar -x -C "$tmp"
mkdir -p "$tmp/.build"
cp -r .build/protovalidate "$tmp/.build/"
buf breaking proto --against "$tmp/proto"
echo "buf breaking: no breaking change against $against"
