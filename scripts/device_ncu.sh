#!/usr/bin/env bash
# Hardware counters of our kernels beside cuBLAS's, in one device call (Nsight Compute, clocks left alone):
# $NCU_PROBE (a benchmarks/probes/ncu/*.txt file) holds '#' comments and one line of
# `benchmarks/ncu_kernels.py launch` arguments (--shape ... --contender ...); the report is
# ncu_side.md / .json under $OUT, beside the raw ncu.ncu-rep and its CSV pages (details, raw).
#
#   NCU_PROBE=benchmarks/probes/ncu/mid.txt bash scripts/device_ncu.sh
#   run with carry [".whl", ".cache/cubins"]; needs ncu (Firecracker machines: .library/device/KINDS.md).
# NCU_SECTIONS (space-separated) replaces the default sections; with SourceCounters among them the SASS of every
# profiled kernel, cuBLAS's included, is exported with its per-instruction counts (ncu_source.csv).
set -uo pipefail
OUT=${OUT:-/tmp/tunetable-out}
NCU_PROBE=${NCU_PROBE:-benchmarks/probes/ncu/mid.txt}
read -r -a SECTIONS <<<"${NCU_SECTIONS:-SpeedOfLight MemoryWorkloadAnalysis ComputeWorkloadAnalysis WarpStateStats Occupancy LaunchStats SchedulerStats}"
mkdir -p "$OUT"
source scripts/device_env.sh
ncu --version | tail -1
args=$(grep -v '^#' "$NCU_PROBE" | grep -v '^[[:space:]]*$' | head -1)
# shellcheck disable=SC2086  # the probe line's arguments are split on purpose
timeout "${NCU_TIMEOUT_S:-420}" ncu --clock-control none --profile-from-start off "${SECTIONS[@]/#/--section=}" \
  -o "$OUT/ncu" -f python3 benchmarks/ncu_kernels.py launch --labels "$OUT/ncu_labels.json" $args \
  >"$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?"; tail -n 4 "$OUT/ncu_run.log"
ncu --import "$OUT/ncu.ncu-rep" --csv --page details >"$OUT/ncu.csv" 2>"$OUT/ncu_import.err"
echo "import rc=$?"
# Every raw metric the sections collected (the stall reasons behind WarpStateStats' summary, among others).
ncu --import "$OUT/ncu.ncu-rep" --csv --page raw >"$OUT/ncu_raw.csv" 2>>"$OUT/ncu_import.err"
echo "raw import rc=$?"
if [[ " ${SECTIONS[*]} " == *" SourceCounters "* ]]; then
  ncu --import "$OUT/ncu.ncu-rep" --csv --page source --print-source sass >"$OUT/ncu_source.csv" 2>>"$OUT/ncu_import.err"
  echo "source import rc=$? lines=$(wc -l <"$OUT/ncu_source.csv")"
fi
python3 benchmarks/ncu_kernels.py report "$OUT/ncu.csv" --labels "$OUT/ncu_labels.json" --out "$OUT/ncu_side" >/dev/null
echo "report rc=$?"
