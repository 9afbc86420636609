#!/usr/bin/env bash
# Puts the pinned Temporal CLI at DEST (make's bin/temporal): a `temporal`
# already on PATH that embeds the pinned server is linked, so nothing is
# built; otherwise the pinned CLI is built with go install, once.
#
#   scripts/temporal-cli.sh DEST CLI_VERSION SERVER_VERSION
set -euo pipefail
dest=$1 version=$2 server=$3
bindir=$(dirname "$dest")
mkdir -p "$bindir"

IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	[[ -n $d && -x $d/temporal && ! $d -ef $bindir ]] || continue
	found=$("$d/temporal" --version 2>/dev/null || true)
	# A release prints "temporal version 1.5.1 (Server 1.29.1, UI …)"; a
	# go install of the same tag prints "0.0.0-DEV (Server 1.29.1, …)".
	if [[ $found == *"version ${version#v} "* || $found == *"(Server $server,"* ]]; then
		ln -sfn "$d/temporal" "$dest"
		echo "Temporal CLI: using $d/temporal ($found)"
		exit 0
	fi
	echo "Temporal CLI: $d/temporal is not the pinned $version (server $server): ${found:-no version}; not used" >&2
done

echo "Temporal CLI: building $version into $dest (first use only: it embeds the dev server and the Web UI, several minutes on 2 cores) ..."
start=$SECONDS
GOBIN=$bindir go install "github.com/temporalio/cli/cmd/temporal@$version"
echo "Temporal CLI: built in $((SECONDS - start)) s"
