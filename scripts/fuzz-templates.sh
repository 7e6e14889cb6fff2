#!/usr/bin/env bash
# Long runs of the values-template fuzzer (crates/gotemplate/tests/template_fuzz): COUNT generated
# templates and data from SEED (decimal or 0x-hex; comma-separated for several), executed by
# stacksync and by the Go oracle (built here by scripts/build-oracles.sh). Prints per seed how
# many agree, how many are documented deliberate differences and how many differ; every
# difference is minimised and printed with its template, data and both results, and the script
# fails.
# Usage: scripts/fuzz-templates.sh SEED COUNT   (e.g. scripts/fuzz-templates.sh 1,2 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  echo "usage: $0 SEED COUNT" >&2
  exit 2
fi
STACKSYNC_TEMPLATE_ORACLE=$(scripts/build-oracles.sh | tail -n 1)
export STACKSYNC_TEMPLATE_ORACLE
STACKSYNC_FUZZ_SEEDS=$1 STACKSYNC_FUZZ_COUNT=$2 \
  cargo test --release --locked -p gotemplate --test template_fuzz -- --nocapture
