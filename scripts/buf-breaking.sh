#!/usr/bin/env bash
# buf breaking: the protos on disk against the point where this branch left
# main (git merge-base HEAD main), so every commit of a branch is checked,
# not only its last one. On main itself, with nothing uncommitted under
# proto/, the merge base is HEAD: then the protos are compared with HEAD's
# first parent, which for a merge commit is main before the merge.
#
# BUF_BREAKING_BASE names another base branch (default main; origin/<base>
# is used when there is no local branch of that name).
#
# The old tree is checked out into a temporary workspace beside a copy of the
# buf/validate protos, so nothing is fetched from a registry.
set -euo pipefail
if ! git rev-parse -q --verify HEAD >/dev/null; then
  echo "buf breaking: no commit yet, skipped"; exit 0
fi
base=${BUF_BREAKING_BASE:-main}
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  if git rev-parse -q --verify "origin/$base^{commit}" >/dev/null; then
    base=origin/$base
  else
    echo "buf breaking: no branch $base to compare with, skipped"; exit 0
  fi
fi
against=$(git merge-base HEAD "$base")
if [ "$against" = "$(git rev-parse HEAD)" ] && git diff --quiet HEAD -- proto buf.yaml && [ -z "$(git status --porcelain -- proto)" ]; then
  if ! git rev-parse -q --verify HEAD~1 >/dev/null; then echo "buf breaking: no previous commit, skipped"; exit 0; fi
  against=$(git rev-parse HEAD~1)
fi
if ! git cat-file -e "$against:proto" 2>/dev/null || ! git cat-file -e "$against:buf.yaml" 2>/dev/null; then
  echo "buf breaking: $against has no proto workspace, skipped"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git archive "$against" proto buf.yaml | tar -x -C "$tmp"
mkdir -p "$tmp/.build"
cp -r .build/protovalidate "$tmp/.build/"
buf breaking proto --against "$tmp/proto"
echo "buf breaking: no breaking change against $(git log -1 --format='%h (%s)' "$against")"
