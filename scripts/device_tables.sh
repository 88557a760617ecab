#!/usr/bin/env bash
# Re-record several tables on the H200 in one device call: for each table of $TABLES,
# scripts/device_session.sh bench (grid, compile, every configuration x every default shape plus
# the cuBLAS baselines, record). Each table's logs go to their own folder, packed into one archive
# so that it and the recordings fit the 8 files that come back from $OUT.
#
#   TABLES="gemm_mma gemm_wgmma" TUNETABLE_GIT_REV=<rev> bash scripts/device_tables.sh
#   env: TABLES (default: both GEMM tables), BENCH_TIMEOUT_S per table (device_session.sh's default),
#        RECORDING_PREFIX (h200_: the recordings are <prefix><table>), SHAPES / SHAPES_FILE (device_session.sh)
#   carry [".whl", ".cache/cubins"]: a cubin cache compiled here with the same nvcc skips the device's compile
set -uo pipefail
FINAL_OUT=${OUT:-/tmp/tunetable-out}
mkdir -p "$FINAL_OUT"
LOGS=/tmp/tunetable-tables
mkdir -p "$LOGS"
for table in ${TABLES:-gemm_mma gemm_wgmma}; do
  OUT="$LOGS/$table" TABLE="$table" RECORDING="${RECORDING_PREFIX:-h200_}$table" bash scripts/device_session.sh bench
  rec="${RECORDING_PREFIX:-h200_}$table"
  cp "$LOGS/$table/$rec".parquet "$LOGS/$table/$rec".json "$FINAL_OUT"/ \
    || echo "no recording for $table" | tee -a "$FINAL_OUT/missing.txt"
  rm -f "$LOGS/$table/$rec".parquet "$LOGS/$table/$rec".json  # already in $FINAL_OUT
done
tar czf "$FINAL_OUT/tables_logs.tar.gz" -C "$LOGS" .
for table in ${TABLES:-gemm_mma gemm_wgmma}; do echo "== $table"; cat "$LOGS/$table/summary.txt"; done
