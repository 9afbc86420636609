#!/usr/bin/env bash
# Prints the buf generate template for one domain's REST gateway and OpenAPI
# document: grpc-gateway takes one route config per run, so each domain gets
# its own run with proto/toolmesh/<domain>/v1/<domain>_gateway.yaml.
set -euo pipefail
d=$1
cfg=proto/toolmesh/$d/v1/${d}_gateway.yaml
cat <<JSON
{"version":"v2","plugins":[
 {"local":"bin/protoc-gen-grpc-gateway","out":"proto/gen","opt":["paths=source_relative","grpc_api_configuration=$cfg","generate_unbound_methods=false"]},
 {"local":"bin/protoc-gen-openapiv2","out":"proto/gen/openapi","opt":["grpc_api_configuration=$cfg","allow_merge=true","merge_file_name=$d"]}
]}
JSON
