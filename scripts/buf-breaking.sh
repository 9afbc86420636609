#!/usr/bin/env bash
# buf breaking against the last commit: when proto/ has uncommitted changes,
# compare them with HEAD; on a clean tree (CI), compare HEAD with HEAD~1.
set -euo pipefail
if ! git rev-parse -q --verify HEAD >/dev/null; then
  echo "buf breaking: no commit yet, skipped"; exit 0
fi
against=HEAD
if git diff --quiet HEAD -- proto buf.yaml && [ -z "$(git status --porcelain -- proto)" ]; then
  if ! git rev-parse -q --verify HEAD~1 >/dev/null; then echo "buf breaking: no previous commit, skipped"; exit 0; fi
  against=HEAD~1
fi
if ! git cat-file -e "$against:proto" 2>/dev/null; then
  echo "buf breaking: $against has no proto/, skipped"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git archive "$against" proto | tar -x -C "$tmp"
cp -r .build/protovalidate/. "$tmp/proto/"
buf build "$tmp/proto" --exclude-imports --path "$tmp/proto/toolmesh" -o "$tmp/against.binpb" 2>/dev/null ||
  buf build "$tmp/proto" -o "$tmp/against.binpb"
buf breaking proto --against "$tmp/against.binpb"
echo "buf breaking: no breaking change against $against"
